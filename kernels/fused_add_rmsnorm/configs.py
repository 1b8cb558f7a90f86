"""Search space for fused_add_rmsnorm.

Same knobs as rmsnorm, pruned tighter: a single-pass program holds x, r and z for the row at once, so the row cap is
32 KiB (not 64) and at most 32 elements per thread; the looped form writes the residual in pass one and re-reads it in
pass two, which makes pipelining (num_stages 2-3) worth searching.
"""
from __future__ import annotations

from flytune_nb.config import Config
from flytune_nb.dtypes import itemsize
from flytune_nb.spaces import lanes, max_warps, next_pow2, pow2_between, with_hip_knobs

MAX_SINGLE_PASS_BYTES = 32 * 1024
MAX_ELEMS_PER_THREAD = 32


def configs(shape, dtype, device) -> list[Config]:
    N = shape["N"]
    full = next_pow2(N)
    candidates = []
    if full * itemsize(dtype) <= MAX_SINGLE_PASS_BYTES:
        candidates.append((full, (1,)))
    candidates += [(b, (1, 2, 3)) for b in pow2_between(256, min(full // 2, 4096))]
    out = []
    for block, stages in candidates:
        for warps in pow2_between(1, max_warps(device)):
            per_thread = block / (warps * lanes(device))
            if (per_thread >= 1 or warps == 1) and per_thread <= MAX_ELEMS_PER_THREAD:
                out.extend(Config({"BLOCK_N": block}, num_warps=warps, num_stages=s) for s in stages)
    return with_hip_knobs(out, device)
