"""The heuristic default for softmax (zero search).

- single pass whenever the row fits 32 KiB (N <= 16384 in bf16): x is read from HBM once, the memory-bound minimum;
- warps so that each thread holds ~32 bytes of the row (two 16-byte vector loads), up to the device's maximum:
  N=1024 bf16 -> 2 warps, 4096 -> 8, 8192 -> 16, 16384 -> 32. The first rule gave each thread 16 bytes (twice the
  threads, because softmax keeps x and exp(x) live), which the H200 sweeps did not bear out: at N=4096, 16 warps were
  1.14-1.22x slower than 8 for M >= 1024 (an exhaustive H200 sweep), and
  at N=16384, 32 warps beat 16 (H200);
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
        warps = max(1, min(max_warps(device), full * es // (lanes(device) * 32)))
        return Config({"BLOCK_N": full}, num_warps=warps, num_stages=1)
    return Config({"BLOCK_N": 4096 // es}, num_warps=8, num_stages=2)
