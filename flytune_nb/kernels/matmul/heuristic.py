"""The heuristic default for matmul (zero search), by regime. H200 numbers: 4.8 TB/s HBM, ~990 dense bf16 TFLOP/s
peak (729 measured at 8192^3): below ~300 flops per byte of weight a GEMM is bound by reading w.

- M <= 64 (decode, bound by reading w): one row tile covers all of M (BM = next_pow2(M), 16..64), so w is read
  once. When w fits in L2 (N=K=4096 bf16: 32 MiB of 60) it stays there under graph replay and the time is the L2
  traffic: 128-wide column tiles (each re-reads a's rows once: 16 MB at M=64, against 64 MB with 32-wide ones) and
  SPLIT_K to give every SM a share of w (N=4096: 32 tiles, split 4 -> 128 programs for 132 SMs). When it does not
  (N=14336: 117 MB from HBM), BN is the widest that gives ~one program per SM (tiles >= 0.9 x SMs), as swept:
  thin rows (BM <= 32) BK=256 with at most one program per SM, else 128 (N=14336, M <= 16: 41 vs 44-46 us with
  256), 4 warps, 4 stages; 64-row tiles BK=64, 4 warps, 5 stages (N=14336, M=48: 42.3 us, the best; 47.4 with
  BK=128 and 4 stages). Wherever the tiles alone fill under 80% of the SMs, SPLIT_K is the smallest split that
  fills 90% (kit.spaces.split_k_options bounds it).
- 64 < M <= 128: one 128-row tile (8 warps): BK=64 with 4 stages, or BK=128 with 5 stages when BN=32 (N=4096,
  M=96/128: 22.3-22.5 us against 37.3 with BK=64). A rule capping BM at 64 (BN 64) was 1.86x the best at M=96/128,
  N=14336 on the H200: two 64-row tiles read w's 117 MB twice. SPLIT_K as above where the tiles under-fill.
- M > 128 on Hopper (the persistent TMA path, TMA=2; benchmarks/results/NVIDIA_H200/gemm_paths.md: 0.94-0.98x cuBLAS
  from M=1024 against 0.77-0.82x for pointer tiles), by how well each tile size fills the SMs' rounds
  (kit.spaces.wave_use). H200 sweeps, L2 flushed (benchmarks/results/NVIDIA_H200/stores/gemm_mid_m.db, M=128-512 on
  N,K = 4096,4096 / 12288,4096 / 14336,4096 / 4096,14336):
  128x256x64 on 8 warps, 3 stages (4 would not fit beside the output tile the TMA store stages) when its tiles fill
  >= 90% (M=1024/4096, N=4096: the fastest of 13 tiles x 3 paths); else 128x128x64 on 4 warps when those fill >= 90%
  over more than one round, with 5 stages up to three rounds (M=512, N=12288: 384 tiles, 77.6 against 85.2 us with
  4) and 4 beyond (M=1024, N=14336: 896 tiles, 175.2 us); else, one round of 128x128 tiles filling >= 90%, that
  tile on 8 warps with 5 stages (M=512, N=4096: 30.9 us, against 33.3 for the pointer tile); else 128x64x128 tiles
  on 4 warps, 4 stages when those fill >= 90% and 128x128 ones make at most one round (M=256, N=4096: 128 tiles,
  24.5 us, the sweep's best). Otherwise no tile size fills the rounds, and 128x128x64 on 4 warps, 5 stages takes
  the partial round (M=512, N=14336: 102.1 us, the sweep's best; M=256, N=12288: 56.3, 1.08x that sweep's best;
  M=256, N=14336: 58.7 us on 8 warps in the sweep, and on 4 warps 52.2 us under graph replay against 57.1 for the
  committed 4-stage export, benchmarks/results/NVIDIA_H200/serving_vs_torch.md).
  Stream-K (STREAM_K=1, in the space for the search) is never the default: wherever the H200 sweeps timed it
  (stores/trust_resweep.db, gemm_mid_m.db) its best was 1.005-2.82x the best without it, except M=128, N=4096,
  K=14336 (0.95x); at M=256, N=14336 83.4 us on 128x256 tiles against 58.7. Each program writes and reads back an fp32
  partial of up to two tiles (128 KiB for 128x256), and its K loop restarts at every tile it enters.
- M > 128 elsewhere (no TMA): 128x128x64 tiles on 4 warps, 3 stages, grouped by 8 row tiles so neighbouring programs
  reuse w's panel in L2 (the classic 128x256 on 8 warps was 1.14-1.17x behind on the exhaustive H200 sweeps at
  M=1024 and 4096, tests/fixtures/h200_gemm_sweeps.json). When 128x128 tiles would fill at most half the SMs, the
  row tile halves to 64 and the K tile deepens to 128 with 4 stages on 8 warps (M=256, N=4096: 128 tiles; the
  sweep's best there); at most one wave runs one CTA per SM, on 8 warps with 5 stages. On HIP (64 KiB LDS)
  128x128x64 on 4 warps, matrix_instr_nonkdim 16, waves_per_eu 2.
The wish is then landed on the nearest config of the pruned space (fewer stages first, then a thinner K tile, then
narrower N/M tiles), so the default is always one the sweep also times.
"""
from __future__ import annotations

from flytune_nb.kit import Config, itemsize
from flytune_nb.kit.spaces import TILE_WEIGHTS, has_tma, nearest, next_pow2, split_k_options, wave_use

from .configs import configs

FILLED = 0.9  # a tile grid that keeps this share of the SMs' rounds busy needs no K splitting


def _split(tiles: int, K: int, bk: int, bm: int, bn: int, dtype_bytes: int, N: int, sms: int) -> int:
    """The smallest split that brings ``tiles`` programs to 90% of the SMs, when they fill under 80%; 1 otherwise
    (or when no split is allowed)."""
    if tiles >= 0.8 * sms:
        return 1
    options = split_k_options(tiles, -(-K // bk), sms, partial_bytes=4 * bm * bn * tiles,
                              weight_bytes=N * K * dtype_bytes)
    for s in options:
        if tiles * s >= FILLED * sms:
            return s
    return options[-1] if options else 1


def _weight_bound(M: int, N: int, K: int, dtype_bytes: int, device) -> tuple:
    """(BM, BN, BK, warps, stages, SPLIT_K) for M <= 128."""
    sms = max(device.sm_count, 1)
    bm = min(128, max(16, next_pow2(M)))
    rows = -(-M // bm)
    if bm <= 64 and N * K * dtype_bytes <= device.l2_bytes * 0.6:
        bn = min(128, max(32, next_pow2(N)))  # w stays in L2: the wide tile, and splits to fill the SMs
    else:
        bn = 256
        while bn > (32 if bm == 128 else 64) and rows * -(-N // bn) < FILLED * sms:
            bn //= 2
        bn = min(bn, max(32, next_pow2(N)))
    tiles = rows * -(-N // bn)
    if bm <= 32:  # 256-deep K tiles while 4 stages of them fit beside a 64-wide w tile (160 KiB)
        bk = 256 if bn <= 64 else 128
        split = _split(tiles, K, bk, bm, bn, dtype_bytes, N, sms)
        if tiles * split > sms:  # more than one program per SM: shorter K tiles
            bk = 128
        return bm, bn, bk, 4, 4, split
    if bm == 64:
        split = _split(tiles, K, 128, bm, bn, dtype_bytes, N, sms)
        return (bm, bn, 128, 4, 4, split) if split > 1 else (bm, bn, 64, 4, 5, 1)
    bk, stages = (128, 5) if bn <= 32 else (64, 4)
    return bm, bn, bk, 8, stages, _split(tiles, K, bk, bm, bn, dtype_bytes, N, sms)


def _tiles(M: int, N: int, bm: int, bn: int) -> int:
    return -(-M // bm) * -(-N // bn)


def _persistent(M: int, N: int, sms: int) -> tuple:
    """(BM, BN, BK, warps, stages, TMA knobs) for M > 128 on Hopper; see the module docstring."""
    t256, t128, t64 = _tiles(M, N, 128, 256), _tiles(M, N, 128, 128), _tiles(M, N, 128, 64)
    if wave_use(t256, sms) >= FILLED:
        return 128, 256, 64, 8, 3, {"TMA": 2}
    if t128 > sms and wave_use(t128, sms) >= FILLED:
        return 128, 128, 64, 4, 5 if t128 <= 3 * sms else 4, {"TMA": 2}
    if wave_use(t128, sms) >= FILLED:  # one round of 128x128 tiles: one CTA per SM
        return 128, 128, 64, 8, 5, {"TMA": 2}
    if t128 <= sms and wave_use(t64, sms) >= FILLED:  # small problems only: a 128x64 tile reuses little
        return 128, 64, 128, 4, 4, {"TMA": 2}
    return 128, 128, 64, 4, 5, {"TMA": 2}


def default(shape, dtype, device) -> Config:
    M, N, K = shape["M"], shape["N"], shape["K"]
    # GROUP_SIZE_M 8 everywhere: column-major over up to 8 row tiles, so the row tiles of one w panel run together
    extra = {}  # the load path and K splitting: pointers, whole K, unless a rule below says otherwise
    if M <= 128:
        bm, bn, bk, warps, stages, split = _weight_bound(M, N, K, itemsize(dtype), device)
        if split > 1 and device.backend != "hip":  # split-K's reduction is not yet checked on an AMD GPU
            extra = {"SPLIT_K": split}
    elif device.backend == "hip":
        bm, bn, bk, warps, stages = 128, 128, 64, 4, 2
    elif has_tma(device) and (K * itemsize(dtype)) % 16 == 0 and (N * itemsize(dtype)) % 16 == 0:
        bm, bn, bk, warps, stages, extra = _persistent(M, N, max(device.sm_count, 1))
    else:
        bm, bn, bk, warps, stages = 128, 128, 64, 4, 3
        tiles = _tiles(M, N, bm, bn)
        if 2 * tiles <= device.sm_count:
            bm, bk, warps, stages = 64, 128, 8, 4
        elif tiles <= device.sm_count:  # one CTA per SM: 8 warps and 5 stages hide latency that 2 CTAs would
            warps, stages = 8, 5
    group = 1 if extra.get("SPLIT_K") else 8  # split configs are all in the first wave: their order is irrelevant
    wish = Config({"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": group, **extra},
                  num_warps=warps, num_stages=stages)
    if device.backend == "hip":
        wish = wish.replace(matrix_instr_nonkdim=16, waves_per_eu=2)
    space = configs(shape, dtype, device)
    # the nearest tile of the same path (load path, split or not, stream-K or not), if the space has that path here
    same = [c for c in space if _path(c) == _path(wish)]
    return nearest(same or space, wish, {**TILE_WEIGHTS, "SPLIT_K": 1.0})


def _path(c: Config) -> tuple:
    return c.get("TMA", 0), c.get("STREAM_K", 0), c.get("SPLIT_K", 1) > 1
