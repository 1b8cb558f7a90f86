"""Search space for flydsl_fused_add_rmsnorm: (BLOCK_THREADS, VEC) x waves_per_eu, as flydsl_rmsnorm's.

Each thread keeps one row-sized value (the rounded residual) in registers, as the plain norm keeps x; x and the old
residual pass through on the way. So the same cap: at most 32 elements per thread (bf16 N=4096: 19-56 VGPRs, no
spill, on gfx942 and gfx950), at least half the threads loading, 16- and 8-byte vectors, waves_per_eu unset / 2 /
4 / 8. N=4096 bf16: 32 configs.
"""
from flytune_nb.kit.spaces import wave_row_space

MAX_CACHED = 32
WAVES_PER_EU = (None, 2, 4, 8)


def configs(shape, dtype, device):
    return wave_row_space(shape, dtype, max_cached=MAX_CACHED, waves_per_eu=WAVES_PER_EU)
