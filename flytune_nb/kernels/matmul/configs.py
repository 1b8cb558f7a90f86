"""Search space for matmul: SGLang's knobs (BLOCK_SIZE_M/N/K, GROUP_SIZE_M, num_warps, num_stages; on HIP also
matrix_instr_nonkdim and waves_per_eu), on Hopper TMA (the load path), and the K-splitting knobs SPLIT_K (pointer
path) and STREAM_K (persistent TMA path), pruned before anything compiles.

By the device (flytune_nb.kit.spaces.tile_fits):
- shared memory / LDS: on CUDA the pipeline keeps num_stages (BM*BK + BK*BN) tiles in shared memory, which must fit
  the per-block opt-in maximum (227 KiB on H200); on HIP one LDS copy of the tiles must fit 64 KiB (vLLM's rule);
- registers: the fp32 accumulator is BM*BN/(lanes*warps) values per thread; above 128 it spills (128x256 wants 8
  warps), below 4 most of the warps only wait (16x32 on 8 warps);
- HIP loads (flytune_nb.kit.spaces.prefer_wide_loads): tiles too small for a 16-byte load per lane are left out
  where the shape has any other.
By the shape:
- BM above next_pow2(M) only computes padding (M=1 decode rows -> BM=16, the smallest MMA tile);
- BN above next_pow2(N) and BK above next_pow2(K) likewise; when K is a multiple of 64, BK must divide it, so the
  unmasked EVEN_K loop is the one timed;
- GROUP_SIZE_M only reorders tiles when there is more than one row of tiles; every value >= the number of row tiles
  gives the same (column-major) order, so only the smallest such value is kept;
- more stages than K iterations pipeline nothing.
By the path: on sm_90+ and M > 32 (64-row tiles and taller), every tile is also offered on the persistent TMA path
(TMA=2, absent = pointer loads), whose epilogue stages the output tile in shared memory too, so its smem bound is
tighter. On sm_90+ and M <= 64, the swapped-operand TMA tiles (TMA=1, SWAP_AB=1: w's rows on the MMA's 64-row side)
too: the one row tile that covers M (BM = next_pow2(M), 16..64, so w is read once), BN 64 or 128 (one or two
64-row MMAs), every BK, 4 or 8 warps, and the same K splits as the pointer tiles.
K splitting (flytune_nb.kit.spaces.split_k_options), only where a config's tiles leave SMs idle:
- SPLIT_K 2, 4, 8, 16 for M <= 128 (bound by reading w) on configs whose tiles fill less than one wave, until the
  splits fill four, and 3, 5, 6, 12 where those balance the programs over the SMs (90% of their rounds); each split
  keeps at least two K steps, and the fp32 partials stay under a quarter of w's bytes; one tile order (every tile
  runs in the first wave, so GROUP_SIZE_M orders nothing);
- the same splits of the persistent TMA tiles for 64 < M <= 1024, run as TMA=1 (one program per tile and K range),
  in each tile order (several row tiles share w's panels);
- STREAM_K=1 for TMA=2 configs above M = 64 whose last round of tiles would leave more than 10% of the SMs' rounds
  idle.
DIRECT_STORE=1 on each persistent TMA tile one stage deeper than its deepest staged config. Without the output tile
staged for a TMA store (32 KiB for 128x128 bf16, 64 KiB for 128x256) a 128x128x64 tile runs 6 stages (204,848 bytes
on sm_90, Triton 3.6) and a 128x256x64 one 4 (229,408). Smaller tiles get the 6th stage too, where the staged
configs stop at 5 only because CUDA_STAGES does: that pairs the deeper pipeline with the register store, ~10% more
configs. On an H100 at M = 256-512 (benchmarks/results/NVIDIA_H100_80GB_HBM3/gemm_direct_store.md, side by side
with cuBLAS) those two tiles were the fastest of ten variants at 6 of 12 shapes under graph replay and 10 of 12 L2
flushed (M=512, N=4096, K=11008: 67.9 us against 76.1 for the 5-stage staged tile; M=256, N=14336: 54.8 for
128x256x64 on 4 stages against 58.7). Two persistent programs an SM (CTAS_PER_SM=2, smaller tiles) were never the
fastest there (they beat the staged default at 5 of the 30 shapes, by at most 3%) and are not offered.
bf16 on the H200: M=N=K=4096: 2423 configs (1126 pointer + 1297 TMA, 213 of them DIRECT_STORE; no split: 512
tiles of 128x256 fill 97% of 4 rounds); M=256, N=14336: 1485 (148 stream-K, 116 DIRECT_STORE, 3 split); M=128,
N=4096: 1551 (913 TMA, 426 split, 262 of those on TMA); M=64, N=4096: 1092 (420 persistent TMA, 70 of them
DIRECT_STORE, 68 swapped, 290 split); M=1: 272 (88 swapped, 172 split).
MI300X also crosses matrix_instr_nonkdim 16/32 and waves_per_eu unset/2.
"""
from __future__ import annotations

from itertools import product

from flytune_nb.kit import Config, itemsize
from flytune_nb.kit.spaces import (
    block_k_options, group_options, has_tma, next_pow2, prefer_wide_loads, split_k_options, tile_fits, wave_use,
    with_hip_knobs)

BM, BN = (16, 32, 64, 128, 256), (32, 64, 128, 256)
TMA_FROM_M = 33  # TMA=2 from the first M whose row tile is 64 (Hopper's smallest warpgroup MMA): at M=64 it beat
# the pointer family at every shape under graph replay, at M <= 32 at none (NVIDIA_H200/gemm_decode_tma.md)
SWAP_AB_UP_TO_M = 64  # the swapped tile's narrow MMA side holds all of M up to 64 (wgmma's N goes to 256)
SWAP_BN = (64, 128)  # one or two 64-row warpgroup MMAs over w's rows
SPLIT_K_UP_TO_M = 128  # pointer path; above it the tiles fill the SMs, or on Hopper the TMA path splits
# TMA=1 tiles split K from M = 65 to here where their grid leaves SMs idle: M=128, N=K=4096 has 64 tiles of 64x128
# for 132 SMs, 12.5 us on the persistent path against 10.9 split in two, cuBLAS 12.5; at M=512, N=4096, K=11008
# 64 tiles of 128x256 split in two took 68.6 us against 77.5 for the default's 128 of 128x128, cuBLAS 66.8
# (benchmarks/results/NVIDIA_H200/gemm_mid_tiles.md, graph replay)
TMA_SPLIT_UP_TO_M = 1024
SPLIT_STAGES = (3, 4)  # a split's K loop is 2-16 steps: two depths keep the split configs to ~1/3 of a decode space
STREAM_K_BELOW = 0.9  # wave use under which a persistent config is also offered as stream-K
WARPS = (4, 8)
CUDA_STAGES, HIP_STAGES = (2, 3, 4, 5), (2,)


def configs(shape, dtype, device) -> list[Config]:
    M, N, K = shape["M"], shape["N"], shape["K"]
    hip = device.backend == "hip"
    sms = max(device.sm_count, 1)
    bms = [b for b in BM if b <= max(16, next_pow2(M))]
    bns = [b for b in BN if b <= max(32, next_pow2(N))]
    # TMA only where the descriptors can be made (16-byte row strides of contiguous a, w and out): elsewhere a TMA
    # config would run the pointer path under another name and be timed twice
    aligned = (K * itemsize(dtype)) % 16 == 0 and (N * itemsize(dtype)) % 16 == 0
    paths = (0, 2) if M >= TMA_FROM_M and aligned and has_tma(device) else (0,)
    out = _tiles(M, N, K, dtype, device, bms, bns, paths, sms, idle_warps=False)
    if not out:  # every tile too small to keep its warps busy (N=32 at decode on wave64): those, rather than none
        out = _tiles(M, N, K, dtype, device, bms, bns, paths, sms, idle_warps=True)
    out += _deeper_direct_store(out, N, K, dtype, device)
    if M <= SWAP_AB_UP_TO_M and aligned and has_tma(device):
        out += _swapped(M, N, K, dtype, device, sms)
    if hip:
        out = [c.replace(matrix_instr_nonkdim=nk) for c in prefer_wide_loads(out, dtype, device) for nk in (16, 32)]
    return with_hip_knobs(out, device)


def _tiles(M, N, K, dtype, device, bms, bns, paths, sms, *, idle_warps: bool) -> list[Config]:
    hip = device.backend == "hip"
    out = []
    for bm, bn, bk, warps, stages, tma in product(bms, bns, block_k_options(K, device), WARPS,
                                                  HIP_STAGES if hip else CUDA_STAGES, paths):
        k_steps = -(-K // bk)
        if stages > 2 and stages > k_steps:
            continue
        if not tile_fits(bm, bn, bk, warps, stages, dtype, device, store_tile=tma > 0, idle_warps=idle_warps):
            continue
        tiles = -(-M // bm) * -(-N // bn)
        params = {"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk}
        for g in group_options(-(-M // bm)):
            c = Config({**params, "GROUP_SIZE_M": g, **({"TMA": tma} if tma else {})}, num_warps=warps,
                       num_stages=stages)
            out.append(c)
            # at M <= 64 the pointer path's SPLIT_K balances K (one row tile: stream-K would only add partials)
            if tma == 2 and M > 64 and wave_use(tiles, sms) < STREAM_K_BELOW and tiles * k_steps >= sms:
                out.append(c.replace(STREAM_K=1))
        split_on = {0: M <= SPLIT_K_UP_TO_M, 2: SWAP_AB_UP_TO_M < M <= TMA_SPLIT_UP_TO_M}.get(tma, False)
        if split_on:
            for s in split_k_options(tiles, k_steps, sms, partial_bytes=4 * bm * bn * tiles,
                                     weight_bytes=N * K * itemsize(dtype)):
                if stages not in (HIP_STAGES if hip else SPLIT_STAGES) or stages > max(2, k_steps // s):
                    continue
                # a split on the TMA path is one program per (tile, K range): TMA=1. Its row tiles read the same
                # w panel, so it keeps the grouped orders: M=128, N=K=4096 split 2 in row-major order took 18.9 us
                # under graph replay on the H200 (a serving_vs_torch run), grouped by 8 10.9 (gemm_mid_tiles.md)
                for g in (group_options(-(-M // bm)) if tma else [1]):
                    out.append(Config({**params, "GROUP_SIZE_M": g, "SPLIT_K": s, **({"TMA": 1} if tma else {})},
                                      num_warps=warps, num_stages=stages))
    return out


def _deeper_direct_store(tiles: list[Config], N: int, K: int, dtype, device) -> list[Config]:
    """Each persistent TMA tile (not stream-K) once more, one stage deeper than its deepest staged config, with
    DIRECT_STORE=1: the output tile goes from registers to memory, and the shared memory its TMA store would stage
    holds one more stage of operands (see the module docstring).
    Where N is not a multiple of 16 the output's row stride loses Triton's 16-divisibility, and the register store
    converts the accumulator's layout through shared memory: up to the whole output tile beside the pipeline. At
    M=1024, N=11000, K=4096 (`flytune census matmul --target h200`, Triton 3.6) 256x64x64 on 5 stages asked for
    237,608 bytes against 221,224 at N=11008, over the H200's 232,448, and so did every 256-row tile offered; the
    bound counts the whole tile there, as for a TMA store."""
    deepest: dict = {}
    for c in tiles:
        if c.get("TMA") == 2 and not c.get("STREAM_K"):
            key = (c["BLOCK_SIZE_M"], c["BLOCK_SIZE_N"], c["BLOCK_SIZE_K"], c["GROUP_SIZE_M"], c.num_warps)
            deepest[key] = max(deepest.get(key, 0), c.num_stages)
    out = []
    for (bm, bn, bk, g, warps), stages in deepest.items():
        deeper = stages + 1
        if deeper <= -(-K // bk) and tile_fits(bm, bn, bk, warps, deeper, dtype, device, store_tile=N % 16 != 0):
            out.append(Config({"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": g, "TMA": 2,
                               "DIRECT_STORE": 1}, num_warps=warps, num_stages=deeper))
    return out


def _swapped(M, N, K, dtype, device, sms) -> list[Config]:
    """The swapped-operand TMA tiles (module docstring): one program per tile, so K splits as on the pointer path."""
    bm = max(16, next_pow2(M))
    out = []
    for bn, bk, warps, stages in product([b for b in SWAP_BN if b <= max(64, next_pow2(N))], block_k_options(K, device),
                                         WARPS, CUDA_STAGES):
        k_steps = -(-K // bk)
        # an operand tile under 64 rows of w per warpgroup leaves MMA rows empty (64-wide on 8 warps)
        if (stages > 2 and stages > k_steps) or bn < 64 * (warps // 4):
            continue
        if not tile_fits(bm, bn, bk, warps, stages, dtype, device):
            continue
        params = {"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": 1, "TMA": 1, "SWAP_AB": 1}
        out.append(Config(params, num_warps=warps, num_stages=stages))
        tiles = -(-M // bm) * -(-N // bn)
        for s in split_k_options(tiles, k_steps, sms, partial_bytes=4 * bm * bn * tiles,
                                 weight_bytes=N * K * itemsize(dtype)):
            if stages in SPLIT_STAGES and stages <= max(2, k_steps // s):
                out.append(Config({**params, "SPLIT_K": s}, num_warps=warps, num_stages=stages))
    return out
