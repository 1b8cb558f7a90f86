"""The pruned search space for rmsnorm.

Knobs: BLOCK_N (single pass when >= N, else looped), BLOCK_M (rows per single-pass program, absent = 1), num_warps,
num_stages (only matters for the looped form), waves_per_eu on HIP. Pruned before anything compiles:
- single pass only while the row fits 64 KiB: past that each thread holds > 64 fp32 values at 16 warps and spills;
- elements per thread (BLOCK_M * BLOCK_N / threads) kept in [1, 64]: below 1 lanes idle, above 64 registers spill;
- BLOCK_M > 1 while the rows fit 16 KiB and M has that many rows (flytune_nb.spaces.row_space);
- looped blocks from 256 (one 16-byte vector per lane of a 32-lane warp in bf16) up to half the row.
"""
from __future__ import annotations

from flytune_nb.kit import Config
from flytune_nb.kit.spaces import row_space

MAX_SINGLE_PASS_BYTES = 64 * 1024
MAX_ELEMS_PER_THREAD = 64


def configs(shape, dtype, device) -> list[Config]:
    return row_space(shape, dtype, device, max_single_bytes=MAX_SINGLE_PASS_BYTES,
                     max_elems_per_thread=MAX_ELEMS_PER_THREAD)
