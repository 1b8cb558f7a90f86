"""Timing fidelity: the same rmsnorm config timed 7 times by flytune's GpuTimer and by triton.testing.do_bench,
interleaved in one run on one GPU. Spread = (max - min) / median of the 7 medians. Target: ours <= 2%."""
from __future__ import annotations

import statistics

import triton.testing

from common import environment, write
from flytune_nb.bench import GpuTimer
from flytune_nb.device import current_device
from flytune_nb.registry import get_kernel

SHAPES = [{"M": 1, "N": 4096}, {"M": 64, "N": 4096}, {"M": 4096, "N": 4096}, {"M": 4096, "N": 8192}]
REPEATS = 7


def spread(xs):
    return (max(xs) - min(xs)) / statistics.median(xs)


def main():
    dev = current_device()
    spec = get_kernel("rmsnorm")
    timer = GpuTimer(dev)
    rows, payload = [], {"env": environment(), "repeats": REPEATS, "shapes": []}
    for shape in SHAPES:
        inputs = spec.make_inputs(shape, "bf16", dev)
        cfg = spec.default(shape, "bf16", dev)
        fn = lambda: spec.run(inputs, cfg)  # noqa: E731
        ours, theirs = [], []
        for _ in range(REPEATS):  # interleaved, so clock drift hits both alike
            ours.append(timer.measure(fn).p50)
            theirs.append(triton.testing.do_bench(fn, return_mode="median"))
        payload["shapes"].append({"shape": shape, "config": str(cfg), "flytune_ms": ours, "do_bench_ms": theirs,
                                  "flytune_spread": spread(ours), "do_bench_spread": spread(theirs)})
        rows.append(f"| M={shape['M']} N={shape['N']} | {statistics.median(ours) * 1e3:.2f} | {spread(ours):.2%} "
                    f"| {statistics.median(theirs) * 1e3:.2f} | {spread(theirs):.2%} |")
    env = payload["env"]
    md = "\n".join([
        f"# Timing fidelity: rmsnorm bf16, default config, {REPEATS} repeats",
        f"{env['device']} ({env['arch']}), {env['date']}, torch {env['torch']}, triton {env['triton']}, "
        f"flytune_nb {env['flytune_nb']}", "",
        "| shape | flytune p50 (us) | flytune spread | do_bench p50 (us) | do_bench spread |",
        "|---|---|---|---|---|", *rows, "",
        "spread = (max - min) / median over the repeats; do_bench: triton.testing.do_bench(return_mode='median')."])
    write("timing_fidelity", payload, md)


if __name__ == "__main__":
    main()
