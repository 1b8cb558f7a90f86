"""What share of a sweep's time does the notebook's live view (plot + progress) cost?

Compares the same sweep with and without the live results + explorer + progress listeners, alternated, best of 2
each (headless widgets, so this measures our Python side: event handling, batching, figure updates; a browser adds
rendering on its side). Runs on a GPU or on the Triton interpreter. Target: <= 5% of sweep time.
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

from benchmarks.common import environment, parser, write
from flytune_nb.core.device import current_device
from flytune_nb.core.registry import get_kernel
from flytune_nb.engine.sweep import Sweep
from flytune_nb.ui.notebook.controls import RunControl
from flytune_nb.ui.notebook.live import LiveResults
from flytune_nb.ui.notebook.slots import load_plotly
from flytune_nb.ui.notebook.views import ExplorerView


def main(argv=None):
    ap = parser(__doc__, __file__)
    ap.add_argument("--grid", default=None, help="rmsnorm's grid (default: M=1,64,4096 N=4096 on a GPU, "
                                                 "M=2,4,8 N=1000 on the interpreter)")
    ap.add_argument("--dtype", default=None, help="default: bf16 on a GPU, fp32 on the interpreter")
    args = ap.parse_args(argv)
    dev = current_device()
    grid = args.grid or ("M=1,64,4096 N=4096" if dev.is_gpu else "M=2,4,8 N=1000")
    dtype = args.dtype or ("bf16" if dev.is_gpu else "fp32")
    tmp = Path(tempfile.mkdtemp())
    times = {}
    for rep in range(2):  # alternate, so warm caches favour neither
        for live in (False, True):
            listeners = []
            if live:
                live, rc, view = LiveResults(), RunControl(), ExplorerView(get_kernel("rmsnorm"))
                load_plotly(background=False)
                view.source = live.get
                live.on_change = view.follow
                rc.start([0, 0, 0])
                listeners = [live, rc]
            t0 = time.perf_counter()
            Sweep("rmsnorm", grid, [dtype], db=str(tmp / f"{rep}{live}.db"), isolate=False, baselines=(),
                  listeners=listeners).run()
            times.setdefault(live, []).append(time.perf_counter() - t0)
    plain, live = min(times[False]), min(times[True])
    env = environment()
    payload = {"env": env, "grid": grid, "dtype": dtype, "plain_s": times[False], "live_s": times[True],
               "overhead": live / plain - 1}
    md = "\n".join([f"# Live-view overhead: rmsnorm {grid} {dtype} on {dev.name}",
                    f"{env['date']}, torch {env['torch']}, triton {env['triton']}, flytune_nb {env['flytune_nb']}"
                    + (f", commit {env['commit']}" if env["commit"] else ""), "",
                    "| | sweep wall time (best of 2) |", "|---|---|", f"| no listeners | {plain:.2f} s |",
                    f"| live results + explorer + progress | {live:.2f} s |", f"| overhead | {live / plain - 1:+.1%} |"])
    write("widgets_overhead", payload, md, out=args.out)


if __name__ == "__main__":
    main()
