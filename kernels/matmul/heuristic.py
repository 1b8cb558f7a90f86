"""The heuristic default for matmul (zero search), by regime. H200 numbers: 4.8 TB/s HBM, ~990 dense bf16 TFLOP/s
peak (729 measured at 8192^3): below ~300 flops per byte of weight a GEMM is bound by reading w.

- M <= 16, decode (memory-bound on w): the smallest row tile (BM=16), BK=256 for long contiguous loads of w, and BN
  small enough that there is at least one tile per SM (N=4096 -> BN=32 -> 128 programs on 132 SMs), 4 warps,
  4 stages in flight to cover HBM latency;
- 16 < M <= 128 (still mostly weight-bound): BM = next_pow2(M) capped at 64, BN 64, BK 128, 4 warps, 4 stages;
- M > 128 (compute-bound): 128x128x64 tiles on 4 warps, 3 stages, grouped by 8 row tiles so neighbouring programs
  reuse w's panel in L2. The classic Hopper 128x256 on 8 warps was our first choice; the exhaustive H200 sweeps of
  session 3 (N=K=4096, every config of the space, tests/fixtures/h200_gemm_sweeps.json) put it 1.14-1.17x behind
  128x128 on 4 warps at M=1024 and 4096 (Triton 3.6 without warp specialisation). When 128x128 tiles would leave
  SMs idle (M=256, N=4096: 64 tiles on 132 SMs; that default was 2.5x the best), the row tile halves to 64 and the
  K tile deepens to 128 with 4 stages on 8 warps (128 tiles; the sweep's best there). On HIP (64 KiB LDS) 128x128x64
  on 4 warps, matrix_instr_nonkdim 16, waves_per_eu 2.
The wish is then landed on the nearest config of the pruned space (fewer stages first, then a thinner K tile, then
narrower N/M tiles), so the default is always one the sweep also times.
"""
from __future__ import annotations

from flytune_nb.config import Config
from flytune_nb.spaces import TILE_WEIGHTS, nearest, next_pow2

from .configs import configs


def default(shape, dtype, device) -> Config:
    M, N = shape["M"], shape["N"]
    if M <= 16:
        bm, bk, warps, stages, group = 16, 256, 4, 4, 1
        bn = 256
        while bn > 32 and -(-N // bn) < max(device.sm_count, 1):
            bn //= 2
    elif M <= 128:
        bm, bn, bk, warps, stages, group = min(64, next_pow2(M)), 64, 128, 4, 4, 1
    elif device.backend == "hip":
        bm, bn, bk, warps, stages, group = 128, 128, 64, 4, 2, 8
    else:
        bm, bn, bk, warps, stages, group = 128, 128, 64, 4, 3, 8
        if -(-M // bm) * -(-N // bn) < device.sm_count:
            bm, bk, warps, stages = 64, 128, 8, 4
    wish = Config({"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": group},
                  num_warps=warps, num_stages=stages)
    if device.backend == "hip":
        wish = wish.replace(matrix_instr_nonkdim=16, waves_per_eu=2)
    return nearest(configs(shape, dtype, device), wish, TILE_WEIGHTS)
