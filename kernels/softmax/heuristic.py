"""The heuristic default for softmax (zero search).

- single pass whenever the row fits 32 KiB (N <= 16384 in bf16): x is read from HBM once, the memory-bound minimum;
- warps so that each thread holds ~16 bytes of the row (one 16-byte vector load): softmax keeps two fp32 values per
  element live (x and exp(x)), twice rmsnorm's, so it gets twice the threads. N=4096 bf16 -> 16 warps, N=1024 -> 4;
- wider rows: looped 4 KiB blocks, 8 warps, 2 stages so the next block's load overlaps the exponentials.
"""
from __future__ import annotations

from flytune_nb.config import Config
from flytune_nb.dtypes import itemsize
from flytune_nb.spaces import lanes, max_warps, next_pow2

from .configs import MAX_SINGLE_PASS_BYTES


def default(shape, dtype, device) -> Config:
    N, es = shape["N"], itemsize(dtype)
    full = next_pow2(N)
    if full * es <= MAX_SINGLE_PASS_BYTES:
        warps = max(1, min(max_warps(device) // 2, full * es // (lanes(device) * 16)))
        return Config({"BLOCK_N": full}, num_warps=warps, num_stages=1)
    return Config({"BLOCK_N": 4096 // es}, num_warps=8, num_stages=2)
