"""How much faster is a compile-bound space's first sweep with the precompile pool than without it?

Compares the first sweep of the same configs with and without the precompile pool, each in a fresh Python process
with an empty Triton cache (so each pays the same start: the forkserver's torch import, the workers' device
contexts): matmul M=N=K=4096 bf16, configs drawn (seed 0) from its 1126-config space. A GEMM config takes ~0.2-1 s
to compile and ~0.25 ms to run, so compiling bounds the sweep without the pool; a row kernel's configs compile in
~0.2 s and time in about as long, which is why this asks it of a GEMM (fused_add_rmsnorm's 75 configs: 1.29x).
Target: >= 3x faster with precompile at 100 configs.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time

from benchmarks.common import REPO, environment, int_list, need_gpu, parser, write

KERNEL, SHAPE, DTYPE = "matmul", {"M": 4096, "N": 4096, "K": 4096}, "bf16"
GRID = " ".join(f"{k}={v}" for k, v in SHAPE.items())
TIMER = {"warmup_ms": 5.0, "rep_ms": 25.0}  # the same for both runs


def one(precompile: bool, n: int) -> dict:
    """In this (fresh) process: the first sweep of n configs."""
    from flytune_nb.core.device import current_device
    from flytune_nb.core.events import TrialStarted
    from flytune_nb.core.registry import get_kernel
    from flytune_nb.engine.sweep import Sweep

    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="triton-cache-")  # nothing compiled yet
    space = get_kernel(KERNEL).configs(SHAPE, DTYPE, current_device())
    configs = random.Random(0).sample(space, n)
    first = []
    t0 = time.perf_counter()
    r = Sweep(KERNEL, GRID, [DTYPE], precompile=precompile, baselines=(), timer=TIMER, configs=configs,
              listeners=[lambda e: isinstance(e, TrialStarted) and not first and first.append(time.perf_counter())]
              ).run()[0]
    wall = time.perf_counter() - t0
    import statistics

    return {"wall_s": wall, "first_trial_s": first[0] - t0, "trials": len(r.trials),
            "first_launch_s_median": statistics.median(t.compile_s for t in r.trials),
            "ok": sum(t.ok for t in r.trials), "space": len(space)}


def main(argv=None):
    ap = parser(__doc__, __file__)
    ap.add_argument("--sizes", type=int_list, default=[50, 100], metavar="N,...",
                    help="how many configs each sweep draws (default: 50,100)")
    ap.add_argument("--one", nargs=2, metavar=("MODE", "N"), help=argparse.SUPPRESS)  # the fresh process's part
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.one[0] == "with", int(args.one[1]))))
        return
    need_gpu("precompile_speedup")
    # each sweep in a fresh interpreter that imports this checkout's benchmarks and flytune_nb
    child_env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    rows = []
    for n in args.sizes:
        row = {"configs": n}
        for mode in ("without", "with"):
            out = subprocess.run([sys.executable, "-m", "benchmarks", "precompile_speedup", "--one", mode, str(n)],
                                 capture_output=True, text=True, cwd=REPO, env=child_env)
            if out.returncode != 0:
                raise SystemExit(f"{mode} {n}: {out.stderr[-2000:]}")
            row[mode] = json.loads(out.stdout.strip().splitlines()[-1])
        row["speedup"] = row["without"]["wall_s"] / row["with"]["wall_s"]
        rows.append(row)
        print(row, flush=True)
    env = environment()
    payload = {"env": env, "kernel": KERNEL, "grid": GRID, "dtype": DTYPE, "timer": TIMER, "rows": rows,
               "cpu_count": os.cpu_count()}
    md = [f"# Precompile: first sweep of {KERNEL} {GRID} {DTYPE} (configs drawn from its {rows[0]['with']['space']}), "
          "each run in a fresh process with an empty Triton cache",
          f"{env['device']}, {env['date']}, torch {env['torch']}, triton {env['triton']}, {os.cpu_count()} CPU cores", "",
          "| configs | without precompile (s) | with precompile (s) | speedup | first trial starts at (without / with, s) "
          "| a trial's first launch, median (without / with, s) |",
          "|---|---|---|---|---|---|"]
    for r in rows:
        md.append(f"| {r['configs']} | {r['without']['wall_s']:.1f} | {r['with']['wall_s']:.1f} | "
                  f"{r['speedup']:.2f}x | {r['without']['first_trial_s']:.1f} / {r['with']['first_trial_s']:.1f} | "
                  f"{r['without']['first_launch_s_median']:.3f} / {r['with']['first_launch_s_median']:.3f} |")
    md += ["", "Both: isolated timing worker, correctness check per config, no baselines, timer "
           f"warmup {TIMER['warmup_ms']:g} ms / rep {TIMER['rep_ms']:g} ms. Without: the timing worker compiles each "
           "config at its first launch. With: a pool of up to 16 processes compiles them in timing order while the "
           "worker times those already compiled."]
    write("precompile_speedup", payload, "\n".join(md), out=args.out)


if __name__ == "__main__":
    main()
