"""``flytune`` command line. User mistakes (unknown kernel, bad grid, bad dtype, shape too large) print one line
and exit 2; nothing is written."""
from __future__ import annotations

import argparse
import sys

EXIT_USAGE = 2
DEFAULT_DB = "flytune_results.db"

# The embedded default for `make demo` / `flytune demo`: a small rmsnorm sweep. On a GPU, decode (M=1) to prefill
# (M=4096) batch sizes at N=4096: 47 configs x 3 shapes, about a minute on the H200, most of it compiling (one
# N, so each config compiles once). On the interpreter, tiny shapes that finish in ~10 s on 2 cores.
DEMO_GPU = ("rmsnorm", "M=1,64,4096 N=4096", "bf16")
DEMO_CPU = ("rmsnorm", "M=4,16 N=1024", "bf16")
DEMO_DB = "flytune_demo.db"


def _positive(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return v


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="flytune", description="Tune GPU kernels; export configs; check regressions.")
    sub = p.add_subparsers(dest="cmd", required=True)
    k = sub.add_parser("kernels", help="list kernels: name, axes, dtypes, space size")
    k.add_argument("--path", action="append", default=[], help="extra kernel folder (repeatable)")
    s = sub.add_parser("sweep", help="sweep a kernel over a shape grid (resumable; results in --db)")
    s.add_argument("kernel")
    s.add_argument("--grid", required=True, help='e.g. "M=1,64,4096 N=4096,8192" (M=sglang for SGLang sizes)')
    s.add_argument("--dtype", action="append", default=None, help="bf16 | fp16 | fp32 (repeatable)")
    s.add_argument("--strategy", default="exhaustive", help="exhaustive | random | halving | surrogate")
    s.add_argument("--budget", type=_positive, default=None, help="at most this many configs per shape (>= 1)")
    s.add_argument("--db", default=DEFAULT_DB, help=f"results store; re-running resumes (default {DEFAULT_DB})")
    s.add_argument("--timeout", type=float, default=120.0, help="seconds one trial may take before it is killed")
    s.add_argument("--gpus", default=None, help="GPU indices, one worker each, e.g. 0,1,2,3")
    s.add_argument("--ray", default=None, metavar="ADDRESS", help="use Ray actors (auto | local | host:port)")
    s.add_argument("--no-isolate", action="store_true", help="run trials in this process (no crash isolation)")
    s.add_argument("--no-precompile", action="store_true", help="do not compile candidates in a pool first")
    s.add_argument("--baselines", default=None, help="torch_eager,torch_compile (default: both on GPU) or none")
    s.add_argument("--path", action="append", default=[], help="extra kernel folder (repeatable)")
    s.add_argument("--all-trials", action="store_true", help="print every config of every shape")
    s.add_argument("--quiet", action="store_true", help="no progress bar")
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
    from .store import StoreError
    from .sweep import ShapeTooLarge, SweepError

    try:
        if args.cmd == "kernels":
            return cmd_kernels(args)
        if args.cmd == "sweep":
            return cmd_sweep(args)
        if args.cmd == "demo":
            return cmd_demo(quiet=args.quiet)
    except (KernelNotFound, RegistryError, GridError, DtypeError, SpecError, ShapeTooLarge, ConfigError,
            ValueError) as e:
        print(f"flytune: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except (SweepError, StoreError) as e:
        print(f"flytune: failed: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("flytune: interrupted; everything measured so far is in the results store (re-run to resume)",
              file=sys.stderr)
        return 130
    return 0


def cmd_kernels(args) -> int:
    from .device import current_device
    from .registry import get_kernel, list_kernels

    dev = current_device()
    rows = []
    from .registry import RegistryError

    broken = 0
    for name in list_kernels(args.path):
        try:
            spec = get_kernel(name, args.path)
        except RegistryError as e:  # one broken plugin does not hide the others
            rows.append([name, "-", "-", "-", f"ERROR: {e}"])
            broken += 1
            continue
        example = {a: 4096 for a in spec.axes}
        n = len(spec.configs(example, spec.dtypes[0], dev))
        rows.append([name, ",".join(spec.axes), spec.batch_axis, ",".join(spec.dtypes),
                     f"{n} @ " + " ".join(f"{a}={v}" for a, v in example.items())])
    from .report import table

    print(table(rows, ["kernel", "axes", "batch", "dtypes", f"space ({dev.name})"]))
    return 1 if broken else 0


def _ints(text: str | None, what: str) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{what} must be comma-separated integers, got {text!r}") from None


def cmd_sweep(args) -> int:
    from .progress import TqdmListener
    from .report import summary_table, trials_table
    from .sweep import Sweep

    baselines = None
    if args.baselines is not None:
        baselines = () if args.baselines.strip().lower() == "none" else tuple(
            b.strip() for b in args.baselines.split(",") if b.strip())
        bad = [b for b in baselines if b not in ("torch_eager", "torch_compile")]
        if bad:
            raise ValueError(f"unknown baseline {bad[0]!r}; use torch_eager, torch_compile or none")
    sw = Sweep(args.kernel, args.grid, args.dtype or ["bf16"], db=args.db, paths=args.path, strategy=args.strategy,
               budget=args.budget, timeout=args.timeout, isolate=not args.no_isolate,
               precompile=False if args.no_precompile else None, baselines=baselines,
               gpus=_ints(args.gpus, "--gpus"), ray=args.ray, listeners=[] if args.quiet else [TqdmListener()])
    n = len(sw.shapes) * len(sw.dtypes)
    print(f"flytune: {sw.spec.name}: {len(sw.shapes)} shapes x {len(sw.dtypes)} dtypes = {n} searches "
          f"({args.strategy}{'' if args.budget is None else f', budget {args.budget}'}); results in {args.db}",
          flush=True)
    results = sw.run()
    for r in (results if args.all_trials else results[:1]):
        print()
        print(trials_table(r, sw.spec))
    print()
    print(summary_table(results))
    if results and results[0].device.backend == "interpreter":
        print("\n(timings are Triton-interpreter wall-clock times on the CPU: they exercise the machinery, "
              "they say nothing about GPU speed)")
    return 0 if all(r.best is not None for r in results) else 1


def cmd_demo(quiet: bool = False) -> int:
    from .device import current_device

    kernel, grid, dtype = DEMO_GPU if current_device().is_gpu else DEMO_CPU
    argv = ["sweep", kernel, "--grid", grid, "--dtype", dtype, "--db", DEMO_DB] + (["--quiet"] if quiet else [])
    return main(argv)


if __name__ == "__main__":
    sys.exit(main())
