"""Search space for softmax.

Knobs as rmsnorm (BLOCK_N, BLOCK_M, num_warps, num_stages; waves_per_eu on HIP). The single-pass form keeps x and
exp(x) of the row live, so the row cap is 32 KiB of the input dtype (64 fp32 registers per thread at 16 warps) and at
most 32 elements per thread; looped blocks from 256 up to half the row, where pipelining (num_stages 2) is worth searching.
"""
from __future__ import annotations

from flytune_nb.config import Config
from flytune_nb.spaces import row_space

MAX_SINGLE_PASS_BYTES = 32 * 1024
MAX_ELEMS_PER_THREAD = 32


def configs(shape, dtype, device) -> list[Config]:
    return row_space(shape, dtype, device, max_single_bytes=MAX_SINGLE_PASS_BYTES,
                     max_elems_per_thread=MAX_ELEMS_PER_THREAD)
