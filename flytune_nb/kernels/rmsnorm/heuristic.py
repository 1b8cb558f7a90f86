"""The heuristic default: the config used with zero search. Edit freely; the workbench re-scores edits against
stored sweep data.

Rule:
- single pass whenever the row fits 64 KiB (N <= 32768 in bf16): x is then read from HBM exactly once, which is what
  bounds a memory-bound norm;
- warps so each thread holds ~32 bytes of the row (two 16-byte vector loads): enough bytes in flight per thread to
  cover HBM latency without spilling. N=4096 bf16 -> 8 warps; N=1024 -> 2 warps;
- otherwise a looped 8 KiB block with 8 warps and 2 stages, so the next chunk's load overlaps the current FMA.
"""
from __future__ import annotations

from flytune_nb.config import Config
from flytune_nb.dtypes import itemsize
from flytune_nb.spaces import lanes, max_warps, next_pow2


def default(shape, dtype, device) -> Config:
    N, es = shape["N"], itemsize(dtype)
    full = next_pow2(N)
    if full * es <= 64 * 1024:
        warps = max(1, min(max_warps(device) // 2, full * es // (lanes(device) * 32)))
        return Config({"BLOCK_N": full}, num_warps=warps, num_stages=1)
    return Config({"BLOCK_N": 8192 // es}, num_warps=8, num_stages=2)
