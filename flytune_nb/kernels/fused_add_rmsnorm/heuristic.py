"""Heuristic default for fused_add_rmsnorm (zero search). Edit freely.

- Single pass while the row fits 32 KiB (N <= 16384 in bf16) and M <= 256: the residual is then read once and
  written once. 16 bytes of each row tensor per thread (one vector load of x, one of r): the program keeps three
  row-sized values alive, so it wants twice the warps rmsnorm would use. N=4096 bf16 -> 16 warps on NVIDIA; from
  M=24 to 256 (a row per SM, no more) the H200 sweeps favoured twice that again, 8 bytes a thread, up to 32 warps.
- From M=512 rows on (more rows than SMs, several programs per SM), Inductor's two-pass form (kernel.py): 2 stages,
  a block of half the padded row where the row fills more than 3/4 of it (4096 -> 2048, 8192 -> 4096, 7168 -> 4096)
  and a quarter otherwise (5120 -> 2048), at most 4096, on block/256 warps. N=7168 at M=4096 / 16384 (graph replay,
  stores/rows_wide.db): 4096 on 16 warps 59.5 / 222.9 us, level with torch.compile's 61.1 / 221.5, against 64.4 /
  253.1 for a quarter block (2048 on 8). H200 sweeps: at M=4096 the looped 2048-4096 blocks beat the
  single pass at N=4096, 5120 and 8192 (45.6 against 46.1 us at 5120; 70.3 at 8192); at M=32768, N=4096 Inductor's
  looped kernel ran 255.6 us against our single pass's 264.7.
- Wider rows: a looped 4 KiB block, 4 warps, 2 stages.
The thresholds are what analysis/fit.py found on the H200 sweeps (python -m benchmarks heuristic_fit).
"""
from __future__ import annotations

from flytune_nb.kit import Config, itemsize
from flytune_nb.kit.spaces import lanes, max_warps, next_pow2

MANY_ROWS = 512


def default(shape, dtype, device) -> Config:
    M, N, es = shape["M"], shape["N"], itemsize(dtype)
    row = next_pow2(N)
    if row * es > 32 * 1024:
        return Config({"BLOCK_N": 4096 // es}, num_warps=4, num_stages=2)
    if M >= MANY_ROWS and row >= 2048:
        block = min(4096, row // 2 if 4 * N > 3 * row else row // 4)
        # at most 8 elements a thread, and each lane's share one 16-byte load (on wave64: half the warps)
        warps = min(max_warps(device), block // 256, block * es // (lanes(device) * 16))
        return Config({"BLOCK_N": block}, num_warps=max(1, warps), num_stages=2)
    bytes_per_thread = 8 if 24 <= M <= 256 else 16
    threads_wanted = row * es // bytes_per_thread
    cap = max_warps(device) if bytes_per_thread == 8 else max_warps(device) // 2
    return Config({"BLOCK_N": row}, num_warps=max(1, min(cap, threads_wanted // lanes(device))), num_stages=1)
