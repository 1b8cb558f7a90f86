"""Search space for fused_add_rmsnorm.

Same knobs as rmsnorm (BLOCK_M included), pruned tighter: a single-pass program holds x, r and z for the row at once,
so the row cap is 32 KiB (not 64) and at most 32 elements per thread; the looped form writes the residual in pass one
and re-reads it in pass two, which makes pipelining (num_stages 2-3) worth searching; looped blocks up to 4096.
"""
from __future__ import annotations

from flytune_nb.kit import Config
from flytune_nb.kit.spaces import row_space

MAX_SINGLE_PASS_BYTES = 32 * 1024
MAX_ELEMS_PER_THREAD = 32


def configs(shape, dtype, device) -> list[Config]:
    return row_space(shape, dtype, device, max_single_bytes=MAX_SINGLE_PASS_BYTES,
                     max_elems_per_thread=MAX_ELEMS_PER_THREAD, max_block=4096, looped_stages=(1, 2, 3))
