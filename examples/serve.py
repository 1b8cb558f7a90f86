"""A serving loop that reads exported configs with zero search: the consumer side of flytune_nb.

It imports a kernel's tuned launcher with tuning off, serves a stream of calls at varying batch sizes, and reports
which config each batch size got and where it came from (artifact: an exported file, nearest batch size; default:
the kernel's heuristic), plus what the launcher adds per call over launching the same config directly.

    python examples/serve.py --kernel rmsnorm --shape N=4096 --dtype bf16            # the exports flytune_nb ships
    python examples/serve.py --kernel rmsnorm --shape N=256 --dtype fp32 --config-dir runs/exports --calls 50

An engine does the same with its own launcher: ``lookup(spec, shape, dtype)`` (flytune_nb.serve.lookup) gives the config
and its source; SGLang reads the same files directly (docs/guide.md, "Offline artifacts").
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections import Counter


def _at_least_one(text: str) -> int:
    """An argparse type: a count of calls or a batch size, a whole number >= 1 (0 or fewer would serve nothing and
    still print a report, or end in an IndexError from an empty list of batch sizes)."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return n


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kernel", default="rmsnorm")
    p.add_argument("--shape", nargs="+", default=["N=4096"], help="the non-batch axes, e.g. N=4096")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--config-dir", default=None, help="exported configs (default: $FLYTUNE_CONFIG_DIR, else the "
                                                      "ones flytune_nb ships, flytune_nb/exports/)")
    p.add_argument("--batch-sizes", default=None, help="comma-separated batch sizes to draw from (default: "
                                                       "SGLang's 1..4096, capped by --max-batch)")
    p.add_argument("--max-batch", type=_at_least_one, default=4096)
    p.add_argument("--calls", type=_at_least_one, default=500, help="calls in the stream")
    p.add_argument("--overhead-calls", type=_at_least_one, default=2000,
                   help="calls per timing of the launcher overhead")
    p.add_argument("--json", default=None, help="also write the report as JSON here")
    return p.parse_args(argv)


def resolve(args):
    """(spec, non-batch shape, dtype, batch sizes) from the command line, or a FlytuneError naming what is wrong:
    checked before anything is launched, so a typo costs one line, not a traceback or a stream served with the
    heuristic default."""
    from flytune_nb import get_kernel
    from flytune_nb.core.shapes import SGLANG_BATCH_SIZES, parse_grid, parse_values
    from flytune_nb.errors import UsageError

    # lookup would warn and serve the heuristic default for every call: a stream that looks served, but from nothing
    if args.config_dir and not os.path.isdir(args.config_dir):
        raise UsageError(f"--config-dir {args.config_dir} is not a folder")
    if args.json and not os.path.isdir(os.path.dirname(os.path.abspath(args.json))):
        raise UsageError(f"--json {args.json}: no folder {os.path.dirname(os.path.abspath(args.json))}")
    if args.json and os.path.isdir(args.json):  # open() would refuse it only after the whole stream was served
        raise UsageError(f"--json {args.json} is a folder; name a file in it, e.g. "
                         f"{os.path.join(args.json, 'serve.json')}")
    spec = get_kernel(args.kernel)
    dtype = spec.check_dtype(args.dtype)
    others = tuple(a for a in spec.axes if a != spec.batch_axis)
    text = " ".join(args.shape)
    if any(t.partition("=")[0] == spec.batch_axis for t in text.split()):
        raise UsageError(f"--shape names the axes other than the batch axis ({' '.join(others)}); "
                         f"{spec.batch_axis} is drawn from --batch-sizes or --max-batch")
    shapes = parse_grid(text, others, noun="--shape")
    if len(shapes) != 1:
        raise UsageError(f"--shape takes one value per axis (e.g. {' '.join(f'{a}=4096' for a in others)}); "
                         f"got {text!r}")
    sizes = parse_values(spec.batch_axis, args.batch_sizes, spec.batch_axis) if args.batch_sizes else \
        [b for b in SGLANG_BATCH_SIZES if b <= args.max_batch]
    for m in sizes:  # shape rules (fused_moe's topk <= E) before anything is made
        spec.check_shape({**shapes[0], spec.batch_axis: m})
    return spec, shapes[0], dtype, sizes


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ["FLYTUNE_AUTOTUNE"] = "0"  # serving never searches, whatever the environment says
    import torch

    from flytune_nb import current_device, tuned
    from flytune_nb.errors import FlytuneError

    try:
        spec, rest, dtype, sizes = resolve(args)
    except FlytuneError as e:
        print(f"serve.py: error: {e}", file=sys.stderr)
        return 2
    if args.config_dir:  # once it is known to be a folder: a refused one changes nothing in this process
        os.environ["FLYTUNE_CONFIG_DIR"] = args.config_dir
    dev = current_device()
    op = tuned(spec, autotune=False)
    inputs = {m: spec.make_inputs(spec.check_shape({**rest, spec.batch_axis: m}), dtype, dev) for m in sizes}

    # The stream: a seeded mix of batch sizes, as a serving engine sees them. The first call of each size resolves
    # its config (artifact or default); every later one is a memory hit.
    rng = random.Random(0)
    first_source, config_of, sources = {}, {}, Counter()
    t0 = time.perf_counter()
    for m in [rng.choice(sizes) for _ in range(args.calls)]:
        op(**inputs[m])
        sources[op.last_source] += 1
        if m not in first_source:
            first_source[m], config_of[m] = op.last_source, str(op.config_for(inputs[m]))
    sync = torch.cuda.synchronize if dev.is_gpu else (lambda: None)
    sync()
    stream_s = time.perf_counter() - t0

    # Overhead: the smallest batch size (launch-bound, where it shows), tuned call vs the same config launched
    # through the kernel's own launcher.
    m = min(sizes)
    cfg = op.config_for(inputs[m])

    def per_call(fn, n):
        for _ in range(max(3, n // 20)):
            fn()
        sync()
        best = float("inf")
        for _ in range(3):
            t = time.perf_counter()
            for _ in range(n):
                fn()
            sync()
            best = min(best, (time.perf_counter() - t) / n)
        return best * 1e6

    n = args.overhead_calls if dev.is_gpu else max(3, args.overhead_calls // 200)  # interpreted launches cost ms
    raw_us = per_call(lambda: spec.run(inputs[m], cfg), n)
    tuned_us = per_call(lambda: op(**inputs[m]), n)

    report = {"kernel": spec.name, "shape": rest, "dtype": dtype, "device": dev.name, "calls": args.calls,
              "stream_s": stream_s, "sources": dict(sources), "first_call_source": first_source,
              "configs": config_of, "overhead": {"batch": m, "raw_us": raw_us, "tuned_us": tuned_us,
                                                 "ratio": tuned_us / raw_us}}
    print(f"served {args.calls} calls of {spec.name} {' '.join(f'{k}={v}' for k, v in rest.items())} {dtype} "
          f"on {dev.name} in {stream_s:.2f} s with zero search")
    print(f"config sources over the stream: {dict(sources)}")
    print(f"{spec.batch_axis:>6}  source    config")
    for b in sorted(config_of):
        print(f"{b:>6}  {first_source[b]:<8}  {config_of[b]}")
    print(f"per-call host time at {spec.batch_axis}={m}: launcher with a fixed config {raw_us:.2f} us, tuned call "
          f"{tuned_us:.2f} us ({tuned_us / raw_us:.3f}x)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
