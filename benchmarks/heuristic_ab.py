"""Does the kernels' heuristic now beat the one a store's sweeps timed, re-timed side by side on the GPU?

Compares, per shape of the results stores, three configs timed again in one run: the old default (the store's
is_default trial: the heuristic as it was when swept), the new default (the kernel's heuristic now) and the store's
searched best; twice each (forward, then reverse order) on one draw of the shape's inputs, with the sweep's timer
(25 ms of reps, L2 flushed). A default's regret is its mean p50 over the best mean p50 of the three. Compiles run
first, in flytune's precompile pool. Only the store's sweeps measured on this GPU are used.
heuristic_ab_rescore re-scores a later heuristic on this result's timings without a GPU.
"""
from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path

import torch

from benchmarks.common import environment, need_gpu, parser, stores, write
from flytune_nb.analysis.scores import regret
from flytune_nb.measure.timer import make_timer
from flytune_nb.backends.triton import current_target
from flytune_nb.core.config import Config
from flytune_nb.core.device import current_device
from flytune_nb.engine.compile_pool import Precompiler
from flytune_nb.core.registry import get_kernel
from flytune_nb.engine.store import Store
from flytune_nb.errors import UsageError
from flytune_nb.measure.trial import evaluate

KERNELS = ("matmul", "fused_moe")


def cases(db, kernels, device: str) -> list[dict]:
    df = Store(db, readonly=True).frame()
    full = df[(df["fidelity"] == "full") & df["kernel"].isin(kernels) & (df["device"] == device)]
    out = []
    for (kernel, shape, dtype), g in full.groupby(["kernel", "shape", "dtype"]):
        ok, d = g[g["status"] == "ok"], g[g["is_default"] == 1]
        if ok.empty or d.empty:
            continue
        best = ok.loc[ok["p50"].idxmin()]
        out.append({"kernel": kernel, "shape": json.loads(shape), "dtype": dtype,
                    "old": json.loads(d.iloc[0]["config"]), "best": json.loads(best["config"]),
                    "stored_best_ms": float(best["p50"])})
    return out


def main(argv=None):
    ap = parser(__doc__, __file__)
    ap.add_argument("--store", action="append", type=Path, default=None, metavar="DB",
                    help="a results store (repeatable; default: every store in benchmarks/results/<this GPU>/stores/)")
    ap.add_argument("--kernels", default=",".join(KERNELS), help="kernels to compare (default: %(default)s)")
    args = ap.parse_args(argv)
    need_gpu("heuristic_ab")
    dev = current_device()
    dbs = args.store or stores(dev.name)
    kernels = [k for k in args.kernels.split(",") if k]
    todo = [c for db in dbs for c in cases(db, kernels, dev.name)]
    if not todo:
        raise UsageError(f"no sweeps of {', '.join(kernels)} measured on {dev.name} in "
                         f"{', '.join(map(str, dbs)) or 'benchmarks/results/' + dev.name + '/stores/ (none there)'}")
    timer = make_timer(dev, rep_ms=25.0)
    for c in todo:
        c["new"] = get_kernel(c["kernel"]).default(c["shape"], c["dtype"], dev).to_dict()
    pc = Precompiler()
    try:
        batches = [pc.submit(c["kernel"], (), c["shape"], c["dtype"],
                             list({json.dumps(c[k], sort_keys=True): c[k] for k in ("old", "new", "best")}.values()),
                             device=asdict(dev), target=current_target()) for c in todo]
        rows = []
        for i, (c, batch) in enumerate(zip(todo, batches)):
            spec = get_kernel(c["kernel"])
            names = ["old", "new", "best"]
            # Each distinct config once per round, all on one draw of the inputs: a fused_moe timing depends on the
            # routing (how many experts a batch touches), and drawing new inputs per timing measured one config up
            # to 16% apart at small M.
            distinct = list(dict.fromkeys(json.dumps(c[n], sort_keys=True) for n in names))
            torch.manual_seed(i)
            inputs = spec.make_inputs(c["shape"], c["dtype"], dev)
            times = defaultdict(list)
            for key in distinct:  # round 1: each config checked against the reference once, and timed
                batch.wait(json.loads(key))
                t = evaluate(spec, c["shape"], c["dtype"], Config.from_dict(json.loads(key)), dev, timer,
                             inputs=inputs)
                times[key].append(t.p50 if t.ok else math.inf)
            setup = spec.rep_setup(inputs, spec.snapshot(inputs))
            for key in distinct[::-1]:  # round 2, reverse order: timing only (a failed config stays inf)
                cfg = Config.from_dict(json.loads(key))
                times[key].append(timer.measure(lambda: spec.run(inputs, cfg), setup).p50
                                  if math.isfinite(times[key][0]) else math.inf)
            del inputs
            mean = {n: sum(times[json.dumps(c[n], sort_keys=True)]) / 2 for n in names}
            floor = min(mean.values())
            rows.append({**c, "ms": mean, "regret_old": mean["old"] / floor, "regret_new": mean["new"] / floor})
            print(c["kernel"], c["shape"], {k: round(v * 1e3, 1) for k, v in mean.items()}, flush=True)
            batch.close()
    finally:
        pc.close(kill=True)
    summary = []
    lines = []
    for kernel in sorted({r["kernel"] for r in rows}):
        rs = [r for r in rows if r["kernel"] == kernel]
        worst_old = max(rs, key=lambda r: r["regret_old"])
        worst_new = max(rs, key=lambda r: r["regret_new"])
        s = {"kernel": kernel, "shapes": len(rs),
             "old": regret(r["regret_old"] for r in rs), "new": regret(r["regret_new"] for r in rs),
             "old_small": regret(r["regret_old"] for r in rs if r["shape"]["M"] <= 128),
             "new_small": regret(r["regret_new"] for r in rs if r["shape"]["M"] <= 128),
             "worst_old": worst_old["regret_old"], "worst_old_shape": worst_old["shape"],
             "worst_new": worst_new["regret_new"], "worst_new_shape": worst_new["shape"]}
        summary.append(s)
        fmt = lambda sh: " ".join(f"{k}={v}" for k, v in sh.items())  # noqa: E731
        lines.append(f"| {kernel} | {len(rs)} | {s['old']:.3f} | **{s['new']:.3f}** | {s['old_small']:.3f} | "
                     f"{s['new_small']:.3f} | {s['worst_old']:.2f} ({fmt(s['worst_old_shape'])}) | "
                     f"{s['worst_new']:.2f} ({fmt(s['worst_new_shape'])}) |")
    env = environment()
    md = "\n".join([
        f"# Heuristic defaults, old vs new, against the searched best of "
        f"{', '.join(f'`{Path(db).name}`' for db in dbs)}",
        f"{env['device']}, {env['date']}, torch {env['torch']}, triton {env['triton']}", "",
        "Regret = the default's p50 / the fastest of (old default, new default, stored best), all three timed again "
        "in this run, twice each (forward and reverse order) on one draw of each shape's inputs, 25 ms of reps, L2 "
        "flushed; geomean over the store's shapes.", "",
        "| kernel | shapes | old geomean | new geomean | old M<=128 | new M<=128 | old worst | new worst |",
        "|---|---|---|---|---|---|---|---|", *lines])
    write("heuristic_ab", {"env": env, "db": [Path(db).name for db in dbs], "summary": summary, "rows": rows}, md,
          out=args.out)


if __name__ == "__main__":
    main()
