"""How far is each kernel's heuristic default from the searched best, over the grids a results store swept? (no GPU)

Compares, per kernel, dtype and device, the default's full-fidelity p50 with the searched best's p50 at each shape:
the geomean of default / best over the swept grid (also split at M=128) and the worst shape. Two defaults per store:
the one the sweep timed (is_default: the heuristic as it was then), and the kernel's heuristic as it is now, scored
where the store timed that config (an exhaustive sweep times every one; a shape where it was not timed is counted as
unmeasured, never guessed; in-sample where the store informed the rule). Reads every committed store by default
(benchmarks/results/*/stores/*.db); the result is filed under the device that measured the timings.

Caveat, with numbers: the best is the minimum over ~16 full timings, so it is biased low by the timer's noise, which
for 5 us kernels is up to ~1 us between device calls; regret at small M is an upper bound. Where a shape was swept
under several tuning keys (the kernel edited between sweeps), only the most recently measured key counts.
"""
from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

from benchmarks.common import environment, parser, stores, write
from flytune_nb.analysis.scores import regret
from flytune_nb.core.device import DESCRIBED
from flytune_nb.core.registry import get_kernel
from flytune_nb.engine.store import Store
from flytune_nb.errors import UsageError


def _current_default(g, kernel, shape, dtype, device):
    """The store's trials of the config the kernel's heuristic picks now (empty when it was not timed)."""
    want = get_kernel(kernel).default(json.loads(shape), dtype, device)
    return g[g["config"] == want.to_json()]


def _devices(store: Store) -> dict:
    """Device name -> the DeviceInfo the heuristic is asked about: the one a sweep recorded, else the described
    GPU, else the interpreter's (a store swept on the CPU)."""
    from flytune_nb.core.device import DeviceInfo, interpreter_device

    known = {**DESCRIBED, interpreter_device().name: interpreter_device()}
    known.update({info["name"]: DeviceInfo(**info) for info in store.run_devices().values()})
    return known


def score(full, current: bool, devices: dict | None = None) -> tuple[list[dict], dict]:
    """Regret rows per (kernel, dtype, device) of a store's full-fidelity trials, and unmeasured shapes per device
    (``current``: the heuristic now; otherwise the default the sweep timed). ``devices``: name -> DeviceInfo the
    heuristic now is asked about (default: the described GPUs)."""
    devices = DESCRIBED if devices is None else devices
    per = defaultdict(list)
    unmeasured = defaultdict(int)
    for (kernel, shape, dtype, device), g in full.groupby(["kernel", "shape", "dtype", "device"]):
        # A store swept again after the kernel changed holds the shape under two tuning keys (the source fingerprint
        # is in the key): score the most recently measured one only, as export does, never a mix of versions.
        g = g[g["key"] == g.loc[g["id"].idxmax(), "key"]]
        d, ok = g[g["is_default"] == 1], g[g["status"] == "ok"]
        if current:  # only on a device it can name (see _devices); elsewhere the shape counts as unmeasured
            d = _current_default(g, kernel, shape, dtype, devices[device]) if device in devices else g.iloc[0:0]
            unmeasured[device] += d.empty and not ok.empty
        if d.empty or ok.empty:  # the default never timed (a stopped sweep), or nothing passed: no regret to state
            continue
        # A default that failed (status not ok) scores inf: that shape's regret, and its kernel's geomean, are inf.
        default_ms = float(d["p50"].min()) if (d["status"] == "ok").all() else math.inf
        per[(kernel, dtype, device)].append((json.loads(shape), default_ms / float(ok["p50"].min())))
    rows = []
    for (kernel, dtype, device), items in sorted(per.items()):
        worst_shape, worst = max(items, key=lambda x: x[1])
        rows.append({"kernel": kernel, "dtype": dtype, "device": device, "shapes": len(items),
                     "geomean": regret(r for _, r in items),
                     "geomean_M_le_128": regret(r for s, r in items if s.get("M", 0) <= 128),
                     "geomean_M_gt_128": regret(r for s, r in items if s.get("M", 0) > 128),
                     "worst": worst, "worst_shape": worst_shape})
    return rows, dict(unmeasured)


def _table(rows: list[dict]) -> list[str]:
    out = ["| kernel | dtype | shapes | geomean | geomean M<=128 | geomean M>128 | worst |",
           "|---|---|---|---|---|---|---|"]
    out += [f"| {r['kernel']} | {r['dtype']} | {r['shapes']} | {r['geomean']:.3f} | {r['geomean_M_le_128']:.3f} | "
            f"{r['geomean_M_gt_128']:.3f} | {r['worst']:.2f} at "
            f"{' '.join(f'{k}={v}' for k, v in r['worst_shape'].items())} |" for r in rows]
    return out


def _measured(full, device: str) -> str:
    mine = full[full["device"] == device]
    first, last = (min(mine["created"])[:10], max(mine["created"])[:10]) if len(mine) else ("", "")
    return first if first == last else f"{first} to {last}"


def main(argv=None):
    ap = parser(__doc__, __file__)
    ap.add_argument("--store", action="append", type=Path, default=None, metavar="DB",
                    help="a results store (repeatable; default: every benchmarks/results/*/stores/*.db)")
    ap.add_argument("--device", default=None, help="only the sweeps measured on this device (e.g. NVIDIA_H200)")
    args = ap.parse_args(argv)
    dbs = args.store or stores()
    if not dbs:
        raise UsageError("no results stores under benchmarks/results/*/stores/: pass --store DB")
    sections = defaultdict(list)  # device -> [(store name, swept rows, rows now, unmeasured now, measured dates)]
    for db in dbs:
        store = Store(db, readonly=True)
        try:
            df, devices = store.frame(), _devices(store)
        finally:
            store.close()
        full = df[df["fidelity"] == "full"] if len(df) else df
        if args.device is not None and len(full):
            full = full[full["device"] == args.device]
        if not len(full):
            continue
        swept, _ = score(full, current=False)
        now, unmeasured = score(full, current=True, devices=devices)
        for device in sorted(set(full["device"])):
            sections[device].append((Path(db).name, [r for r in swept if r["device"] == device],
                                     [r for r in now if r["device"] == device], unmeasured.get(device, 0),
                                     _measured(full, device)))
    if not sections:
        raise UsageError(f"no full-fidelity trials{' of ' + args.device if args.device else ''} in "
                         f"{', '.join(map(str, dbs))}")
    if args.out is not None and len(sections) > 1:
        raise UsageError(f"the stores hold sweeps of {len(sections)} devices ({', '.join(sorted(sections))}): "
                         "pick one with --device when writing to --out")
    env = environment()
    for device, parts in sorted(sections.items()):
        md = [f"# Heuristic regret on {device}: default p50 / searched-best p50, full fidelity, from the stores",
              f"Computed {env['date']}" + (f" at commit {env['commit']}" if env["commit"] else "")
              + " from the stored timings (no GPU run).", "",
              "The searched best is the minimum of noisy timings (winner's curse); for the ~5 us small-M shapes the "
              "timer's run-to-run noise (up to ~1 us on the H200) makes those regrets upper bounds. \"Now\": the "
              "kernel's heuristic as it is in this checkout, scored on the store's timings (in-sample where the "
              "store informed the rule)."]
        for name, swept, now, unmeasured, dates in parts:
            md += ["", f"## `{name}` (swept {dates})", "", "The default the sweep timed:", "", *_table(swept), "",
                   f"The heuristic now (shapes whose current default the store never timed: {unmeasured}):", "",
                   *_table(now)]
        payload = {"env": env, "device": device, "stores": [{"store": name, "measured": dates, "swept_default": swept,
                                                 "default_now": now, "unmeasured_now": unmeasured}
                                                for name, swept, now, unmeasured, dates in parts]}
        write("heuristic_regret", payload, "\n".join(md), out=args.out, device=device)


if __name__ == "__main__":
    main()
