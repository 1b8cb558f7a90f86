"""The pruned search space for rmsnorm.

Knobs: BLOCK_N (single pass when >= N, else looped), num_warps, num_stages (only matters for the looped form),
waves_per_eu on HIP. Pruned before anything compiles:
- single pass only while the row fits 64 KiB: past that each thread holds > 64 fp32 values at 16 warps and spills;
- elements per thread (BLOCK_N / threads) kept in [1, 64]: below 1 lanes idle, above 64 registers spill;
- looped blocks from 256 (one 16-byte vector per lane of a 32-lane warp in bf16) up to half the row.
"""
from __future__ import annotations

from flytune_nb.config import Config
from flytune_nb.dtypes import itemsize
from flytune_nb.spaces import lanes, max_warps, next_pow2, pow2_between, with_hip_knobs

MAX_SINGLE_PASS_BYTES = 64 * 1024
MIN_BLOCK = 256
MAX_ELEMS_PER_THREAD = 64


def configs(shape, dtype, device) -> list[Config]:
    N = shape["N"]
    full = next_pow2(N)
    single = [full] if full * itemsize(dtype) <= MAX_SINGLE_PASS_BYTES else []
    looped = pow2_between(MIN_BLOCK, min(full // 2, 8192))
    out = []
    for block in single + looped:
        stages = (1,) if block >= N else (1, 2)
        for warps in pow2_between(1, max_warps(device)):
            ept = block / (warps * lanes(device))
            if (ept >= 1 or warps == 1) and ept <= MAX_ELEMS_PER_THREAD:  # tiny rows: one warp, some lanes idle
                out += [Config({"BLOCK_N": block}, num_warps=warps, num_stages=s) for s in stages]
    return with_hip_knobs(out, device)
