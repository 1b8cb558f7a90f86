"""Where does a sweep's fixed cost go on this machine?

Measures, section by section: process start (spawned and through flytune's forkserver, with and without a device
context), imports, per-config compile, one trial's parts (inputs, reference, checked launch, timer), a traced sweep
(worker start, each call, the pool), whether a precompile pool process holds a CUDA context (ctx), and the timing
worker profiled with cProfile (cprofile). It informed the precompile pool's and the timing worker's design; compare
the sections' numbers with each other, within one run on one machine.
"""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import tempfile
import time

from benchmarks.common import environment, need_gpu, parser, results_dir, write


def _child(q, t_spawn, what):
    t0 = time.perf_counter()
    marks = {"since_spawn_s": time.time() - t_spawn}
    import torch  # noqa: F401
    marks["import_torch_s"] = time.perf_counter() - t0
    import triton  # noqa: F401
    from flytune_nb.core.registry import get_kernel
    get_kernel("rmsnorm")
    marks["import_all_s"] = time.perf_counter() - t0
    if what == "ctx":
        torch.zeros(1, device="cuda")
        torch.cuda.synchronize()
        marks["ctx_s"] = time.perf_counter() - t0
    q.put(marks)


def spawn_many(n, what, method="spawn"):
    if method == "forkserver":  # flytune's own server (flytune_nb.engine.processes), as workers and the pool get it
        from flytune_nb.engine.processes import context

        ctx = context()
    else:
        ctx = mp.get_context(method)
    q = ctx.Queue()
    t0 = time.perf_counter()
    ps = [ctx.Process(target=_child, args=(q, time.time(), what)) for _ in range(n)]
    for p in ps:
        p.start()
    res = [q.get() for _ in ps]
    wall = time.perf_counter() - t0
    for p in ps:
        p.join()
    return {"n": n, "what": what, "method": method, "wall_s": wall,
            "max": {k: max(r[k] for r in res) for k in res[0]}}


def _ctx_state() -> dict:
    """In a pool process: does it hold a primary CUDA context? (cuInit here creates none.)"""
    import ctypes

    cuda = ctypes.CDLL("libcuda.so.1")
    cuda.cuInit(0)
    flags, active = ctypes.c_uint(), ctypes.c_int()
    rc = cuda.cuDevicePrimaryCtxGetState(0, ctypes.byref(flags), ctypes.byref(active))
    return {"rc": rc, "primary_ctx_active": active.value}


def context_probe():
    """The pool's own path (Precompiler.submit with the timing worker's device and target), then ask the pool
    process whether compiling made it create a CUDA context."""
    from dataclasses import asdict

    from flytune_nb.backends.triton import current_target
    from flytune_nb.core.device import current_device
    from flytune_nb.engine.compile_pool import Precompiler
    from flytune_nb.core.registry import get_kernel

    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()
    dev, shape = current_device(), {"M": 4096, "N": 4096, "K": 4096}
    cfgs = [c.to_dict() for c in get_kernel("matmul").configs(shape, "bf16", dev)[:3]]
    pc = Precompiler(workers=1)
    try:
        t0 = time.perf_counter()
        batch = pc.submit("matmul", (), shape, "bf16", cfgs, device=asdict(dev), target=current_target())
        status = [batch.wait(c) for c in cfgs]
        wall = time.perf_counter() - t0
        times = [f.result()[1] for f in batch.futs.values()]
        state = pc._get_pool().submit(_ctx_state).result(timeout=60)
    finally:
        pc.close()
    return {"status": status, "wall_s": wall, "compile_s": times, "target": current_target(), **state}


def compile_times(kernel, shape, dtype, n):
    """Fresh cache: first launch (compile + run) per config, in this process."""
    import random

    import torch

    from flytune_nb.core.device import current_device
    from flytune_nb.core.registry import get_kernel

    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()
    spec, dev = get_kernel(kernel), current_device()
    inputs = spec.make_inputs(shape, dtype, dev)
    configs = random.Random(0).sample(spec.configs(shape, dtype, dev), n)
    out = []
    for c in configs:
        t0 = time.perf_counter()
        try:
            spec.run(inputs, c)
            torch.cuda.synchronize()
        except Exception:  # noqa: BLE001
            pass
        out.append(time.perf_counter() - t0)
    # second pass: loaded from the on-disk cache in a fresh process would be the timing worker's case; here in-memory
    return sorted(out)


def trial_costs(kernel, shape, dtype, timer_kw):
    """One trial's parts in this process: fresh inputs + reference, checked launch, the timer."""
    import torch

    from flytune_nb.measure import correctness as check
    from flytune_nb.measure.timer import make_timer
    from flytune_nb.core.device import current_device
    from flytune_nb.core.registry import get_kernel
    from flytune_nb.measure.trial import evaluate

    spec, dev = get_kernel(kernel), current_device()
    cfg = spec.default(shape, dtype, dev)
    timer = make_timer(dev, **timer_kw)
    evaluate(spec, shape, dtype, cfg, dev, timer)  # compile
    t0 = time.perf_counter()
    fresh = spec.make_inputs(shape, dtype, dev)
    ref = spec.reference(fresh)
    check.poison(spec, fresh)
    out = spec.run(fresh, cfg)
    torch.cuda.synchronize()
    check.compare(out, ref, spec.tol(dtype), spec.element_tol(dtype))
    t1 = time.perf_counter()
    tm = timer.measure(lambda: spec.run(fresh, cfg))
    t2 = time.perf_counter()
    tr = evaluate(spec, shape, dtype, cfg, dev, timer)
    t3 = time.perf_counter()
    return {"check_s": t1 - t0, "timer_s": t2 - t1, "reps": tm.reps, "p50_us": tm.p50 * 1e3,
            "evaluate_s": t3 - t2, "evaluate_reps": tr.reps}


def traced_sweep(kernel, grid, n_configs=None, **kw):
    """A real first sweep (fresh cache) with the parent's calls timed: worker start, each op, pool, close."""
    import random
    from collections import defaultdict

    from flytune_nb.engine import compile_pool as precompile, lanes as worker
    from flytune_nb.core.device import current_device
    from flytune_nb.core.shapes import parse_grid
    from flytune_nb.core.registry import get_kernel
    from flytune_nb.engine.sweep import Sweep

    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()
    t00 = time.perf_counter()
    spans = defaultdict(float)
    counts = defaultdict(int)
    marks = []

    def wrap(cls, name, label=None):
        orig = getattr(cls, name)

        def f(self, *a, **k):
            t0 = time.perf_counter()
            try:
                return orig(self, *a, **k)
            finally:
                lab = label or (name + (":" + a[0] if name == "call" else ""))
                spans[lab] += time.perf_counter() - t0
                counts[lab] += 1
                if counts[lab] <= 2:
                    marks.append((lab, round(t0 - t00, 3), round(time.perf_counter() - t00, 3)))
        setattr(cls, name, f)
        return orig

    saved = [(worker.ProcessLane, n, wrap(worker.ProcessLane, n)) for n in ("_start", "call", "close")]
    saved += [(precompile.Precompiler, n, wrap(precompile.Precompiler, n)) for n in ("warm", "submit", "close")]
    saved += [(precompile.Batch, "wait", wrap(precompile.Batch, "wait", "batch_wait"))]
    try:
        configs = None
        if n_configs:
            spec = get_kernel(kernel)
            shape = parse_grid(grid, spec.axes)[0]
            configs = random.Random(0).sample(spec.configs(shape, "bf16", current_device()), n_configs)
        t0 = time.perf_counter()
        Sweep(kernel, grid, ["bf16"], baselines=(), configs=configs, **kw).run()
        wall = time.perf_counter() - t0
    finally:
        for cls, n, orig in saved:
            setattr(cls, n, orig)
    return {"wall_s": wall, "spans": dict(spans), "counts": dict(counts), "first_marks": marks}


def _top(stats: dict, n: int = 30) -> list:
    """[(function, cumulative s, own s, calls)] of a pstats table, largest cumulative first."""
    rows = [(f"{os.path.basename(f[0])}:{f[1]}({f[2]})", ct, tt, nc) for f, (cc, nc, tt, ct, _) in stats.items()]
    return [(name, round(ct, 4), round(tt, 4), nc) for name, ct, tt, nc in sorted(rows, key=lambda r: -r[1])[:n]]


def _diff(new: dict, old: dict) -> dict:
    out = {}
    for f, (cc, nc, tt, ct, callers) in new.items():
        o = old.get(f, (0, 0, 0.0, 0.0, {}))
        if ct - o[3] > 1e-4:
            out[f] = (cc - o[0], nc - o[1], tt - o[2], ct - o[3], {})
    return out


def profiled_sweep(kernel, grid, n_configs=None, **kw):
    """A traced sweep whose timing worker profiles itself (FLYTUNE_PROFILE_DIR): what the worker spent on its
    describe, its first trial, its second, and everything up to the last snapshot, function by function."""
    import glob
    import pstats
    from collections import defaultdict

    folder = tempfile.mkdtemp(prefix="flytune-prof-")
    before = os.environ.get("FLYTUNE_PROFILE_DIR")
    os.environ["FLYTUNE_PROFILE_DIR"] = folder
    try:
        traced = traced_sweep(kernel, grid, n_configs, **kw)
    finally:
        if before is None:
            del os.environ["FLYTUNE_PROFILE_DIR"]
        else:
            os.environ["FLYTUNE_PROFILE_DIR"] = before
    by_worker = defaultdict(list)  # pid -> [(calls, path)]: each worker's snapshots are cumulative on their own
    for path in glob.glob(os.path.join(folder, "worker-*.prof")):
        pid, calls = os.path.basename(path)[len("worker-"):-len(".prof")].split("-")
        by_worker[int(pid)].append((int(calls), path))
    names = {1: "describe", 2: "trial_1", 3: "trial_2", 4: "trial_3"}
    parts = {}
    for pid in sorted(by_worker):  # a restarted worker (after a crash) gets its own labels
        prev = {}
        for calls, path in sorted(by_worker[pid]):
            st = pstats.Stats(path).stats
            label = names.get(calls, f"calls_up_to_{calls}")
            parts[label if len(by_worker) == 1 else f"{pid}:{label}"] = _top(_diff(st, prev) if prev else st, 25)
            prev = st
    return {**traced, "worker_profile": parts, "snapshots": sorted(os.path.basename(p) for p in
                                                                   glob.glob(os.path.join(folder, "worker-*.prof")))}


DEFAULT_SECTIONS = ("spawn", "compile", "trial", "sweep")
ALL_SECTIONS = (*DEFAULT_SECTIONS, "ctx", "cprofile")


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.3g}"
    if isinstance(v, list) and v and all(isinstance(x, (int, float)) for x in v):
        return f"{len(v)} values {min(v):.3g}-{max(v):.3g}"
    if isinstance(v, dict) and v and all(isinstance(x, (int, float, str, bool)) or x is None for x in v.values()):
        return "{" + ", ".join(f"{k}: {_fmt(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, dict)):
        return "(in the JSON)"
    return str(v)


def render(payload: dict) -> str:
    """The markdown of a result: per section, when and where it ran, then one line per measurement (seconds)."""
    md = ["# Where a sweep's fixed cost goes: process start, imports, device context, compile, timing",
          "Each section is the latest run of that section (`--sections` re-runs some and keeps the others); times "
          "in seconds. The JSON holds everything, cProfile tables included."]
    for name, section in payload["sections"].items():
        env = section["env"]
        md += ["", f"## {name}", f"{env['device']}, {env['date']}, torch {env['torch']}, triton {env['triton']}"
               + (f", commit {env['commit']}" if env.get("commit") else "")
               + (f", {env['cpu_count']} CPU cores" if env.get("cpu_count") else ""), ""]
        for key, value in section["results"].items():
            md.append(f"- {key}: " + (", ".join(f"{k} {_fmt(x)}" for k, x in value.items())
                                      if isinstance(value, dict) else _fmt(value)))
    return "\n".join(md)


def main(argv=None):
    ap = parser(__doc__, __file__)
    ap.add_argument("--sections", default=",".join(DEFAULT_SECTIONS),
                    help=f"which to run, of {', '.join(ALL_SECTIONS)} (default: %(default)s)")
    ap.add_argument("--name", default="startup_profile", help="result file name (default: %(default)s)")
    args = ap.parse_args(argv)
    names = [n for n in args.sections.split(",") if n]
    unknown = sorted(set(names) - set(ALL_SECTIONS))
    if unknown:
        ap.error(f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(ALL_SECTIONS)}")
    need_gpu("startup_profile")
    env = environment()
    res: dict = {}

    def show(k, v):
        res[k] = v
        print(k, v, flush=True)

    steps = {
        "spawn": lambda: [show("spawn1_import", spawn_many(1, "import")), show("spawn1_ctx", spawn_many(1, "ctx")),
                          show("spawn16_ctx", spawn_many(16, "ctx")), show("spawn4_ctx", spawn_many(4, "ctx")),
                          show("forkserver16_ctx", spawn_many(16, "ctx", "forkserver"))],
        "compile": lambda: [show("compile_rmsnorm_8", compile_times("rmsnorm", {"M": 4096, "N": 4096}, "bf16", 8)),
                            show("compile_matmul_8",
                                 compile_times("matmul", {"M": 4096, "N": 4096, "K": 4096}, "bf16", 8))],
        "trial": lambda: [show("trial_rmsnorm_default_timer",
                               trial_costs("rmsnorm", {"M": 4096, "N": 4096}, "bf16", {})),
                          show("trial_rmsnorm_rep25", trial_costs("rmsnorm", {"M": 4096, "N": 4096}, "bf16",
                                                                  {"rep_ms": 25, "warmup_ms": 5})),
                          show("trial_matmul_default_timer", trial_costs("matmul", {"M": 4096, "N": 4096, "K": 4096},
                                                                         "bf16", {}))],
        "sweep": lambda: [show("sweep_rmsnorm_47", traced_sweep("rmsnorm", "M=4096 N=4096")),
                          show("sweep_matmul_50", traced_sweep("matmul", "M=4096 N=4096 K=4096", 50,
                                                               timer={"warmup_ms": 5.0, "rep_ms": 25.0}))],
        "ctx": lambda: show("pool_process_context", context_probe()),
        "cprofile": lambda: [show("profiled_sweep_rmsnorm_47", profiled_sweep("rmsnorm", "M=4096 N=4096")),
                             show("profiled_sweep_rmsnorm_47_again", profiled_sweep("rmsnorm", "M=4096 N=4096"))],
    }
    # The sections not run now keep their latest run from the current file.
    folder = results_dir(args.out)
    try:
        sections = json.loads((folder / f"{args.name}.json").read_text())["sections"]
    except (OSError, ValueError, KeyError, TypeError):
        sections = {}
    for name in names:
        res.clear()
        steps[name]()
        sections[name] = {"env": env, "results": dict(res)}
    payload = {"env": env, "sections": {n: sections[n] for n in ALL_SECTIONS if n in sections}}
    write(args.name, payload, render(payload), out=folder)


if __name__ == "__main__":
    main()
