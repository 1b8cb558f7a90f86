"""First sweep of a compile-bound space with and without the precompile pool, each with an empty Triton cache.
matmul M=N=K=4096 bf16, 50 configs drawn (seed 0) from its 1126-config space: a GEMM config takes seconds to
compile and milliseconds to time. (Run 4 used fused_add_rmsnorm, 75 configs: 1.29x — its configs compile in ~0.3 s,
so timing, not compiling, bounds that sweep.) Target: >= 3x faster with precompile."""
from __future__ import annotations

import os
import random
import tempfile
import time

from common import environment, write
from flytune_nb.device import current_device
from flytune_nb.registry import get_kernel
from flytune_nb.sweep import Sweep

KERNEL, SHAPE, DTYPE, N_CONFIGS = "matmul", {"M": 4096, "N": 4096, "K": 4096}, "bf16", 50
GRID = " ".join(f"{k}={v}" for k, v in SHAPE.items())
TIMER = {"warmup_ms": 5.0, "rep_ms": 25.0}  # the same for both runs


def first_sweep(precompile: bool, configs) -> tuple[float, int]:
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="triton-cache-")  # nothing compiled yet
    t0 = time.perf_counter()
    r = Sweep(KERNEL, GRID, [DTYPE], precompile=precompile, baselines=(), timer=TIMER, configs=configs).run()
    return time.perf_counter() - t0, len(r[0].trials)


def main():
    space = get_kernel(KERNEL).configs(SHAPE, DTYPE, current_device())
    configs = random.Random(0).sample(space, N_CONFIGS)
    without, n = first_sweep(False, configs)
    with_pool, n2 = first_sweep(True, configs)
    env = environment()
    payload = {"env": env, "kernel": KERNEL, "grid": GRID, "dtype": DTYPE, "configs": n,
               "without_precompile_s": without, "with_precompile_s": with_pool, "speedup": without / with_pool,
               "cpu_count": os.cpu_count()}
    md = "\n".join([
        f"# Precompile: first sweep of {KERNEL} {GRID} {DTYPE} ({n} configs of {len(space)}), empty Triton cache "
        "each time",
        f"{env['device']}, {env['date']}, torch {env['torch']}, triton {env['triton']}, {os.cpu_count()} CPU cores", "",
        "| | wall time (s) |", "|---|---|",
        f"| without precompile (the timing worker compiles each config) | {without:.1f} |",
        f"| with precompile (process pool, then timing) | {with_pool:.1f} |",
        f"| speedup | {without / with_pool:.2f}x |", "",
        "Both: isolated timing worker, correctness check per config, no baselines."])
    write("precompile_speedup", payload, md)


if __name__ == "__main__":
    main()
