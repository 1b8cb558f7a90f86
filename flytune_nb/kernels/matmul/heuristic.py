"""The heuristic default for matmul (zero search), by regime. H200 numbers: 4.8 TB/s HBM, ~990 dense bf16 TFLOP/s
peak (729 measured at 8192^3): below ~300 flops per byte of weight a GEMM is bound by reading w.

- M <= 128 (bound by reading w): one row tile covers all of M (BM = next_pow2(M), 16..128) so w is read from HBM
  once, and BN is the widest that still gives ~one program per SM (tiles >= 0.9 x SMs; N=4096 -> BN=32, N=14336
  -> BN=64). Re-reading w is nearly free when it fits in L2 (N=K=4096 bf16: 32 MiB of 60): there, for M <= 64, two
  32-row tiles with a wider BN were 1.08x faster than one 64-row tile, in column-major order (GROUP_SIZE_M >= the
  row tiles). Thin rows (BM <= 32): BK=256 when there is at most one program per SM, else 128 (N=14336, M <= 16:
  41 vs 44-46 us with 256), 4 warps, 4 stages. 64-row tiles: BK=64, 4 warps, 5 stages (N=14336, M=48: 42.3 us, the
  best; 47.4 with BK=128 and 4 stages). 128-row tiles: 8 warps; BK=64 with 4 stages, or BK=128 with 5 stages when
  BN=32 (N=4096, M=96/128: 22.3-22.5 us against 37.3 with BK=64). A rule capping BM at 64
  (BN 64) was 1.86x the best at M=96/128, N=14336 on the H200 (32 surrogate picks per shape): two 64-row tiles read
  w's 117 MB twice;
- M > 128 (compute-bound): 128x128x64 tiles on 4 warps, 3 stages, grouped by 8 row tiles so neighbouring programs
  reuse w's panel in L2. The classic Hopper 128x256 on 8 warps is not it: exhaustive H200 sweeps
  (N=K=4096, every config of the space, tests/fixtures/h200_gemm_sweeps.json) put it 1.14-1.17x behind
  128x128 on 4 warps at M=1024 and 4096 (Triton 3.6 without warp specialisation). When 128x128 tiles would fill
  at most half the SMs (M=256, N=4096: 64 tiles on 132 SMs; that default was 2.5x the best), the row tile halves to
  64 and the K tile deepens to 128 with 4 stages on 8 warps (128 tiles; the sweep's best there). Halving when the
  tiles fill more than half (M=512: 128 tiles -> 256, two waves less a few SMs) was 1.33x the best;
  at most one wave of 128x128 tiles runs one CTA per SM, on 8 warps with 5 stages (M=512, N=4096: 33.0 us, the
  sweep's best, against 46.0 on 4 warps and 3 stages, benchmarks/results/NVIDIA_H200/heuristic_ab.json).
  On Hopper, when 128x256 tiles fill at least 3/4 of the SMs: the persistent TMA path (TMA=2) with 128x256x64 tiles
  on 8 warps, 3 stages (4 would not fit beside the output tile the TMA store stages). On the H200
  (benchmarks/gemm_paths.py, K=4096) it was the fastest of 13 tiles x 3 paths at M=4096 N=4096 and
  M=256/4096 N=14336, 0.4% behind TMA=1 at M=1024 N=4096 (0.94-0.98x cuBLAS from M=1024, against 0.77-0.82x for
  this rule's pointer tiles). When its last round of tiles would leave SMs idle and 128x128 tiles fill the rounds
  better, 128x128 on 4 warps, 4 stages: M=1024 N=14336 (448 tiles of 128x256 on 132 SMs, 0.85 of 4 rounds) ran
  175.2 us that way against 181.2 us, the fastest of the run (0.91x cuBLAS). With fewer tiles (M=256, N=4096: 32
  of 132 SMs) the pointer rules stay ahead (26.4 us against 30.4 for the best TMA tile).
  On HIP (64 KiB LDS) 128x128x64 on 4 warps, matrix_instr_nonkdim 16, waves_per_eu 2.
The wish is then landed on the nearest config of the pruned space (fewer stages first, then a thinner K tile, then
narrower N/M tiles), so the default is always one the sweep also times.
"""
from __future__ import annotations

from flytune_nb.config import Config
from flytune_nb.dtypes import itemsize
from flytune_nb.spaces import TILE_WEIGHTS, has_tma, nearest, next_pow2

from .configs import configs


def _weight_bound(M: int, N: int, K: int, dtype_bytes: int, device) -> tuple:
    bm = min(128, max(16, next_pow2(M)))
    if M <= 64 and N * K * dtype_bytes <= device.l2_bytes:
        bm = min(bm, 32)
    rows, bn = -(-M // bm), 256
    while bn > 32 and rows * -(-N // bn) < 0.9 * max(device.sm_count, 1):
        bn //= 2
    programs = rows * -(-N // bn)
    if bm <= 32:  # deep K tiles when there are few programs, each with a long K loop to keep fed
        return bm, bn, 256 if programs <= device.sm_count else 128, 4, 4
    if bm == 64:
        return bm, bn, 64, 4, 5
    return bm, bn, 128 if bn <= 32 else 64, 8, 5 if bn <= 32 else 4


def _wave_use(tiles: int, sms: int) -> float:
    """The share of the SMs' rounds a persistent kernel keeps busy: 448 tiles on 132 SMs take 4 rounds for 3.39 of
    work (0.85); 896 take 7 for 6.79 (0.97)."""
    return tiles / sms / -(-tiles // sms)


def default(shape, dtype, device) -> Config:
    M, N, K = shape["M"], shape["N"], shape["K"]
    # GROUP_SIZE_M 8 everywhere: column-major over up to 8 row tiles, so the row tiles of one w panel run together
    path = {}  # the load path: pointers unless the TMA rule below picks it
    if M <= 128:
        bm, bn, bk, warps, stages = _weight_bound(M, N, K, itemsize(dtype), device)
    elif device.backend == "hip":
        bm, bn, bk, warps, stages = 128, 128, 64, 4, 2
    elif has_tma(device) and -(-M // 128) * -(-N // 256) >= 0.75 * device.sm_count:
        path = {"TMA": 2}
        wide, narrow = (_wave_use(-(-M // 128) * -(-N // bn), device.sm_count) for bn in (256, 128))
        if wide >= 0.9 or wide >= narrow:
            bm, bn, bk, warps, stages = 128, 256, 64, 8, 3
        else:  # 128x256 would leave the last round of tiles mostly idle: 128x128, twice the tiles, 4 warps
            bm, bn, bk, warps, stages = 128, 128, 64, 4, 4
    else:
        bm, bn, bk, warps, stages = 128, 128, 64, 4, 3
        tiles = -(-M // bm) * -(-N // bn)
        if 2 * tiles <= device.sm_count:
            bm, bk, warps, stages = 64, 128, 8, 4
        elif tiles <= device.sm_count:  # one CTA per SM: 8 warps and 5 stages hide latency that 2 CTAs would
            warps, stages = 8, 5
    wish = Config({"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": 8, **path},
                  num_warps=warps, num_stages=stages)
    if device.backend == "hip":
        wish = wish.replace(matrix_instr_nonkdim=16, waves_per_eu=2)
    return nearest(configs(shape, dtype, device), wish, TILE_WEIGHTS)
