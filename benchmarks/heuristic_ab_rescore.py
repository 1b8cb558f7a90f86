"""How do the kernels' heuristics as they are now score on the timings of the last heuristic_ab run? (no GPU)

Compares, for each shape of that run whose current default is one of the three configs it timed (old default, its
new default, the store's best), that config's time with the fastest of the three (the mean of its timings where it
was timed under two names). A shape whose current default was not timed is listed as unmeasured, never guessed: the
answer is in-sample where the run informed the rules. Filed under the GPU that ran heuristic_ab.
"""
from __future__ import annotations

import json
from pathlib import Path

from benchmarks.common import environment, find_result, parser, write
from flytune_nb.analysis.scores import regret
from flytune_nb.core.device import DESCRIBED
from flytune_nb.core.registry import get_kernel
from flytune_nb.errors import UsageError


def main(argv=None):
    ap = parser(__doc__, __file__)
    ap.add_argument("--run", type=Path, default=None, metavar="JSON",
                    help="a heuristic_ab result (default: benchmarks/results/<device>/heuristic_ab.json: this "
                         "machine's GPU if it has one, else the only device that has one)")
    args = ap.parse_args(argv)
    path = args.run or find_result("heuristic_ab")
    try:
        run = json.loads(Path(path).read_text())
        name = run["env"]["device"]
        run["rows"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UsageError(f"{path} is not a heuristic_ab result ({type(e).__name__}: {e})") from None
    if name not in DESCRIBED:  # the heuristic needs the device's SM count, L2, shared memory
        raise UsageError(f"{path} was measured on {name}, which flytune_nb.core.device.DESCRIBED does not describe")
    device = DESCRIBED[name]
    per, unmeasured = {}, []
    for r in run["rows"]:
        now = get_kernel(r["kernel"]).default(r["shape"], r["dtype"], device).to_dict()
        timed = [k for k in ("old", "new", "best") if r[k] == now]
        if not timed:
            unmeasured.append((r["kernel"], r["shape"]))
            continue
        mine = sum(r["ms"][k] for k in timed) / len(timed)  # timed under two names (new == old): both count
        per.setdefault(r["kernel"], []).append((r["shape"], mine / min(r["ms"].values())))
    rows, payload = [], []
    for kernel, items in sorted(per.items()):
        worst_shape, worst = max(items, key=lambda x: x[1])
        small = [x for s, x in items if s["M"] <= 128]
        payload.append({"kernel": kernel, "shapes": len(items), "geomean": regret(x for _, x in items),
                        "geomean_M_le_128": regret(small), "worst": worst, "worst_shape": worst_shape})
        rows.append(f"| {kernel} | {len(items)} | **{payload[-1]['geomean']:.3f}** | {regret(small):.3f} | "
                    f"{worst:.2f} ({' '.join(f'{k}={v}' for k, v in worst_shape.items())}) |")
    env = environment()
    md = "\n".join([
        f"# The heuristics as they are now, re-scored on the timings of `{Path(path).name}` ({run['env']['device']}, "
        f"{run['env']['date']})",
        f"Computed {env['date']}" + (f" at commit {env['commit']}" if env["commit"] else "") + ": its heuristics.", "",
        "No new GPU run, and in-sample: the rules were revised after seeing this run's timings. Each shape's current "
        "default is one of the configs that run timed, and its regret is that "
        "config's time (the mean, where it was timed as both old and new default) over the fastest of the three "
        "timed there.", "",
        "| kernel | shapes | geomean regret | M<=128 | worst |", "|---|---|---|---|---|", *rows, "",
        f"Shapes whose current default that run did not time: {len(unmeasured)}"
        + (" (" + "; ".join(f"{k} {s}" for k, s in unmeasured) + ")" if unmeasured else "") + "."])
    write("heuristic_ab_rescore", {"env": env, "source": Path(path).name, "source_date": run["env"]["date"], "rows": payload,
                                   "unmeasured": unmeasured}, md, out=args.out, device=device.name)


if __name__ == "__main__":
    main()
