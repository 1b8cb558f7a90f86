"""Search space for matmul: SGLang's knobs (BLOCK_SIZE_M/N/K, GROUP_SIZE_M, num_warps, num_stages; on HIP also
matrix_instr_nonkdim and waves_per_eu) and, on Hopper, TMA (the load path), pruned before anything compiles.

By the device (flytune_nb.spaces.tile_fits):
- shared memory / LDS: on CUDA the pipeline keeps num_stages (BM*BK + BK*BN) tiles in shared memory, which must fit
  the per-block opt-in maximum (227 KiB on H200); on HIP one LDS copy of the tiles must fit 64 KiB (vLLM's rule);
- registers: the fp32 accumulator is BM*BN/(lanes*warps) values per thread; above 128 it spills (128x256 wants 8
  warps), below 4 most of the warps only wait (16x32 on 8 warps).
By the shape:
- BM above next_pow2(M) only computes padding (M=1 decode rows -> BM=16, the smallest MMA tile);
- BN above next_pow2(N) and BK above next_pow2(K) likewise; when K is a multiple of 64, BK must divide it, so the
  unmasked EVEN_K loop is the one timed;
- GROUP_SIZE_M only reorders tiles when there is more than one row of tiles; every value >= the number of row tiles
  gives the same (column-major) order, so only the smallest such value is kept;
- more stages than K iterations pipeline nothing.
By the path: on sm_90+ and M > 128, every tile is also offered on the persistent TMA path (TMA=2, absent = pointer
loads), whose epilogue stages the output tile in shared memory too, so its smem bound is tighter.
bf16, M=N=K=4096: 2210 configs on the H200 (1126 pointer + 1084 TMA); M=64: 356; M=1: 68. MI300X also crosses
matrix_instr_nonkdim 16/32 and waves_per_eu unset/2.
"""
from __future__ import annotations

from itertools import product

from flytune_nb.config import Config
from flytune_nb.dtypes import itemsize
from flytune_nb.spaces import block_k_options, group_options, has_tma, next_pow2, tile_fits, with_hip_knobs

BM, BN = (16, 32, 64, 128, 256), (32, 64, 128, 256)
TMA_FROM_M = 128  # TMA=2 is crossed in above this M only: at M=16 and 64 it was level with pointers (gemm_paths_s6a)
WARPS = (4, 8)
CUDA_STAGES, HIP_STAGES = (2, 3, 4, 5), (2,)


def configs(shape, dtype, device) -> list[Config]:
    M, N, K = shape["M"], shape["N"], shape["K"]
    hip = device.backend == "hip"
    bms = [b for b in BM if b <= max(16, next_pow2(M))]
    bns = [b for b in BN if b <= max(32, next_pow2(N))]
    # TMA only where the descriptors can be made (16-byte row strides of contiguous a, w and out): elsewhere a TMA
    # config would run the pointer path under another name and be timed twice
    aligned = (K * itemsize(dtype)) % 16 == 0 and (N * itemsize(dtype)) % 16 == 0
    paths = (0, 2) if M > TMA_FROM_M and aligned and has_tma(device) else (0,)
    out = []
    for bm, bn, bk, warps, stages, tma in product(bms, bns, block_k_options(K, device), WARPS,
                                                  HIP_STAGES if hip else CUDA_STAGES, paths):
        if stages > 2 and stages > -(-K // bk):
            continue
        if not tile_fits(bm, bn, bk, warps, stages, dtype, device, store_tile=tma > 0):
            continue
        for g in group_options(-(-M // bm)):
            params = {"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": g}
            c = Config({**params, "TMA": tma} if tma else params, num_warps=warps, num_stages=stages)
            out += [c.replace(matrix_instr_nonkdim=nk) for nk in (16, 32)] if hip else [c]
    return with_hip_knobs(out, device)
