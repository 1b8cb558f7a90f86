"""Does a flytune sweep cost less wall time than triton.autotune's first call over the same configs?

Compares the same rmsnorm kernel (M=4096 N=4096 bf16) and the same config list: flytune's sweep (isolated worker,
precompile pool, NaN-poisoned correctness check on every config) against triton.autotune's first call, each from an
empty Triton cache; then a later sweep, with flytune's process server already up, as a notebook's second sweep finds
it. Target: ratio <= 1.0. The first sweep pays the forkserver's imports, so it depends on whether Python has bytecode
caches (a pip install compiles them; a host with PYTHONDONTWRITEBYTECODE=1 and no .pyc files compiles every module's
source in every fresh process): the result records `bytecode_writes`."""
from __future__ import annotations

import os
import tempfile
import time
from importlib import import_module

import torch
import triton

from benchmarks.common import environment, need_gpu, parser, write
from flytune_nb.core.device import current_device
from flytune_nb.core.registry import get_kernel
from flytune_nb.engine.sweep import Sweep

SHAPE, DTYPE = {"M": 4096, "N": 4096}, "bf16"


def fresh_cache() -> None:
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="triton-cache-")


def _preload_times() -> dict:
    import flytune_nb.engine._preload as p

    return p.TIMES


def server_times(since: float) -> dict:
    """When flytune's forkserver (started by the first sweep) ran its preload, seconds after ``since`` (wall clock),
    and how long its parts took (flytune_nb.engine._preload.TIMES, asked of a process forked from it)."""
    import concurrent.futures as cf

    from flytune_nb.engine.processes import context

    with cf.ProcessPoolExecutor(1, mp_context=context()) as ex:
        t = ex.submit(_preload_times).result(timeout=120)
    return {k: (v - since if k.startswith("wall") else v) for k, v in t.items()}


def flytune_sweep(spec):
    """One sweep from an empty Triton cache: wall time, where it went, the result, and the epoch time it began."""
    fresh_cache()
    marks = []  # (seconds since start, event type): where our time goes
    wall0 = time.time()
    t0 = time.perf_counter()
    res = Sweep(spec.name, {k: [v] for k, v in SHAPE.items()}, [DTYPE], baselines=(),
                listeners=[lambda e: marks.append((time.perf_counter() - t0, type(e).__name__))]).run()[0]
    wall = time.perf_counter() - t0
    first = next(t for t, kind in marks if kind == "TrialStarted")
    last = max(t for t, kind in marks if kind in ("TrialDone", "TrialFailed"))
    return wall, {"start_and_first_compile_s": first, "timing_and_checks_s": last - first, "finish_s": wall - last}, \
        res, wall0


def main(argv=None):
    ap = parser(__doc__, __file__)
    ap.add_argument("--name", default="cost_vs_autotune", help="result file name (default: %(default)s)")
    args = ap.parse_args(argv)
    need_gpu("cost_vs_autotune")
    dev = current_device()
    spec = get_kernel("rmsnorm")
    configs = list(dict.fromkeys([spec.default(SHAPE, DTYPE, dev)] + spec.configs(SHAPE, DTYPE, dev)))
    kmod = import_module(spec.run.__module__ + ".kernel")  # the folder's kernel.py, as the registry loaded it

    ours, phases, res, wall0 = flytune_sweep(spec)
    server = server_times(wall0)
    fresh_cache()
    N = SHAPE["N"]
    tconfigs = [triton.Config({"BLOCK_M": c.get("BLOCK_M", 1), "BLOCK_N": c["BLOCK_N"], "SINGLE_PASS": c["BLOCK_N"] >= N},
                              num_warps=c.num_warps, num_stages=c.num_stages) for c in configs]
    tuned = triton.autotune(configs=tconfigs, key=["N"])(kmod.rmsnorm_kernel)
    inputs = spec.make_inputs(SHAPE, DTYPE, dev)
    x, w, y = inputs["x"], inputs["weight"], inputs["out"]
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    M = SHAPE["M"]
    tuned[lambda meta: (triton.cdiv(M, meta["BLOCK_M"]),)](x, w, y, M, x.stride(0), y.stride(0), N, 1e-6)
    torch.cuda.synchronize()
    theirs = time.perf_counter() - t0
    # A notebook's later sweeps find flytune's forkserver already running (torch imported once per session).
    again, again_phases, _, _ = flytune_sweep(spec)
    env = environment()
    payload = {"env": env, "shape": SHAPE, "dtype": DTYPE, "configs": len(configs), "flytune_s": ours,
               "triton_autotune_s": theirs, "ratio": ours / theirs, "flytune_best": str(res.best.config),
               "flytune_best_us": res.best.p50 * 1e3, "autotune_best": str(tuned.best_config), "flytune_phases": phases,
               "flytune_second_sweep_s": again, "flytune_second_phases": again_phases, "ratio_second": again / theirs,
               "forkserver": server}
    md = "\n".join([
        f"# Tuning cost: rmsnorm M={SHAPE['M']} N={SHAPE['N']} {DTYPE}, {len(configs)} configs, empty Triton cache",
        f"{env['device']}, {env['date']}, torch {env['torch']}, triton {env['triton']}, {os.cpu_count()} CPU cores, "
        f"Python bytecode writes {'on' if env['bytecode_writes'] else 'off (PYTHONDONTWRITEBYTECODE)'}",
        "", "| | wall time (s) |", "|---|---|",
        f"| flytune, first sweep of the session (isolated worker + precompile + correctness per config) | {ours:.1f} |",
        f"| triton.autotune first call | {theirs:.1f} |",
        f"| **ratio (flytune first sweep / autotune)** | **{ours / theirs:.2f}** |",
        f"| flytune, a later sweep (flytune's process server already up), empty Triton cache again | {again:.1f} |",
        f"| ratio (later sweep / autotune) | {again / theirs:.2f} |",
        "", "Where the first sweep's time went: start (the forkserver's torch import, worker and pool start, the first "
        f"config's compile) {phases['start_and_first_compile_s']:.1f} s, timing + correctness of every config (the "
        f"pool compiling ahead) {phases['timing_and_checks_s']:.1f} s, finish {phases['finish_s']:.1f} s. "
        f"The later sweep: {again_phases['start_and_first_compile_s']:.1f} / {again_phases['timing_and_checks_s']:.1f}"
        f" / {again_phases['finish_s']:.1f} s.",
        "", f"The first sweep's forkserver (seconds after the sweep began): its preload began at "
        f"{server['wall_start']:.1f} (Python, multiprocessing, the flytune_nb package and torch), Triton took "
        f"{server.get('triton_s', 0):.1f}, torch's meta-op imports {server.get('meta_ops_s', 0):.1f} beside Triton's "
        f"version key {server.get('triton_key_s', 0):.1f} (then waited {server.get('key_wait_s', 0):.1f} for it), "
        f"ready at {server['wall_end']:.1f}.",
        "", "Timer on both sides: warm-up 25 ms, then 100 ms of reps (triton.autotune's defaults: do_bench warmup=25, "
        "rep=100); flytune also flushes L2 before every rep and checks every config against the reference.",
        "", f"flytune best: `{res.best.config}` ({res.best.p50 * 1e3:.1f} us); autotune best: `{tuned.best_config}`"])
    write(args.name, payload, md, out=args.out)


if __name__ == "__main__":
    main()
