"""First sweep of a compile-bound space with and without the precompile pool, each with an empty Triton cache.
fused_add_rmsnorm M=4096 N=8192 bf16: 75 configs. Target: >= 3x faster with precompile."""
from __future__ import annotations

import os
import tempfile
import time

from common import environment, write
from flytune_nb.sweep import Sweep

KERNEL, GRID, DTYPE = "fused_add_rmsnorm", "M=4096 N=8192", "bf16"
TIMER = {"warmup_ms": 5.0, "rep_ms": 25.0}  # sweep-grade timing, the same for both runs


def first_sweep(precompile: bool) -> tuple[float, int]:
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="triton-cache-")  # nothing compiled yet
    t0 = time.perf_counter()
    r = Sweep(KERNEL, GRID, [DTYPE], precompile=precompile, baselines=(), timer=TIMER).run()
    return time.perf_counter() - t0, len(r[0].trials)


def main():
    without, n = first_sweep(False)
    with_pool, n2 = first_sweep(True)
    env = environment()
    payload = {"env": env, "kernel": KERNEL, "grid": GRID, "dtype": DTYPE, "configs": n,
               "without_precompile_s": without, "with_precompile_s": with_pool, "speedup": without / with_pool,
               "cpu_count": os.cpu_count()}
    md = "\n".join([
        f"# Precompile: first sweep of {KERNEL} {GRID} {DTYPE} ({n} configs), empty Triton cache each time",
        f"{env['device']}, {env['date']}, torch {env['torch']}, triton {env['triton']}, {os.cpu_count()} CPU cores", "",
        "| | wall time (s) |", "|---|---|",
        f"| without precompile (the timing worker compiles each config) | {without:.1f} |",
        f"| with precompile (process pool, then timing) | {with_pool:.1f} |",
        f"| speedup | {without / with_pool:.2f}x |", "",
        "Both: isolated timing worker, correctness check per config, no baselines."])
    write("precompile_speedup", payload, md)


if __name__ == "__main__":
    main()
