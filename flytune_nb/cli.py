"""``flytune`` command line. User mistakes (unknown kernel, bad grid, bad dtype, shape too large) print one line
and exit 2; nothing is written."""
from __future__ import annotations

import argparse
import sys

EXIT_USAGE = 2

# The embedded default for `make demo` / `flytune demo`: a small rmsnorm sweep. On a GPU, decode (M=1) to prefill
# (M=4096) batch sizes at N=4096: 47 configs x 3 shapes, about a minute on the H200, most of it compiling (one
# N, so each config compiles once). On the interpreter, tiny shapes that finish in ~10 s on 2 cores.
DEMO_GPU = ("rmsnorm", "M=1,64,4096 N=4096", "bf16")
DEMO_CPU = ("rmsnorm", "M=4,16 N=1024", "bf16")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="flytune", description="Tune GPU kernels; export configs; check regressions.")
    sub = p.add_subparsers(dest="cmd", required=True)
    k = sub.add_parser("kernels", help="list kernels: name, axes, dtypes, space size")
    k.add_argument("--path", action="append", default=[], help="extra kernel folder (repeatable)")
    s = sub.add_parser("sweep", help="sweep a kernel over a shape grid")
    s.add_argument("kernel")
    s.add_argument("--grid", required=True, help='e.g. "M=1,64,4096 N=4096,8192" (M=sglang for SGLang sizes)')
    s.add_argument("--dtype", action="append", default=None, help="bf16 | fp16 | fp32 (repeatable)")
    s.add_argument("--budget", type=int, default=None, help="at most this many configs per shape")
    s.add_argument("--strategy", default="exhaustive")
    s.add_argument("--path", action="append", default=[], help="extra kernel folder (repeatable)")
    s.add_argument("--all-trials", action="store_true", help="print every config of every shape")
    d = sub.add_parser("demo", help="the embedded default sweep (GPU if present, else the Triton interpreter)")
    d.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from .config import ConfigError
    from .dtypes import DtypeError
    from .grid import GridError
    from .registry import KernelNotFound, RegistryError
    from .spec import SpecError
    from .sweep import ShapeTooLarge

    try:
        if args.cmd == "kernels":
            return cmd_kernels(args)
        if args.cmd == "sweep":
            return cmd_sweep(args.kernel, args.grid, args.dtype or ["bf16"], args.budget, args.strategy, args.path,
                             all_trials=args.all_trials)
        if args.cmd == "demo":
            return cmd_demo(quiet=args.quiet)
    except (KernelNotFound, RegistryError, GridError, DtypeError, SpecError, ShapeTooLarge, ConfigError,
            ValueError) as e:
        print(f"flytune: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    return 0


def cmd_kernels(args) -> int:
    from .device import current_device
    from .registry import get_kernel, list_kernels

    dev = current_device()
    rows = []
    for name in list_kernels(args.path):
        spec = get_kernel(name, args.path)
        example = {a: 4096 for a in spec.axes}
        n = len(spec.configs(example, spec.dtypes[0], dev))
        rows.append([name, ",".join(spec.axes), spec.batch_axis, ",".join(spec.dtypes),
                     f"{n} @ " + " ".join(f"{a}={v}" for a, v in example.items())])
    from .report import table

    print(table(rows, ["kernel", "axes", "batch", "dtypes", f"space ({dev.name})"]))
    return 0


def cmd_sweep(kernel: str, grid: str, dtypes: list[str], budget, strategy: str, paths, *, all_trials=False,
              quiet=False) -> int:
    from .device import current_device
    from .grid import parse_grid
    from .progress import TqdmListener
    from .registry import get_kernel
    from .report import summary_table, trials_table
    from .strategies import get_strategy
    from .sweep import sweep

    spec = get_kernel(kernel, paths)
    shapes = parse_grid(grid, spec.axes)
    strat = get_strategy(strategy)
    dev = current_device()
    print(f"flytune: {spec.name} on {dev.label}: {len(shapes)} shapes x {len(dtypes)} dtypes", flush=True)
    listeners = [] if quiet else [TqdmListener()]
    results = sweep(spec, shapes, dtypes, device=dev, strategy=strat, budget=budget, listeners=listeners)
    for r in (results if all_trials else results[:1]):
        print()
        print(trials_table(r, spec))
    print()
    print(summary_table(results))
    if dev.backend == "interpreter":
        print("\n(timings are Triton-interpreter wall-clock times on the CPU: they exercise the machinery, "
              "they say nothing about GPU speed)")
    return 0 if all(r.best is not None for r in results) else 1


def cmd_demo(quiet: bool = False) -> int:
    from .device import current_device

    kernel, grid, dtype = DEMO_GPU if current_device().is_gpu else DEMO_CPU
    return cmd_sweep(kernel, grid, [dtype], None, "exhaustive", [], quiet=quiet)


if __name__ == "__main__":
    sys.exit(main())
