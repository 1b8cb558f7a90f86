"""Heuristic regret from a results store (no GPU needed): per kernel, the geomean over the swept grid of
default p50 / searched-best p50, both at full fidelity, and the worst shape. Reads the committed H200 sweeps by default.

Caveat, with numbers: the best is the minimum over ~16 full timings, so it is biased low by the timer's noise, which
for 5 us kernels is up to ~1 us between device calls (benchmarks/results/check.md); regret at small M is an upper
bound. Where a shape was swept under several tuning keys (the kernel edited between sweeps), only the most recently
measured key counts. The default is the one the sweep timed (is_default), i.e. the heuristic as it was then; with --current it is
the kernel's heuristic as it is now, scored where the store timed that config (an exhaustive sweep times every
one; a shape where it was not timed is counted as unmeasured, never guessed). Usage:
python benchmarks/heuristic_regret.py [DB] [--current] (results named after the store unless it is the default one)"""
from __future__ import annotations

import json
import math
import sys
from collections import defaultdict
from pathlib import Path

from common import write
from flytune_nb.analysis.scores import regret
from flytune_nb.core.device import DESCRIBED
from flytune_nb.core.registry import get_kernel
from flytune_nb.engine.store import Store

DB = Path(__file__).resolve().parent / "results" / "h200_sweeps.db"


def _current_default(g, kernel, shape, dtype, device):
    """The store's trials of the config the kernel's heuristic picks now (empty when it was not timed)."""
    want = get_kernel(kernel).default(json.loads(shape), dtype, DESCRIBED[device])
    return g[g["config"] == want.to_json()]


def main(db=DB, current=False):
    df = Store(db, readonly=True).frame()
    full = df[df["fidelity"] == "full"]
    per = defaultdict(list)
    unmeasured = 0
    for (kernel, shape, dtype, device), g in full.groupby(["kernel", "shape", "dtype", "device"]):
        # A store swept again after the kernel changed holds the shape under two tuning keys (the source fingerprint
        # is in the key): score the most recently measured one only, as export does, never a mix of versions.
        g = g[g["key"] == g.loc[g["id"].idxmax(), "key"]]
        d, ok = g[g["is_default"] == 1], g[g["status"] == "ok"]
        if current:  # only on a device described above; elsewhere the shape counts as unmeasured
            d = _current_default(g, kernel, shape, dtype, device) if device in DESCRIBED else g.iloc[0:0]
            unmeasured += d.empty and not ok.empty
        if d.empty or ok.empty:  # the default never timed (a stopped sweep), or nothing passed: no regret to state
            continue
        # A default that failed (status not ok) scores inf: that shape's regret, and its kernel's geomean, are inf.
        default_ms = float(d["p50"].min()) if (d["status"] == "ok").all() else math.inf
        per[(kernel, dtype, device)].append((json.loads(shape), default_ms / float(ok["p50"].min())))
    rows, payload = [], []
    for (kernel, dtype, device), items in sorted(per.items()):
        geo = regret(r for _, r in items)
        worst_shape, worst = max(items, key=lambda x: x[1])
        small = [r for s, r in items if s.get("M", 0) <= 128]
        large = [r for s, r in items if s.get("M", 0) > 128]
        payload.append({"kernel": kernel, "dtype": dtype, "device": device, "shapes": len(items), "geomean": geo,
                        "geomean_M_le_128": regret(small), "geomean_M_gt_128": regret(large), "worst": worst,
                        "worst_shape": worst_shape})
        rows.append(f"| {kernel} | {dtype} | {device} | {len(items)} | {geo:.3f} | {regret(small):.3f} | {regret(large):.3f} | "
                    f"{worst:.2f} at {' '.join(f'{k}={v}' for k, v in worst_shape.items())} |")
    md = "\n".join([
        f"# Heuristic regret (default p50 / searched-best p50, full fidelity) from `{Path(db).name}`"
        + (", the heuristic as it is now" if current else ""), "",
        "| kernel | dtype | device | shapes | geomean | geomean M<=128 | geomean M>128 | worst |",
        "|---|---|---|---|---|---|---|---|", *rows, "",
        "The searched best is the minimum of noisy timings (winner's curse); for the ~5 us small-M shapes the H200's "
        "run-to-run noise is up to ~1 us, so those regrets are upper bounds."]
        + ([f"", f"The defaults are the heuristic's picks now, scored on the store's timings (in-sample where the store "
            f"informed the rule); shapes whose current default the store never timed: {unmeasured}."] if current else []))
    name = "heuristic_regret" if Path(db).resolve() == DB else f"heuristic_regret_{Path(db).stem}"
    write(name + ("_current" if current else ""), {"db": str(db), "current": current, "unmeasured": unmeasured,
                                                    "rows": payload}, md)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--current"]
    main(args[0] if args else DB, current="--current" in sys.argv[1:])
