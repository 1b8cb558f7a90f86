"""What flytune's forkserver imports once, so that every worker and pool process forked from it starts with it
(flytune_nb.procs). Nothing here may initialise CUDA/HIP: a process forked after that cannot use the GPU.

- torch and Triton: 3.3 s to import on the H200 host (2026-11-30), once instead of once per process.
- triton.runtime.cache.triton_key(): Triton's own version key, which hashes Triton's compiler sources and reads all
  of libtriton (lru-cached per process). It is the bulk of the first compile in every fresh process: a pool
  process's first GEMM compile took 3.9 s against 0.17-0.19 s for the next ones (startup_profile_s4c.json); 0.67 s
  of a 0.78 s first compile on the CPU machines.
"""
import torch  # noqa: F401
import triton  # noqa: F401

try:
    from triton.runtime.cache import triton_key

    triton_key()
except Exception:  # noqa: BLE001 - another Triton's internals: each process computes its key on first compile
    pass
