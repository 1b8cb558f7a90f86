"""Does flytune's GPU timer give the same median every time it measures the same kernel, and do_bench's?

Compares the same rmsnorm default config timed repeatedly by flytune's GpuTimer (L2 flushed per rep), by the same
timer with the flush's cost uncounted and a full warm-up each time, and by triton.testing.do_bench, interleaved in
one run on one GPU. Spread = (max - min) / median of the medians. Target: ours <= 2%.
"""
from __future__ import annotations

import math
import statistics
import time

import triton.testing

from benchmarks.common import environment, need_gpu, parser, write
from flytune_nb.measure import timer as bench
from flytune_nb.measure.timer import GpuTimer
from flytune_nb.core.device import current_device
from flytune_nb.core.registry import get_kernel

SHAPES = [{"M": 1, "N": 4096}, {"M": 64, "N": 4096}, {"M": 4096, "N": 4096}, {"M": 4096, "N": 8192}]
REPEATS = 7


def spread(xs):
    return (max(xs) - min(xs)) / statistics.median(xs)


def main(argv=None):
    ap = parser(__doc__, __file__)
    ap.add_argument("--repeats", type=int, default=REPEATS,
                    help="measurements per timer and shape (default %(default)s)")
    args = ap.parse_args(argv)
    if args.repeats < 2:
        ap.error("--repeats must be at least 2 (the spread needs two)")
    need_gpu("timing_fidelity")
    repeats = args.repeats
    dev = current_device()
    spec = get_kernel("rmsnorm")
    timer = GpuTimer(dev)
    # The uncounted-flush variant: a spin of 2x the host's enqueue time on top of the L2 flush (a flush cost of 0
    # makes the spin that long again) and the full 25 ms warm-up every time (forgetting when the GPU was last
    # busy). Interleaved with the timer as it is, to show that counting the flush and shortening the warm-up move
    # no median.
    before = GpuTimer(dev)
    before._flush_cost_us = 0.0
    rows, payload = [], {"env": environment(), "repeats": repeats, "shapes": []}
    for shape in SHAPES:
        inputs = spec.make_inputs(shape, "bf16", dev)
        cfg = spec.default(shape, "bf16", dev)
        fn = lambda: spec.run(inputs, cfg)  # noqa: E731
        ours, theirs, old, wall = [], [], [], []
        for _ in range(repeats):  # interleaved, so clock drift hits all alike
            t0 = time.perf_counter()
            ours.append(timer.measure(fn).p50)
            wall.append(time.perf_counter() - t0)
            bench._LAST_END[0] = -math.inf
            old.append(before.measure(fn).p50)
            theirs.append(triton.testing.do_bench(fn, return_mode="median"))
        payload["shapes"].append({"shape": shape, "config": str(cfg), "flytune_ms": ours, "do_bench_ms": theirs,
                                  "flytune_spread": spread(ours), "do_bench_spread": spread(theirs),
                                  "before_ms": old, "before_spread": spread(old), "flytune_measure_s": wall})
        rows.append(f"| M={shape['M']} N={shape['N']} | {statistics.median(ours) * 1e3:.2f} | {spread(ours):.2%} "
                    f"| {statistics.median(wall) * 1e3:.0f} | {statistics.median(old) * 1e3:.2f} | {spread(old):.2%} "
                    f"| {statistics.median(theirs) * 1e3:.2f} | {spread(theirs):.2%} |")
    env = payload["env"]
    md = "\n".join([
        f"# Timing fidelity: rmsnorm bf16, default config, {repeats} repeats",
        f"{env['device']} ({env['arch']}), {env['date']}, torch {env['torch']}, triton {env['triton']}, "
        f"flytune_nb {env['flytune_nb']}", "",
        "| shape | flytune p50 (us) | flytune spread | one measure (ms) | flush uncounted: p50 (us) | spread "
        "| do_bench p50 (us) | do_bench spread |",
        "|---|---|---|---|---|---|---|---|", *rows, "",
        "spread = (max - min) / median over the repeats; do_bench: triton.testing.do_bench(return_mode='median'); "
        "flush uncounted: the spin on top of the L2 flush instead of counting the flush, and the full warm-up "
        "every time (flytune_nb/measure/timer.py)."])
    write("timing_fidelity", payload, md, out=args.out)


if __name__ == "__main__":
    main()
