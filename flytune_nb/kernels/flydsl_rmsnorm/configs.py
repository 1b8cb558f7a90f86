"""Search space for flydsl_rmsnorm: (BLOCK_THREADS, VEC) x waves_per_eu, pruned before anything compiles.

- VEC: 16-byte vectors (8 bf16 / 4 fp32 elements) and 8-byte ones, where they divide N;
- BLOCK_THREADS: one wave (64) to 1024, while each thread keeps at most 32 row elements in registers (bf16 N=4096:
  13-64 VGPRs, no spill, on gfx942 and gfx950) and at least half the threads load something;
- waves_per_eu: unset, 2, 4, 8 (an occupancy hint; on these kernels 2 in 3 hinted configs compile to the same code
  object as the unhinted one, the rest trade registers for occupancy).
N=4096 bf16: 8 structural configs x 4 hints = 32.
"""
from flytune_nb.kit.spaces import wave_row_space

MAX_CACHED = 32
WAVES_PER_EU = (None, 2, 4, 8)


def configs(shape, dtype, device):
    return wave_row_space(shape, dtype, max_cached=MAX_CACHED, waves_per_eu=WAVES_PER_EU)
