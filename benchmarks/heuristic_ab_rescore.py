"""Re-score the heuristics as they are now on the timings of one heuristic_ab.py run, without a GPU: for each shape
of that run whose current default is one of the three configs it timed (old default, its new default, the store's
best), the regret is that config's time over the fastest of the three (the mean of its timings where it was timed
under two names). A shape whose current default was not timed
is listed as unmeasured, never guessed. Usage: python benchmarks/heuristic_ab_rescore.py [heuristic_ab.json]"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from common import write
from flytune_nb.analysis.scores import regret
from flytune_nb.core.device import DESCRIBED
from flytune_nb.core.registry import get_kernel

AB = Path(__file__).resolve().parent / "results" / "heuristic_ab.json"


def main(path=AB):
    run = json.loads(Path(path).read_text())
    per, unmeasured = {}, []
    for r in run["rows"]:
        now = get_kernel(r["kernel"]).default(r["shape"], r["dtype"], DESCRIBED[run["env"]["device"]]).to_dict()
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
    md = "\n".join([
        f"# The heuristics as they are now, re-scored on the timings of `{Path(path).name}` ({run['env']['device']}, "
        f"{run['env']['date']})", "",
        "No new GPU run, and in-sample: the rules were revised after seeing this run's timings. Each shape's current "
        "default is one of the configs that run timed, and its regret is that "
        "config's time (the mean, where it was timed as both old and new default) over the fastest of the three "
        "timed there.", "",
        "| kernel | shapes | geomean regret | M<=128 | worst |", "|---|---|---|---|---|", *rows, "",
        f"Shapes whose current default that run did not time: {len(unmeasured)}"
        + (" (" + "; ".join(f"{k} {s}" for k, s in unmeasured) + ")" if unmeasured else "") + "."])
    write("heuristic_ab_rescore", {"source": str(path), "rows": payload, "unmeasured": unmeasured}, md)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else AB)
