"""Heuristic default for fused_add_rmsnorm (zero search). Edit freely.

- Single pass while the row fits 32 KiB (N <= 16384 in bf16): the residual is then read once and written once.
- 16 bytes of each row tensor per thread (one vector load of x, one of r): the program keeps three row-sized values
  alive, so it wants twice the warps rmsnorm would use. N=4096 bf16 -> 16 warps on NVIDIA.
- Wider rows: a looped 4 KiB block, 4 warps, 2 stages.
"""
from __future__ import annotations

from flytune_nb.config import Config
from flytune_nb.dtypes import itemsize
from flytune_nb.spaces import lanes, max_warps, next_pow2


def default(shape, dtype, device) -> Config:
    N, es = shape["N"], itemsize(dtype)
    row = next_pow2(N)
    if row * es > 32 * 1024:
        return Config({"BLOCK_N": 4096 // es}, num_warps=4, num_stages=2)
    threads_wanted = row * es // 16
    return Config({"BLOCK_N": row}, num_warps=max(1, min(max_warps(device) // 2, threads_wanted // lanes(device))),
                  num_stages=1)
