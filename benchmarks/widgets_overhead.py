"""The live view's cost: the same sweep with and without the LivePlot + progress listeners (headless widgets, so
this measures our Python side: event handling, batching, figure updates; a browser adds rendering on its side).
Runs on a GPU or on the interpreter; the target is <= 5% of sweep time."""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

from common import environment, write
from flytune_nb.core.device import current_device
from flytune_nb.core.registry import get_kernel
from flytune_nb.engine.sweep import Sweep
from flytune_nb.ui.notebook import LivePlot
from flytune_nb.ui.notebook.controls import RunControl


def main():
    dev = current_device()
    grid = "M=1,64,4096 N=4096" if dev.is_gpu else "M=2,4,8 N=1000"
    dtype = "bf16" if dev.is_gpu else "fp32"
    tmp = Path(tempfile.mkdtemp())
    times = {}
    for rep in range(2):  # alternate, so warm caches favour neither
        for live in (False, True):
            listeners = []
            if live:
                plot, rc = LivePlot(get_kernel("rmsnorm")), RunControl()
                rc.start(3)
                listeners = [plot, rc]
            t0 = time.perf_counter()
            Sweep("rmsnorm", grid, [dtype], db=str(tmp / f"{rep}{live}.db"), isolate=False, baselines=(),
                  listeners=listeners).run()
            times.setdefault(live, []).append(time.perf_counter() - t0)
    plain, live = min(times[False]), min(times[True])
    env = {"device": dev.name, **({k: v for k, v in environment().items() if k != "device"} if dev.is_gpu else {})}
    payload = {"env": env, "grid": grid, "dtype": dtype, "plain_s": times[False], "live_s": times[True],
               "overhead": live / plain - 1}
    md = "\n".join([f"# Live-view overhead: rmsnorm {grid} {dtype} on {dev.name}", "",
                    "| | sweep wall time (best of 2) |", "|---|---|", f"| no listeners | {plain:.2f} s |",
                    f"| LivePlot + progress | {live:.2f} s |", f"| overhead | {live / plain - 1:+.1%} |"])
    write("widgets_overhead", payload, md)


if __name__ == "__main__":
    main()
