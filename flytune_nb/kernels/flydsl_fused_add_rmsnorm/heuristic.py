"""The heuristic default for flydsl_fused_add_rmsnorm (zero search). Edit freely.

- 16-byte vector accesses (8 bf16 or 4 fp32 elements), narrower only where N is not a multiple of that;
- the fewest threads (a power of two from one 64-lane wave to 1024) at which each keeps at most 16 elements of the
  rounded residual: each thread has two loads (x, r) and one store in flight per vector, so 16 is the plain norm's
  budget already. N=4096 bf16 -> 256 threads;
- no waves_per_eu: the compiler picks the occupancy.
"""
from flytune_nb.kit import Config
from flytune_nb.kit.spaces import vector_widths, wave_row_threads

CACHED = 16


def default(shape, dtype, device):
    N = shape["N"]
    vec = vector_widths(N, dtype)[0]
    return Config({"BLOCK_THREADS": wave_row_threads(N, vec, CACHED), "VEC": vec}, num_warps=None, num_stages=None)
