"""How close does a heuristic fitted from a store's sweeps come to the best on model shapes left out of the fit, beside the hand-written rule? (no GPU)

Per kernel and dtype of the committed H200 stores (or --store), the rule flytune_nb.analysis.fit suggests, and its
regret (pick / best) on the shapes left out of the fit beside the hand rule's on the same shapes.

A fold holds out one model shape (every batch size of one N, or of one (N, K) for matmul) and fits on the others, so
the regret is what a shape that was never swept gets. The stores were swept with earlier versions of the kernels (the
rows' looped form before its cache hints, matmul before SPLIT_K / STREAM_K): a pick of the current hand rule that
they never timed is counted as unmeasured, never guessed.

Usage: python -m benchmarks heuristic_fit [--max-depth 3] [--store PATH --kernel NAME [--dtype bf16] [--path P]]
[--out DIR]; --path finds a kernel that is not built in, as flytune's commands do (an adopted kernel:
--path my_kernels.py:SPEC).
~1 minute on a CPU. Results: benchmarks/results/<device>/heuristic_fit.{json,md}, filed under the device that measured
the stores (NVIDIA_H200 for the committed ones; a --store's own), and the suggested rules as
heuristic_fit_<kernel>_<dtype>.py.txt beside them.
"""
from __future__ import annotations

import math
import sys
import time
from pathlib import Path

from benchmarks.common import RESULTS, parser, results_dir, write

DEVICE = "NVIDIA_H200"
STORES = [("rmsnorm", "h200_sweeps.db", ("bf16", "fp16")), ("fused_add_rmsnorm", "h200_sweeps.db", ("bf16", "fp16")),
          ("softmax", "softmax_sweeps.db", ("bf16",)), ("matmul", "gemm_tma_sweeps.db", ("bf16",))]


def main(argv=None) -> int:
    p = parser(__doc__, __file__)
    p.add_argument("--max-depth", type=int, default=3, help="splits from the root to a leaf (default 3)")
    p.add_argument("--store", type=Path, default=None, help="one store instead of the committed ones (with --kernel)")
    p.add_argument("--kernel", default=None, help="the kernel to fit from --store")
    p.add_argument("--dtype", default="bf16", help="the dtype to fit from --store (default bf16)")
    p.add_argument("--name", default="heuristic_fit", help="result file name")
    p.add_argument("--path", action="append", default=[],
                   help="where --kernel is found when it is not built in, as flytune's --path: a folder that holds "
                        "kernel folders, or a module attribute holding a spec ('my_kernels.py:SPEC', "
                        "'package.module:SPEC', an adopted kernel's); repeatable")
    args = p.parse_args(argv)

    from flytune_nb.analysis import fit as F
    from flytune_nb.core.device import DESCRIBED
    from flytune_nb.core.registry import get_kernel
    from flytune_nb.errors import UsageError

    if (args.store is None) != (args.kernel is None):
        raise UsageError("--store and --kernel go together")
    if args.max_depth < 1:
        raise UsageError(f"--max-depth must be >= 1, got {args.max_depth}")
    if args.path and not args.store:
        raise UsageError("--path finds the kernel of --store: give --store and --kernel with it")
    _check_paths(args.path)
    plan = [(args.kernel, args.store, (get_kernel(args.kernel, args.path).check_dtype(args.dtype),))] \
        if args.store else [(k, RESULTS / DEVICE / "stores" / db, dts) for k, db, dts in STORES]
    dev = _store_device(args.store) if args.store else DESCRIBED[DEVICE]
    folder = results_dir(args.out, dev.name)
    t0 = time.perf_counter()
    rows, lines, notes = [], [], []
    for kernel, store, dtypes in plan:
        spec = get_kernel(kernel, args.path)
        db = Path(store).name
        for dtype in dtypes:
            data = F.from_store(store, kernel, dtype=dtype, canonical=spec.canonical)
            # the GEMM store's persistent-TMA configs land on the space as they are; the rows' on today's space
            v = F.cross_validate(data, spec, dev, max_depth=args.max_depth)
            # a score over no held-out shape is no number: null in the JSON (strict parsers refuse NaN), "-" here
            # (the summary's "shapes" counts the held-out ones: kept apart from the store's count of shapes)
            s = {("held_out" if k == "shapes" else k): (None if isinstance(x, float) and math.isnan(x) else x)
                 for k, x in v.summary().items()}
            if not s["compared"]:
                notes.append(f"{kernel} {dtype}: no held-out score: {_why_not_scored(data, spec, v)}")
            rule = F.fit(data, spec, dev, max_depth=args.max_depth)
            rule.source_note = f"{db}, {dtype}, {len(data)} shapes"
            (folder / f"{args.name}_{kernel}_{dtype}.py.txt").write_text(rule.source)
            rows.append({"kernel": kernel, "dtype": dtype, "store": db, "shapes": len(data), **s,
                         "leaves": len(rule.leaves()),
                         "hand_leaves": sum(leaf.template is F.HAND for leaf in rule.leaves())})
            num = lambda x, digits: "-" if x is None else f"{x:.{digits}f}"  # noqa: E731
            lines.append(f"| {kernel} | {dtype} | {db} | {len(data)} | {s['compared']} | "
                         f"{num(s['fitted_regret'], 3)} | {num(s['hand_regret'], 3)} | {num(s['fitted_worst'], 2)} | "
                         f"{num(s['hand_worst'], 2)} | {s['hand_unmeasured']} | {len(rule.leaves())} "
                         f"({rows[-1]['hand_leaves']} hand) |")
    md = "\n".join([
        f"# Fitted heuristics on {f'the {dev.name} store {args.store.name}' if args.store else 'the committed H200 stores'}"
        ": regret on held-out model shapes",
        f"flytune_nb.analysis.fit, max depth {args.max_depth}; one fold per model shape (every batch size of one N, "
        "or (N, K)); regret = pick / best of the store at that shape, geomean over the shapes where both picks were "
        f"timed. {time.perf_counter() - t0:.0f} s on the CPU.", "",
        "| kernel | dtype | store | shapes | compared | fitted | hand rule | fitted worst | hand worst | hand picks "
        "not in the store | leaves of the full fit |", "|---|---|---|---|---|---|---|---|---|---|---|", *lines, "",
        *([*notes, ""] if notes else []),
        "The full fits (every shape) are in heuristic_fit_<kernel>_<dtype>.py.txt: open one in the workbench's "
        "heuristic editor to re-score it. A leaf marked hand keeps the hand-written rule (hand_default), which the "
        "fit overrides only where two or more shapes agree on a config at least 1% faster."])
    write(args.name, {"max_depth": args.max_depth, "rows": rows}, md, out=args.out, device=dev.name)
    return 0


def _why_not_scored(data, spec, validation) -> str:
    """Why cross-validation compared no shape: one model shape leaves no fold anything to fit on; else no held-out
    pick was timed in the store."""
    others = [a for a in spec.axes if a != spec.batch_axis]
    models = sorted({" ".join(f"{a}={s.shape[a]}" for a in others) for s in data})
    if len(models) < 2:
        return (f"the store holds one model shape ({models[0] if models else '-'}); each fold holds one out and fits "
                f"on the others, so sweep a second one to score the rule on a shape it never saw")
    return (f"of the {len(validation.rows)} held-out shapes, none has both the fitted and the hand rule's pick timed "
            f"in the store")


def _check_paths(paths) -> None:
    """Every --path entry loads, as flytune's commands check theirs: a folder that is not one, or a file or attribute
    that is not there, is one usage error before anything is read."""
    from flytune_nb.core.registry import is_reference, load_reference, search_path

    search_path(paths)
    for ref in paths:
        if is_reference(ref):
            load_reference(ref, paths)


def _store_device(path: Path):
    """The device a store's sweeps ran on (the fit asks the heuristic about that device, and the results are filed
    under it); one clear error for a store that ran on several or does not say."""
    from flytune_nb.core.device import DeviceInfo
    from flytune_nb.engine.store import Store
    from flytune_nb.errors import UsageError

    store = Store(path, readonly=True)
    try:
        devices = {info["name"]: info for info in store.run_devices().values()}
    finally:
        store.close()
    if len(devices) != 1:
        what = "does not record the device it ran on" if not devices else \
            f"holds sweeps from {len(devices)} devices ({', '.join(sorted(devices))})"
        raise UsageError(f"{path} {what}; fit from a store of one device")
    return DeviceInfo(**next(iter(devices.values())))


if __name__ == "__main__":
    sys.exit(main())
