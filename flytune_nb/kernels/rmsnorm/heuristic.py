"""The heuristic default: the config used with zero search. Edit freely; the workbench re-scores edits against
stored sweep data.

Rule:
- single pass whenever the row fits 64 KiB (N <= 32768 in bf16): x is then read from HBM exactly once, which is what
  bounds a memory-bound norm;
- warps so each thread holds ~32 bytes of the row (two 16-byte vector loads) from M=256 up: enough bytes in flight
  per thread to cover HBM latency without spilling (N=4096 bf16 -> 8 warps; N=1024 -> 2 warps; at most 16), counted
  on the row itself, not on its power-of-two block, and rounded down: N=7168 bf16 -> 8 warps, not the 16 of a full
  8192 (H200, graph replay, stores/rows_wide.db: M=4096 30.8 against 32.7 us, M=16384 114.1 against 122.2), and
  N=5120 -> 8 (its committed H200 export: 8-warp 8192 blocks won at M=256, 512 and 3072); at
  M <= 128 there are fewer rows than SMs, each row's program is alone on its SM, and half that (16 bytes, up to 32
  warps) spreads its loads over more threads. The split at M=128 is what analysis/fit.py found on the H200 sweeps
  (benchmarks/results/NVIDIA_H200/stores/h200_sweeps.db, 72 bf16 shapes): regret 1.005 against 1.017 for the 32-byte rule everywhere,
  each N held out of the fit in turn (python -m benchmarks heuristic_fit);
- otherwise a looped 8 KiB block with 8 warps and 2 stages, so the next chunk's load overlaps the current FMA.
"""
from __future__ import annotations

from flytune_nb.kit import Config, itemsize
from flytune_nb.kit.spaces import lanes, max_warps, next_pow2, prev_pow2

FEW_ROWS = 128  # at most this many rows: one program per SM and some SMs idle


def default(shape, dtype, device) -> Config:
    M, N, es = shape["M"], shape["N"], itemsize(dtype)
    full = next_pow2(N)
    if full * es <= 64 * 1024:
        per_thread, cap = (16, max_warps(device)) if M <= FEW_ROWS else (32, max_warps(device) // 2)
        warps = max(1, min(cap, prev_pow2(N * es // (lanes(device) * per_thread))))
        return Config({"BLOCK_N": full}, num_warps=warps, num_stages=1)
    return Config({"BLOCK_N": 8192 // es}, num_warps=8, num_stages=2)
