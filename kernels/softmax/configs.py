"""Search space for softmax.

Knobs as rmsnorm (BLOCK_N, num_warps, num_stages; waves_per_eu on HIP). The single-pass form keeps x and exp(x) of the
row live, so the row cap is 32 KiB of the input dtype (64 fp32 registers per thread at 16 warps) and at most 32
elements per thread; looped blocks from 256 up to half the row, where pipelining (num_stages 2) is worth searching.
"""
from __future__ import annotations

from flytune_nb.config import Config
from flytune_nb.dtypes import itemsize
from flytune_nb.spaces import lanes, max_warps, next_pow2, pow2_between, with_hip_knobs

MAX_SINGLE_PASS_BYTES = 32 * 1024
MIN_BLOCK = 256
MAX_ELEMS_PER_THREAD = 32


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
            if (ept >= 1 or warps == 1) and ept <= MAX_ELEMS_PER_THREAD:
                out += [Config({"BLOCK_N": block}, num_warps=warps, num_stages=s) for s in stages]
    return with_hip_knobs(out, device)
