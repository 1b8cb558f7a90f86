"""``flytune`` command line. User mistakes (unknown kernel, bad grid, bad dtype, shape too large) print one line
and exit 2; nothing is written."""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys

from flytune_nb.core.shapes import grid_size_text, shape_text
from flytune_nb.core.suggest import closest
from flytune_nb.errors import RunError, UsageError

EXIT_USAGE = 2
EXIT_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a writer whose reader closed the pipe
DEFAULT_DB = "flytune_results.db"

DEMO_DB = "flytune_demo.db"


def _finite_positive(unit: str):
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            v = float("nan")
        if not v > 0 or v == float("inf"):
            raise argparse.ArgumentTypeError(f"must be a number of {unit} > 0, got {text!r}")
        return v
    return parse


_seconds, _millis = _finite_positive("seconds"), _finite_positive("milliseconds")


def _positive(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return v


def _user_path(value: str) -> str:
    """A path option as the user wrote it, with a leading ``~`` expanded: quoted (``--db '~/runs.db'``, a value from a
    config file or a notebook's parameters) no shell expands it, and it would name a folder called ``~`` here. Empty
    text (``"$DIR"`` with DIR unset) is refused: read as a path it is the current folder, where nothing was asked."""
    if not value.strip():
        raise argparse.ArgumentTypeError("an empty path; give one, or leave it out for the default")
    return os.path.expanduser(value)


PATH_HELP = ("a folder that holds kernel folders (each subfolder with __init__.py, kernel.py, configs.py, "
             "heuristic.py, reference.py is one kernel); repeatable")
TIMEOUT_S = 120.0
WORKBENCH_DIR = "flytune-workbench"


class _Parser(argparse.ArgumentParser):
    """argparse with the CLI's one-line errors: argparse's own (a missing argument, `--budget 0`) print its usage
    block first; here they print what was wrong and where the usage is. Subcommand parsers share the class."""

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (usage: {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    from flytune_nb import __version__

    p = _Parser(prog="flytune", description="Tune GPU kernels; export configs; check regressions.")
    p.add_argument("--version", action="version", version=f"flytune_nb {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True)
    k = sub.add_parser("kernels", help="list kernels: name, axes, dtypes, space size")
    k.add_argument("--path", type=_user_path, action="append", default=[], help=PATH_HELP)
    s = sub.add_parser("sweep", help="sweep a kernel over a shape grid (resumable; results in --db)")
    s.add_argument("kernel")
    s.add_argument("--grid", required=True, help='e.g. "M=1,64,4096 N=4096,8192" (M=sglang for SGLang sizes)')
    s.add_argument("--dtype", action="append", default=None,
                   help="bf16 | fp16 | fp32 (repeatable; default: bf16, or the kernel's first dtype without it)")
    s.add_argument("--strategy", default="exhaustive", help="exhaustive | random | halving | surrogate")
    s.add_argument("--budget", type=_positive, default=None, help="at most this many configs per shape (>= 1)")
    s.add_argument("--db", type=_user_path, default=DEFAULT_DB, help=f"results store; re-running resumes (default {DEFAULT_DB})")
    s.add_argument("--timeout", type=_seconds, default=TIMEOUT_S,
                   help="seconds one trial may take before its worker is killed and it is recorded as timeout "
                        "(default %(default)g)")
    s.add_argument("--rep-ms", type=_millis, default=None,
                   help="GPU timing budget per config in ms (default 100, whose spread on the H200 measured 0.6%%; less is faster)")
    s.add_argument("--timing", default="events", choices=("events", "graph"),
                   help="events: one launch per sample, L2 flushed (default); graph: a CUDA graph of 10 calls "
                        "replayed, as engines serve decode (a different tuning key)")
    s.add_argument("--select-top", type=int, default=None, metavar="N",
                   help="re-time this many of the fastest candidates against the heuristic default after each "
                        "shape's search (default 3 on a GPU, 1 on the interpreter; 0: the fastest median wins)")
    s.add_argument("--select-rounds", type=_positive, default=None, metavar="R",
                   help="interleaved re-timing rounds (default 5 on a GPU, 3 on the interpreter; R more when the "
                        "best candidate is ambiguous)")
    s.add_argument("--tie-band", type=float, default=None, metavar="PCT",
                   help="the smallest margin that replaces the default, in percent (default 2; the band also "
                        "widens to 3 standard errors of the measured spread)")
    s.add_argument("--no-twins", action="store_true",
                   help="time every config, also those whose compiled binary is identical to one timed before")
    s.add_argument("--retry-failed", action="store_true",
                   help="measure every stored trial that did not pass again (wrong, compile_error, launch_error, "
                        "crashed, timeout), e.g. after a fix or with a longer --timeout")
    s.add_argument("--gpus", default=None, help="GPU indices, one worker each, e.g. 0,1,2,3")
    s.add_argument("--ray", default=None, metavar="ADDRESS", help="use Ray actors (auto | local | host:port)")
    s.add_argument("--no-isolate", action="store_true", help="run trials in this process (no crash isolation)")
    s.add_argument("--no-precompile", action="store_true", help="do not compile candidates in a pool first")
    s.add_argument("--baselines", default=None, help="torch_eager,torch_compile (default: both on GPU) or none")
    s.add_argument("--path", type=_user_path, action="append", default=[], help=PATH_HELP)
    s.add_argument("--all-trials", action="store_true", help="print every config of every shape")
    s.add_argument("--quiet", action="store_true", help="no progress bar")
    s.add_argument("--prune-census", nargs="?", const="", default=None, metavar="TARGET",
                   help="before timing, leave out configs that spill to scratch or build the same binary as another "
                        "(compiled for this GPU, or for TARGET on a machine without it: mi300x, h200, ...)")
    ce = sub.add_parser("census", help="compile every config for a GPU (none needed here): registers, spills, "
                                       "occupancy, load widths, identical binaries")
    ce.add_argument("kernel", nargs="?")
    ce.add_argument("--grid", default=None, help='e.g. "M=4096 N=4096" (default: the kernel\'s example shape)')
    ce.add_argument("--target", default=None,
                    help="mi300x | mi325x | mi350x | mi355x | h100 | h200 | b200 (default: this machine's GPU)")
    ce.add_argument("--dtype", action="append", default=None,
                    help="bf16 | fp16 | fp32 (repeatable; default: bf16, or the kernel's first dtype without it)")
    ce.add_argument("--db", type=_user_path, default=DEFAULT_DB, help=f"results store; the census table sits beside the trials "
                                                     f"(default {DEFAULT_DB})")
    ce.add_argument("-j", "--jobs", type=_positive, default=None, help="processes compiling (default: the cores, at most 16)")
    ce.add_argument("--every", type=_positive, default=1, help="only every k-th config of the space")
    ce.add_argument("--sample", type=_positive, default=None,
                    help="about this many configs spread over the space (a stride coprime to the knob periods)")
    ce.add_argument("--limit", type=_positive, default=None,
                    help="at most this many configs per shape, and the heuristic default (every census has it)")
    ce.add_argument("--config", action="append", default=[], metavar="CONFIG",
                    help="census only this config (BLOCK_N=1024,num_warps=4 or JSON; repeatable)")
    ce.add_argument("--every-config", action="store_true",
                    help="compile every config itself; by default, for AMD targets, configs that differ only in "
                         "the tile order (GROUP_SIZE_M) are compiled once and share that binary's resources")
    ce.add_argument("--csv", type=_user_path, default=None, help="also write every row here")
    ce.add_argument("--timeout", type=_seconds, default=300.0, help="seconds one config may take to compile")
    ce.add_argument("--list-targets", action="store_true", help="the named GPUs and their properties")
    ce.add_argument("--path", type=_user_path, action="append", default=[], help=PATH_HELP)
    ce.add_argument("--quiet", action="store_true", help="no progress bar")
    e = sub.add_parser("export", help="write SGLang-format config files from a results store")
    e.add_argument("--db", type=_user_path, required=True, help="results store written by `flytune sweep`")
    e.add_argument("--out", type=_user_path, default=None, help="config dir (default: $FLYTUNE_CONFIG_DIR, else the package's "
                                               "committed flytune_nb/exports/, where lookup and check read)")
    e.add_argument("--kernel", default=None, help="only this kernel")
    e.add_argument("--dtype", default=None, help="only this dtype (bf16 and fp16 share SGLang's MoE file names: a "
                                                 "store holding both exports one)")
    e.add_argument("--replace-stale", action="store_true",
                   help="drop a file's entries of another kernel source, toolchain or timing mode that this export "
                        "does not cover (by default export refuses to mix them)")
    e.add_argument("--path", type=_user_path, action="append", default=[], help=PATH_HELP)
    lk = sub.add_parser("lookup", help="the config a serving run would use, and where it comes from")
    lk.add_argument("kernel")
    lk.add_argument("shape", nargs="+", help="axis values, e.g. M=37 N=4096")
    lk.add_argument("--dtype", default=None, help="default: bf16, or the kernel's first dtype without it")
    lk.add_argument("--device", default=None, help="a named target (mi300x, h200, ...; --list-targets of census) or "
                                                   "a device name, as torch reports it or as in file names (default: "
                                                   "this machine's)")
    lk.add_argument("--dir", type=_user_path, default=None, help="config dir (default: $FLYTUNE_CONFIG_DIR, else the package's "
                                                "committed flytune_nb/exports/)")
    lk.add_argument("--path", type=_user_path, action="append", default=[], help=PATH_HELP)
    c = sub.add_parser("check", help="re-time committed configs on this device; non-zero exit on regression")
    c.add_argument("dir", type=_user_path, nargs="?", default=None, help="config dir (default: $FLYTUNE_CONFIG_DIR, else the "
                                                        "package's committed flytune_nb/exports/)")
    c.add_argument("--json", type=_user_path, default=None, help="also write the rows as JSON here")
    c.add_argument("--md", type=_user_path, default=None, help="also write a markdown table here")
    c.add_argument("--min-delta-us", type=float, default=None,
                   help="slowdowns smaller than this many microseconds are noise (default 1.0; 0 disables)")
    c.add_argument("--kernel", action="append", default=[], help="only this kernel (repeatable)")
    c.add_argument("--file", action="append", default=[], metavar="GLOB",
                   help="only artifacts whose file name or path matches, e.g. 'N=4096,*bf16*' (repeatable)")
    c.add_argument("--budget-s", type=_seconds, default=None,
                   help="stop timing after this many seconds; the rest is reported as not checked")
    c.add_argument("--rep-ms", type=_millis, default=None,
                   help="GPU timing budget per measurement in ms (default 100; 25 checks ~3x faster, noisier)")
    c.add_argument("--fail-stale", action="store_true",
                   help="exit 1 also when an entry was tuned for an older source of its kernel")
    c.add_argument("--accept-drift", action="store_true",
                   help="for rows slower only than when exported (not than the heuristic default), record today's "
                        "latencies as the exported ones in provenance.json")
    c.add_argument("--all", action="store_true",
                   help="print every row (default: every row up to 40 rows, else the rows that are not OK)")
    c.add_argument("--quiet", action="store_true", help="no progress bar")
    c.add_argument("--path", type=_user_path, action="append", default=[], help=PATH_HELP)
    ca = sub.add_parser("cache", help="where tuned winners are cached on disk; --clear forgets them")
    ca.add_argument("--clear", action="store_true", help="delete the cached winners (all, or --kernel's)")
    ca.add_argument("--kernel", default=None, help="only this kernel")
    _audit_sglang_parser(sub)
    d = sub.add_parser("demo", help="the embedded default sweep (GPU if present, else the Triton interpreter)")
    d.add_argument("--quiet", action="store_true", help="no progress bar")
    w = sub.add_parser("workbench", help="copy the workbench notebook into a folder of yours and open JupyterLab there")
    w.add_argument("dir", type=_user_path, nargs="?", default=WORKBENCH_DIR, help=f"the folder (default ./{WORKBENCH_DIR}); results "
                                                                 f"and exports are written there")
    w.add_argument("--no-lab", action="store_true", help="only copy the notebook and print the command to open it")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.cmd == "demo" or (args.cmd == "sweep" and not args.no_isolate and args.ray is None):
            from flytune_nb.engine.processes import prestart

            prestart()  # its torch import overlaps this process's own (the imports below): ~1 s on 2 CPU cores
    except KeyboardInterrupt:  # before the command started: nothing was run or written
        print("flytune: interrupted before anything ran", file=sys.stderr)
        return 130
    if argv is None:
        _stop_at_sigterm()
    rc = _run(args)
    if argv is None:
        import signal

        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if _TERMINATED:
            rc = 128 + signal.SIGTERM
    try:
        # Output shorter than stdout's buffer (8 KiB into a pipe) is written only here or at exit; a reader that left
        # (`| head`) makes that write fail, and at exit Python can only print "Exception ignored" and exit 120
        sys.stdout.flush()
    except BrokenPipeError:
        _drop_stdout()
        rc = rc or EXIT_PIPE
    if argv is None:  # the program itself (`flytune`, `python -m flytune_nb`), not a caller in its own process
        _end_at_ctrl_c_in_teardown(rc)
    return rc


_TERMINATED: list[int] = []  # the SIGTERM that stopped the command, once one has


class _Terminated(KeyboardInterrupt):
    """What a SIGTERM raises: every ``except KeyboardInterrupt`` stops for it as for a Ctrl-C. Not KeyboardInterrupt
    itself: CPython marks a KeyboardInterrupt leaving an exec() of a string (dataclasses and namedtuple build their
    methods so, all through an import) as unhandled, by its exact type, and then ends the process by SIGINT at exit
    whatever status the command returned."""


def _stop_at_sigterm() -> None:
    """SIGTERM (`kill`, a batch scheduler's time limit, a container's stop) is met as a Ctrl-C is: the command stops
    where it is, keeps what it stored, stops its workers, removes its lock and says so in one line, then ends with
    128 + SIGTERM as a killed command does. Left to the default, it would die at once with no word and leave the
    store's -wal/-shm and the sweep's lock file behind. A second SIGTERM ends the process at once. Workers ignore it
    (engine/processes.child_init): the parent stops them, and one dying of it mid-trial would read as a crash."""
    import signal

    def stop(signum, frame) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _TERMINATED.append(signum)
        raise _Terminated

    signal.signal(signal.SIGTERM, stop)


def _end_at_ctrl_c_in_teardown(rc: int) -> None:
    """The command is done and its output flushed, but tearing the interpreter down takes seconds once SGLang and
    FlyDSL are imported (about 3 s of `flytune kernels`' 10 on 2 CPU cores), and an exit handler of a library may
    wait on a child that hangs. Python's own handler would turn a Ctrl-C there into a traceback or a death by signal
    (status -2, as if the command had failed, after its output). From the first exit handler on, a Ctrl-C ends the
    process at once with the command's own status; past the last one, where Python no longer calls a signal handler,
    flytune_nb's own last exit handler ignores it instead. A thread still running at exit is waited for before
    either, and a Ctrl-C interrupts that wait as usual."""
    import atexit
    import signal

    import flytune_nb

    def end_now(signum, frame) -> None:
        try:
            # os._exit skips the exit handlers left, multiprocessing's among them: its temp folder (the forkserver's
            # socket, made by every sweep and demo) would stay in /tmp, one more per interrupted teardown
            from flytune_nb._compat.stdlib import multiprocessing_temp_dir

            tempdir = multiprocessing_temp_dir()
            if tempdir:
                import shutil

                shutil.rmtree(tempdir, ignore_errors=True)
            for stream in (sys.stdout, sys.stderr):  # what an exit handler printed after the command's own flush
                try:
                    stream.flush()
                except (OSError, ValueError):  # a reader that left, a stream closed
                    pass
        finally:
            os._exit(rc)

    flytune_nb.EXIT_STATUS = rc
    # where flytune_nb was imported by another program first, its last exit handler is not there: ignore from here on
    # registered last: runs first
    atexit.register(signal.signal, signal.SIGINT, end_now if flytune_nb._LAST_EXIT_HANDLER else signal.SIG_IGN)


def _drop_stdout() -> None:
    """Point stdout at /dev/null: what is still buffered for a reader that left is dropped, and Python's flush at
    exit has nothing to fail on."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _run(args) -> int:
    """The command's exit status; bad input, failures and Ctrl-C become one line on stderr and their status."""
    try:
        if getattr(args, "path", None):  # every command that takes --path: a typo there is refused before it runs
            _check_paths(args.path)
        return COMMANDS[args.cmd](args)
    except UsageError as e:
        print(f"flytune: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError as e:
        if not _stdout_is_gone():  # another pipe (a worker's): a failure like any other
            print(f"flytune: failed: {e}", file=sys.stderr)
            return 1
        # `flytune census ... | head`: the reader stopped reading. What is stored stays; the exit status is the
        # shell's for a writer whose reader left (128 + SIGPIPE), as `yes | head` gives
        _drop_stdout()
        return EXIT_PIPE
    except (RunError, OSError) as e:
        print(f"flytune: failed: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        how = "terminated (SIGTERM)" if _TERMINATED else "interrupted"
        if args.cmd not in ("sweep", "census", "demo"):  # no results store: nothing was kept to resume from
            said = "; no report was written and nothing resumes it: run it again" if args.cmd == "check" else ""
            print(f"flytune {args.cmd}: {how}{said}", file=sys.stderr)
            return 130
        cut = [f"; not recorded, in flight: {t}" for t in _INTERRUPTED]
        print(f"flytune: {how}; everything measured so far is in the results store (re-run to resume)"
              + "".join(cut), file=sys.stderr)
        return 130


def cmd_kernels(args) -> int:
    from flytune_nb.core.device import current_device
    from flytune_nb.core.registry import get_kernel, list_kernels

    dev = current_device()
    rows = []
    from flytune_nb.core.registry import RegistryError
    from flytune_nb.errors import KernelUnavailable

    broken = 0
    # importing a kernel can take seconds (SGLang's MoE kernel imports SGLang: ~10 s on a 2-core CPU): a terminal is
    # told which one, on one line that the table then replaces
    status = sys.stderr.isatty()
    for name in list_kernels(args.path):
        if status:
            print(f"\rloading {name} ...\033[K", end="", file=sys.stderr, flush=True)
        try:
            spec = get_kernel(name, args.path)
        except KernelUnavailable as e:  # an optional dependency is missing here: listed, not an error
            rows.append([name, "-", "-", "-", f"unavailable: {str(e).split(': ', 1)[-1]}"])
            continue
        except RegistryError as e:  # one broken plugin does not hide the others
            rows.append([name, "-", "-", "-", f"ERROR: {e}"])
            broken += 1
            continue
        example = spec.example()
        n = len(spec.configs(example, spec.dtypes[0], dev))
        rows.append([name, ",".join(spec.axes), spec.batch_axis, ",".join(spec.dtypes),
                     f"{n} @ " + shape_text(example)])
    from flytune_nb.ui.report import table

    if status:
        print("\r\033[K", end="", file=sys.stderr, flush=True)
    print(table(rows, ["kernel", "axes", "batch", "dtypes", f"space ({dev.name})"]))
    from flytune_nb.core.registry import discover, is_reference

    for path in args.path:  # a folder that adds nothing is said, not silently listed as nothing
        if not is_reference(str(path)) and not discover([path]).keys() - discover([]).keys():
            print(f"flytune: warning: --path {path} holds no kernel folders (subfolders with "
                  f"__init__.py, kernel.py, configs.py, heuristic.py, reference.py)", file=sys.stderr)
    return 1 if broken else 0


def _ints(text: str | None, what: str) -> list[int] | None:
    if text is None:
        return None
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"{what} must be comma-separated integers, got {text!r}") from None
    if not values:  # `--gpus "$GPUS"` with the variable unset would otherwise run as if --gpus were left out
        raise UsageError(f"{what} {text!r} names no GPU; give indices, e.g. {what} 0,1, or leave {what} out")
    return values


_INTERRUPTED: list = []  # the trials a Ctrl-C cut, for main's message


def cmd_sweep(args) -> int:
    from flytune_nb.ui.progress import TqdmListener
    from flytune_nb.ui.report import failure_line, measured_line, summary_table, trials_table
    from flytune_nb.engine.sweep import Sweep, SweepError

    progress = TqdmListener(disable=True if args.quiet else None)  # quiet: no bar, but it still tracks the trial in flight
    # --baselines goes as typed: Sweep reads "none" and refuses unknown names
    sw = Sweep(args.kernel, args.grid, args.dtype, db=args.db, paths=args.path, strategy=args.strategy,
               budget=args.budget, timeout=args.timeout, isolate=not args.no_isolate,
               precompile=False if args.no_precompile else None, baselines=args.baselines,
               gpus=_ints(args.gpus, "--gpus"), ray=args.ray, listeners=[progress],
               retry_failed=args.retry_failed,
               timer=None if args.rep_ms is None else {"rep_ms": args.rep_ms}, timing=args.timing,
               selection=_selection(args), twins=not args.no_twins,
               prune=None if args.prune_census is None else f"census:{args.prune_census}".rstrip(":"))
    from flytune_nb.core.device import interpreting

    if sw.timing == "graph" and interpreting() and args.ray is None:
        # The interpreter's timer runs the mode deliberately (measure/timer.py CpuTimer: several calls per sample,
        # what a replay runs), so its plumbing is exercised without a GPU; said, since nothing is a CUDA graph here
        # and every trial is measured again under a key of its own, apart from the events timings
        print("flytune: note: --timing graph on Triton's CPU interpreter: there is no CUDA graph here; each sample "
              "times several calls back to back on the CPU, and the trials are stored under their own 'graph' key, "
              "apart from --timing events", file=sys.stderr)
    n = len(sw.shapes) * len(sw.dtypes)
    print(f"flytune: {sw.spec.name}: {grid_size_text(len(sw.shapes), len(sw.dtypes))} = {n} "
          f"search{'es' if n != 1 else ''} "
          f"({args.strategy}{'' if args.budget is None else f', budget {args.budget}'}); results in {args.db}",
          flush=True)
    unprepared = ""
    try:
        results = sw.run()
    except KeyboardInterrupt:
        _INTERRUPTED[:] = progress.interrupted()
        raise
    except SweepError as e:
        if not sw.results:
            raise
        results, unprepared = sw.results, str(e)  # shapes the kernel refused: the others' tables, then the error
    for r in (results if args.all_trials else results[:1]):
        print()
        print(trials_table(r, sw.spec))
    print()
    print(summary_table(results))
    if sw.prune is not None:
        for (_, shape, dtype), dropped in sw.prune.dropped.items():
            why = collections.Counter("spill" if d.startswith("spills") else "same binary" for d in dropped.values())
            print(f"census pruning, {shape_text(json.loads(shape))} {dtype}: {len(dropped)} configs not timed "
                  f"({why['spill']} spill to scratch, {why['same binary']} duplicate another's binary)")
    print(f"\n{sum(len(r.trials) for r in results)} trials in {args.db} ({measured_line(sw.measured)}): "
          f"{failure_line(results)}" + (
        "; `--retry-failed` measures the failed ones again" if any(not t.ok for r in results for t in r.trials)
        else ""))
    if results and results[0].device.backend == "interpreter":
        print("\n(timings are Triton-interpreter wall-clock times on the CPU: they exercise the machinery, "
              "they say nothing about GPU speed)")
    if unprepared:
        print(f"flytune: failed: {unprepared}", file=sys.stderr)
        return 1
    return 0 if all(r.best is not None for r in results) else 1


def _selection(args):
    """The selection rule from the sweep's options: "auto" (the device decides) unless one is given."""
    from flytune_nb.strategies.selection import FLOOR, ROUNDS, TOP, Rule

    if args.select_top is None and args.select_rounds is None and args.tie_band is None:
        return "auto"
    if args.select_top is not None and args.select_top < 0:
        raise UsageError(f"--select-top must be >= 0, got {args.select_top}")
    if args.tie_band is not None and not 0 <= args.tie_band < 100:
        raise UsageError(f"--tie-band is a percentage in [0, 100), got {args.tie_band}")
    return Rule(top=TOP if args.select_top is None else args.select_top,
                rounds=ROUNDS if args.select_rounds is None else args.select_rounds,
                floor=FLOOR if args.tie_band is None else args.tie_band / 100)
def _configs(texts: list[str]) -> list | None:
    """--config values: ``NAME=INT,...`` or a JSON object."""
    from flytune_nb.core.config import Config

    if not texts:
        return None
    return [Config.from_json(t) if t.strip().startswith("{") else Config.parse(t) for t in texts]


def cmd_targets() -> int:
    from flytune_nb.core.targets import TARGETS
    from flytune_nb.ui.report import table

    def size(b: int) -> str:
        return f"{b >> 30} GiB" if b >= 1 << 30 else f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"

    rows = [[t.alias, t.device_name, t.arch, t.units, size(t.smem_per_block), size(t.rules.smem_per_unit),
             t.warp_size, size(t.register_file_bytes), size(t.l2_bytes), size(t.total_memory),
             ", ".join(t.unverified) or "-"] for t in TARGETS.values()]
    print(table(rows, ["target", "device name", "arch", "CUs/SMs", "smem/block", "smem/CU|SM", "warp",
                       "registers/CU|SM", "L2", "memory", "unverified"]))
    print("\nSources: flytune_nb/core/targets.py. AMD L2 is per XCD (what HIP reports).")
    return 0


def cmd_census(args) -> int:
    import csv
    from pathlib import Path

    from flytune_nb.engine.census_pool import Census
    from flytune_nb.engine.store import Store
    from flytune_nb.measure.census import format_summary

    if args.list_targets:
        return cmd_targets()
    if not args.kernel:
        raise UsageError("name a kernel (flytune kernels lists them), or --list-targets")
    bar = None

    def progress(shape, dtype, done, total):
        nonlocal bar
        if args.quiet:
            return
        from tqdm import tqdm

        label = shape_text(shape)
        if bar is None or bar.total != total or bar.desc != label:
            if bar is not None:
                bar.close()
            bar = tqdm(total=total, desc=label, unit="cfg", leave=False)
        bar.n = done
        bar.refresh()

    if args.csv:  # checked before minutes of compiling, not after
        args.csv = _report_path("--csv", args.csv)
        if Path(args.csv).resolve() == Path(args.db).expanduser().resolve():  # it would overwrite every stored row
            raise UsageError(f"--csv {args.csv} is the results store (--db); name another file")
    census = Census(args.kernel, args.grid, args.dtype, target=args.target, paths=args.path,
                    jobs=args.jobs, every=args.every, sample=args.sample, limit=args.limit,
                    configs=_configs(args.config), timeout=args.timeout, progress=progress,
                    siblings=not args.every_config)
    new_store = not Path(args.db).expanduser().exists()
    store = Store(args.db)
    try:
        print(f"flytune census: {census.spec.name} for {census.device.label}: "
              f"{grid_size_text(len(census.shapes), len(census.dtypes))}; rows in {args.db} (table census)", flush=True)
        census.db = store
        results = census.run()
    except UsageError:
        if new_store and store.count("census") == 0:  # bad input writes nothing: not even the empty store it opened
            store.close()
            for suffix in ("", "-wal", "-shm"):
                Path(f"{Path(args.db).expanduser()}{suffix}").unlink(missing_ok=True)
        raise
    finally:
        if bar is not None:
            bar.close()
        store.close()
    for s in results:
        print()
        print(format_summary(s))
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            recs = [r.to_record() for s in results for r in s.rows]
            w = csv.DictWriter(f, fieldnames=list(recs[0]))
            w.writeheader()
            w.writerows({**r, "shape": shape_text(r["shape"])} for r in recs)
        print(f"\nrows written to {args.csv}")
    failed = sum(s.failed for s in results)
    if failed:
        print(f"\n{failed} of the configs did not compile, or compiled to what no {census.device.name} launches "
              f"(the errors above)")
    return 1 if failed else 0


def _report_path(option: str, value: str) -> str:
    """A report file an option names, checked before the work whose result it holds (minutes of compiling or
    timing would otherwise end in an errno and lose the rows): not a folder, and in a folder that exists."""
    from pathlib import Path

    path = Path(value).expanduser()
    if path.is_dir():
        raise UsageError(f"{option} {value} is a folder; name a file in it")
    folder = path.resolve().parent
    if not folder.is_dir():
        raise UsageError(f"{option} {value}: no folder {folder}")
    if not os.access(path if path.exists() else folder, os.W_OK):
        raise UsageError(f"{option} {value}: cannot write there ({'the file' if path.exists() else folder} is "
                         "read-only)")
    return str(path)


def _two_reports(json_path: str | None, md_path: str | None) -> None:
    """--json and --md naming one file: one would overwrite the other (a CI job uploading the JSON got markdown)."""
    from pathlib import Path

    if json_path and md_path and Path(json_path).resolve() == Path(md_path).resolve():
        raise UsageError(f"--json and --md name one file, {md_path}: one would overwrite the other; name two")


def _known_name(name: str, known: list[str], none_of: str, listed: str = "there") -> None:
    """UsageError ``"<none_of> 'rmsnrm' (there: a, b); did you mean 'rmsnorm'?"`` unless ``name`` is in ``known``."""

    if name in known:
        return
    close = closest(name, known)
    raise UsageError(f"{none_of} {name!r} ({listed}: {', '.join(known) or 'none'})"
                     + (f"; did you mean {close!r}?" if close else ""))


def cmd_export(args) -> int:
    from flytune_nb.artifacts.export import export
    from flytune_nb.serve.lookup import config_dir
    from flytune_nb.engine.store import Store

    import warnings

    store = Store(args.db, readonly=True)  # StoreError "no results store at ..." when it is missing
    try:
        if args.kernel:
            _known_name(args.kernel, store.kernels(), f"{args.db} has no trials of")
        if args.dtype:
            from flytune_nb.core import dtypes

            _known_name(dtypes.canonical(args.dtype), store.dtypes(args.kernel),
                        f"{args.db} has no trials{' of ' + args.kernel if args.kernel else ''} in", "it holds")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            written = export(store, args.out or config_dir(), kernel=args.kernel, paths=args.path,
                             replace_stale=args.replace_stale, dtype=args.dtype)
    finally:
        store.close()
        # export checks every file's merge before it writes any, so a merge's warning comes twice: print it once
        for message in dict.fromkeys(str(w.message) for w in locals().get("caught", [])):
            print(f"warning: {message}", file=sys.stderr)
    if not written:
        print(f"flytune: nothing to export from {args.db} (no finished shape with passing trials"
              f"{' for ' + args.kernel if args.kernel else ''}{' in ' + args.dtype if args.dtype else ''})")
        return 1
    for p in written:
        print(p)
    return 0


def _stdout_is_gone() -> bool:
    """Whether our stdout is a pipe nobody reads any more: its write end polls as an error once the read end closed
    (a flush cannot tell: the failed write already dropped what was buffered)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & select.POLLERR for _, ev in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll (Windows), no file descriptor (a notebook's stdout)
        return True


def cmd_lookup(args) -> int:
    import dataclasses
    import warnings

    from flytune_nb.core.device import current_device
    from flytune_nb.core.shapes import parse_grid
    from flytune_nb.core.registry import get_kernel
    from flytune_nb.serve.lookup import config_dir_problem

    # else every lookup "falls back to the default", silently wrong: a served process warns and goes on, but this
    # command is how a user checks what it would serve
    if args.dir and not os.path.isdir(args.dir):
        raise UsageError(f"--dir {args.dir} is not a folder")
    problem = config_dir_problem(args.dir)
    if problem:
        raise UsageError(problem)
    spec = get_kernel(args.kernel, args.path)
    text = " ".join(args.shape)
    shapes = parse_grid(text, spec.axes, noun="shape", batch_axis=spec.batch_axis)
    if len(shapes) != 1:
        raise UsageError(f"lookup takes one shape, one value for each axis of {spec.name} "
                         f"(e.g. {shape_text(spec.example())}); got {text!r}")
    dtype = spec.check_dtype(args.dtype or spec.default_dtype)
    device = current_device()
    if args.device:
        from flytune_nb.core.targets import get_target

        try:  # a named GPU: its backend and arch decide which knobs and configs are valid (AMD's waves_per_eu, ...)
            device = get_target(args.device).device()
        except UsageError as e:  # "unknown target 'mi300'. Did you mean 'mi300x'? Known: ..."
            from flytune_nb.core.device import normalise_name

            # torch's name as a user copies it ("Intel(R) Arc(TM) A770 Graphics") or the file names' (spaces as _)
            name = normalise_name(args.device)
            print(f"note: {e}; files named for {name} are checked against this machine's space "
                  f"({device.name})", file=sys.stderr)
            device = dataclasses.replace(device, name=name)
    from flytune_nb.artifacts.sglang import lookup_as_served
    from flytune_nb.serve.lookup import stale_entry

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config, source, overridden = lookup_as_served(spec, shapes[0], dtype, device, args.dir)
    for w in caught:
        print(f"warning: {w.message}", file=sys.stderr)
    print(f"{config}  (source: {source}, device: {device.name})")
    if overridden is not None:
        print(f"note: the _down entry says BLOCK_SIZE_M={overridden}; SGLang runs it with the up config's "
              f"BLOCK_SIZE_M={config['BLOCK_SIZE_M']} (both GEMMs share one alignment)")
    stale = stale_entry(spec, shapes[0], dtype, device, args.dir) if source == "artifact" else None
    if stale:
        from flytune_nb.core.key import current_source

        path, m, tuned = stale
        print(f"note: stale: batch size {m} of {path} was tuned for another source of {spec.name} (source {tuned}; "
              f"installed {current_source(spec)}): it is served, but may no longer be the fastest; `flytune check` "
              f"re-times it and prints the command that sweeps its file again")
    from flytune_nb.artifacts.sglang import served_instead

    found = served_instead(spec, shapes[0], dtype, device) if source == "default" else None
    if found:  # what this command answers is the export's view; the engine's own server reads its own file first
        shipped_config, path, m = found
        # SGLang's down tables often repeat the up entry, which is the down GEMM's default: "instead of" would be false
        what = (", which is this default" if shipped_config == config else
                f" instead of this default: {shipped_config}")
        print(f"note: no export is read for this shape, and a SGLang server started without SGLANG_MOE_CONFIG_DIR "
              f"runs the entry SGLang ships{what}  (batch size {m} of {path})")
    if "adopted" in spec.extra:
        note = primed_note(spec, shapes[0], dtype, device, args.dir, config)
        if note:
            print(note)
    return 0


def primed_note(spec, shape: dict, dtype: str, device, directory, answered) -> str:
    """What a process that primes an adopted kernel launches for this call, where that is not lookup's answer:
    lookup serves the nearest exported batch size, while the autotuner keeps one config per key and prime fills the
    keys of exported shapes only."""
    from flytune_nb._compat import triton as tc
    from flytune_nb.serve.prime import served

    if not tc.tunes(spec.extra["adopted"].autotuner):
        return ""
    key, primed = served(spec, shape, dtype, directory, device=device)
    if primed is None:
        return (f"note: a process that runs flytune_nb.prime on these exports has no entry for this call's autotuner "
                f"key {key}: the decorator benchmarks its configs at that key's first call (export this shape to "
                f"serve it)")
    if primed.config != answered:
        shapes = ", ".join(shape_text(s) for s in primed.shapes)
        return (f"note: a process that runs flytune_nb.prime on these exports launches {primed.config} for this "
                f"call: its autotuner key {key} is shared by the exported {shapes}")
    return ""


def _check_paths(paths) -> None:
    """Every --path entry loads: a folder that is not one, a file or attribute that is not there is a typo, said as
    one usage error before anything runs. The registry reads references only when a name is not found among the
    folders, so otherwise a typo is ignored where the kernel is built in, and `check` would fail each exported file
    on it with advice to export the file again. A kernel whose optional dependency is missing here is no typo: check
    fails its files with what to install."""
    from flytune_nb.core.registry import is_reference, load_reference, search_path
    from flytune_nb.errors import KernelUnavailable

    search_path(paths)
    for ref in paths or ():
        if is_reference(str(ref)):
            try:
                load_reference(str(ref), paths)
            except KernelUnavailable:
                pass


def cmd_check(args) -> int:
    from pathlib import Path

    from flytune_nb.artifacts.gate import (
        HEADER, MIN_DELTA_US, STATUS_ORDER, accept_drift, advice, check, matches_file, row_cells, summary_lines,
        to_json, to_markdown, worst)
    from flytune_nb.core.device import current_device
    from flytune_nb.serve.lookup import config_dir, config_dir_problem
    from flytune_nb.ui.report import table

    directory = config_dir(args.dir)
    problem = config_dir_problem(args.dir)
    if problem:
        raise UsageError(problem)
    args.json = args.json and _report_path("--json", args.json)
    args.md = args.md and _report_path("--md", args.md)
    _two_reports(args.json, args.md)
    if args.accept_drift:  # refused before the timing, not after it: --accept-drift rewrites provenance.json files
        from flytune_nb.artifacts.files import PROVENANCE, check_writable, refuse_installed_copy

        refuse_installed_copy(directory)
        for prov in directory.rglob(PROVENANCE):
            check_writable(prov.parent)
    # A misspelt --kernel would check nothing and pass a CI gate. A real kernel with no exports there is "nothing
    # to check" (exit 0), as for a device with none.
    from flytune_nb.core.registry import discover

    exported = sorted(d.name for d in directory.iterdir() if d.is_dir())
    for name in args.kernel or ():
        if name not in discover(args.path):
            _known_name(name, exported, f"{directory} has no exports of, and no kernel is named,")
    # Likewise a mistyped --file glob; one that names only another device's files is "nothing to check" here
    if args.file:
        every = list(directory.rglob("*.json"))
        for glob in args.file:
            if not any(matches_file(f, [glob]) for f in every):
                raise UsageError(f"--file {glob!r} matches no file under {directory} (it is matched against each "
                                 f"file's name and path, e.g. 'N=4096,*bf16*')")
    dev = current_device()
    floor = MIN_DELTA_US if args.min_delta_us is None else args.min_delta_us
    if not floor >= 0 or floor == float("inf"):
        raise UsageError(f"--min-delta-us must be a number >= 0, got {args.min_delta_us}")
    bar = []

    def progress(done: int, total: int, row) -> None:
        if args.quiet:
            return
        if not bar:
            from tqdm.auto import tqdm

            bar.append(tqdm(total=total, desc="flytune check", unit="config", file=sys.stderr, dynamic_ncols=True,
                            mininterval=0.5 if sys.stderr.isatty() else 10.0))
        shape = shape_text(row.shape)
        bar[0].set_postfix_str(f"{row.kernel} {shape} {row.dtype}: {row.status}", refresh=False)
        bar[0].update(1)

    try:
        rows = check(directory, device=dev, paths=args.path, min_delta_us=floor, kernels=args.kernel or None,
                     files=args.file or None, budget_s=args.budget_s, progress=progress,
                     timer=None if args.rep_ms is None else {"rep_ms": args.rep_ms})
    finally:
        if bar:
            bar[0].close()
    # The reports are written in every case, so a CI job that uploads them finds them even when there was nothing
    # to check on this device.
    if args.json:
        Path(args.json).write_text(to_json(rows))
    if args.md:
        Path(args.md).write_text(to_markdown(rows, dev.name) if rows else
                                 f"# flytune check on {dev.name}\n\nNo committed configs for {dev.name} under "
                                 f"{directory}; nothing to check.\n")
    if not rows:
        filtered = " matching --kernel/--file" if args.kernel or args.file else ""
        print(f"flytune check: no committed configs for {dev.name}{filtered} under {directory}; nothing to check")
        return 0
    shown = rows if args.all or len(rows) <= 40 else [r for r in rows if r.status != "OK" or r.stale]
    shown = sorted(shown, key=lambda r: STATUS_ORDER[r.status]) if shown is not rows else shown
    if shown:
        print(table([row_cells(r) for r in shown], HEADER))
    if len(shown) < len(rows):
        print(f"({len(rows) - len(shown)} OK rows not shown; --all shows every row)")
    bad = [r for r in worst(rows) if r.status != "OK" or r.vs_default is not None]
    if bad and len(rows) > 1:
        print("\nworst rows:")
        for r in bad:
            shape = shape_text(r.shape)
            vs = "" if r.vs_default is None else f", {r.vs_default:.2f}x the heuristic default"
            then = "" if r.vs_then is None else f", {r.vs_then:.2f}x exported"
            print(f"  {r.status:4} {r.kernel} {shape} {r.dtype}{then}{vs}" + (f": {r.reason}" if r.reason else ""))
    print()
    for line in summary_lines(rows, dev.name):
        print(line)
    n_fail = sum(r.status == "FAIL" for r in rows)
    if args.accept_drift:
        accepted = accept_drift(rows)
        keys = {(r.path, r.batch) for r in accepted}
        n_fail = sum(r.status == "FAIL" and (r.path, r.batch) not in keys for r in rows)
        print(f"accepted the drift of {len(accepted)} entr{'y' if len(accepted) == 1 else 'ies'} "
              f"(provenance.json now records today's latencies for them)" if accepted else
              "nothing to accept: no row is slower only than when exported")
    todo = advice([r for r in rows if not (args.accept_drift and r.kind in ("exported", "drift"))], directory,
                  args.path, dev)
    if todo:
        print("\nwhat to do:")
        for line in todo:
            print(f"  {line}")
    stale = any(r.stale for r in rows)
    return 1 if n_fail or (args.fail_stale and stale) else 0


def cmd_cache(args) -> int:
    """The on-disk tuning cache ($FLYTUNE_CACHE_DIR, else $XDG_CACHE_HOME/flytune_nb, else ~/.cache/flytune_nb):
    one JSON file per tuning-key digest, written by searches (FLYTUNE_AUTOTUNE=1, tuned(...).tune, the notebook)."""
    from flytune_nb.serve.disk_cache import checked_dir, clear, entries, kernel_folders, stale_entries

    root = checked_dir()
    kdirs = kernel_folders(root)
    if args.kernel is not None:
        from flytune_nb.core.registry import discover

        _known_name(args.kernel, sorted({d.name for d in kdirs} | set(discover())), "no kernel named",
                    "known")
        kdirs = [d for d in kdirs if d.name == args.kernel]
    counts = {d.name: len(entries(d)) for d in kdirs}
    if args.clear:
        cleared = sum(clear(d) for d in kdirs)
        print(f"flytune: cleared {cleared} cached winner{'s' if cleared != 1 else ''} under {root}"
              f"{'' if args.kernel is None else f' for {args.kernel}'}")
        return 0
    print(f"tuning cache: {root}")
    if not counts:
        print("  (empty)")
    for d in kdirs:
        n, stale = counts[d.name], stale_entries(d)
        print(f"  {d.name}: {n} cached winner{'s' if n != 1 else ''}" + (
            f", {stale} of them stale (cached for another source of the kernel or another toolchain: never used "
            f"again)" if stale else ""))
    return 0


def _audit_sglang_parser(sub) -> None:
    a = sub.add_parser("audit-sglang", help="re-time the MoE configs the installed SGLang ships for this GPU against "
                                            "its default; write a markdown report")
    a.add_argument("--dir", type=_user_path, default=None, help="a SGLang config root holding configs/triton_X_Y_Z/ (default: the "
                                               "installed SGLang's own folder)")
    a.add_argument("--shape", action="append", default=[], metavar='"E=.. N=.. K=.. topk=.."',
                   help="hidden size and top-k for files of these E, N (repeatable); also reported when missing")
    a.add_argument("--dtype", default="bf16", help="bf16 | fp16 | fp8 (fp8: the dtype=fp8_w8a8 files; default bf16)")
    a.add_argument("--timing", choices=("graph", "events"), default="graph",
                   help="graph: 10 calls in one CUDA graph, as SGLang's tuner times (default); events: one launch per "
                        "sample, L2 flushed")
    a.add_argument("--search", type=_positive, default=None, metavar="N",
                   help="also time N configs of SGLang's space per entry (a quick search)")
    a.add_argument("--md", type=_user_path, default="sglang_audit.md", help="markdown report (default sglang_audit.md)")
    a.add_argument("--json", type=_user_path, default=None, help="also write the entries as JSON here")


def _audit_shapes(texts: list[str]) -> dict:
    out = {}
    for text in texts:
        try:
            d = dict(part.split("=", 1) for part in text.replace(",", " ").split())
            d = {k: int(v) for k, v in d.items()}
            out[(d.pop("E"), d.pop("N"))] = {"K": d.pop("K"), "topk": d.pop("topk")}
        except (ValueError, KeyError):
            raise UsageError(f'--shape takes "E=<int> N=<int> K=<int> topk=<int>", got {text!r}') from None
        if d:
            raise UsageError(f"--shape {text!r}: unknown axes {sorted(d)}")
    return out


def cmd_audit_sglang(args) -> int:
    from pathlib import Path

    from flytune_nb.artifacts.sglang_audit import AuditInterrupted, audit, to_json, to_markdown

    def progress(e):
        print(f"  {e.status:6} {e.file} M={e.M}: shipped {e.shipped_us or float('nan'):.1f} us, default "
              f"{e.default_us or float('nan'):.1f} us", flush=True)

    args.md = _report_path("--md", args.md)
    args.json = args.json and _report_path("--json", args.json)
    _two_reports(args.json, args.md)
    try:
        result = audit(args.dir, shapes=_audit_shapes(args.shape), dtype=args.dtype, search=args.search or 0,
                       listener=progress, timing=args.timing)
    except AuditInterrupted as e:
        # an audit keeps no results store (main's generic message would promise one): what was timed goes into the
        # report, marked partial, and nothing resumes it
        result = e.audit
        result.stopped_by = "SIGTERM" if _TERMINATED else "Ctrl-C"
        Path(args.md).write_text(to_markdown(result))
        if args.json:
            Path(args.json).write_text(to_json(result))
        print(f"flytune audit-sglang: {'terminated (SIGTERM)' if _TERMINATED else 'interrupted'}; the {len(result.entries)} entries timed before it are in {args.md}"
              f" (a partial report); running it again times every entry afresh", file=sys.stderr)
        return 130
    md = to_markdown(result)
    Path(args.md).write_text(md)
    if args.json:
        Path(args.json).write_text(to_json(result))
    print(md)
    print(f"flytune audit-sglang: report in {args.md}")
    return 1 if result.wrong or result.unreadable else 0


def cmd_demo(quiet: bool = False) -> int:
    """The embedded default: notebooks/batch_sweep.ipynb executed headless into demo_out/ (the plain CLI sweep when
    the notebook extras are not installed)."""
    import importlib.util
    from pathlib import Path

    from flytune_nb.core.device import current_device
    from flytune_nb.ui import NOTEBOOK_NEEDS
    from flytune_nb.ui.batch import demo_job

    kernel, grid, dtype = demo_job(current_device().is_gpu)
    # flytune_nb.ui.papermill imports papermill only when it runs a notebook, so importing it proves nothing: ask for
    # the notebook extra's modules the run needs (papermill, nbformat, ipykernel for the notebook's kernel, and what
    # the notebook's own cells import), or a half-installed extra fails inside the notebook as a papermill traceback
    needs = ("papermill", "nbformat", "ipykernel") + NOTEBOOK_NEEDS
    missing = [m for m in needs if importlib.util.find_spec(m) is None]
    if missing:
        print(f"flytune demo: {', '.join(missing)} not installed, so the demo runs as a plain sweep "
              f"(for the notebook: pip install 'flytune_nb[notebook]')", flush=True)
        argv = ["sweep", kernel, "--grid", grid, "--dtype", dtype, "--db", DEMO_DB] + (["--quiet"] if quiet else [])
        return main(argv)
    from flytune_nb.ui.papermill import printed_output, run_notebook

    print("flytune demo: running notebooks/batch_sweep.ipynb headless (papermill)...", flush=True)
    out = Path("demo_out")
    nb = run_notebook("batch_sweep.ipynb", out / "batch_sweep.ipynb",
                      {"kernel": kernel, "grid": grid, "dtypes": dtype, "db": "demo.db", "export_dir": "exports",
                       "results_csv": "results.csv", "results_json": "results.json"}, cwd=out)
    size = nb.stat().st_size
    print(printed_output(nb))
    print(f"flytune demo: executed notebook {nb} ({size / 1024:.0f} KiB), results {out}/results.csv and "
          f"results.json, store {out}/demo.db, exports under {out}/exports/. Open the notebook in JupyterLab to see "
          f"its plots.")
    return 0


def _jupyter_command() -> str:
    """How to start this environment's Jupyter from a plain shell: ``jupyter`` where that is the one on PATH, else its
    full path (a .venv that was never activated puts none on PATH)."""
    import shlex
    import shutil
    from pathlib import Path

    mine = Path(sys.executable).parent / "jupyter"
    found = shutil.which("jupyter")
    if not mine.exists() or (found is not None and Path(found).resolve() == mine.resolve()):
        return "jupyter"
    return shlex.quote(str(mine.absolute()))


def cmd_workbench(args) -> int:
    """Copy the packaged workbench notebook into ``args.dir`` (kept if it is there: it may hold the user's edits)
    and start JupyterLab on it there, so results and exports land in the user's folder, never in the package."""
    import shlex
    import shutil
    import subprocess
    from pathlib import Path

    from flytune_nb.core.resources import NOTEBOOKS

    folder = Path(args.dir).expanduser()
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{folder} exists and is not a folder")
    target = folder / "workbench.ipynb"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        copied = not target.exists()
        if copied:
            shutil.copyfile(NOTEBOOKS / "workbench.ipynb", target)
    except OSError as e:  # a folder the user named that cannot be made or written: bad input, nothing started
        from flytune_nb.core.paths import file_in_the_way

        blocking = file_in_the_way(folder)
        why = f"{blocking} exists and is not a folder" if blocking is not None else (e.strerror or str(e))
        raise UsageError(f"cannot put the workbench in {folder}: {why}") from None
    print(f"flytune: copied the workbench notebook to {target}" if copied else
          f"flytune: {target} is there already; opening it as it is")
    command = [sys.executable, "-m", "jupyterlab", str(target.name)]
    # quoted: the line is meant to be pasted into a shell, and a folder with a space would split into two words
    shown = f"cd {shlex.quote(str(folder))} && {_jupyter_command()} lab workbench.ipynb"
    if args.no_lab:
        print(f"open it with: {shown}")
        return 0
    try:
        import jupyterlab  # noqa: F401
    except ImportError:
        raise UsageError("JupyterLab is not installed: pip install 'flytune_nb[notebook]', then " + shown) from None
    print(f"flytune: starting JupyterLab in {folder} ({shown}); Ctrl-C stops it")
    lab = subprocess.Popen(command, cwd=folder)
    interrupts = 0
    while True:
        try:
            status = lab.wait()
            # negative where a signal killed it: exit() would wrap -9 to 247; a shell says 128 + the signal
            return 128 - status if status < 0 else status
        except KeyboardInterrupt:
            if not _TERMINATED:
                interrupts += 1
                if interrupts < 3:
                    # Ctrl-C reached JupyterLab too (one process group): it asks whether to shut down, and stops at
                    # a second Ctrl-C; it ends on its own, shutting its kernels down, and is waited for
                    continue
                # one still running at a third ignores Ctrl-C (hung, or deaf to SIGINT) or never got it (`kill -INT`
                # of this process alone): waiting on would leave the command deaf to Ctrl-C too
                print("flytune: JupyterLab did not stop at Ctrl-C; stopping it", file=sys.stderr)
                _stop_lab(lab)
                return 130
            # SIGTERM reached this process only: JupyterLab shuts its kernels and server down on one too
            how = "was shut down" if _stop_lab(lab) else "did not end within 30 s of SIGTERM and was killed"
            print(f"flytune: terminated (SIGTERM); JupyterLab {how}", file=sys.stderr)
            return 128 + 15


def _stop_lab(lab) -> bool:
    """SIGTERM, on which JupyterLab shuts its kernels and server down; killed where it has not ended in 30 s, or at
    once at a Ctrl-C meanwhile (the one way left to say "now"). Whether it ended on the SIGTERM."""
    import subprocess

    lab.terminate()
    try:
        lab.wait(timeout=30)
        return True
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        lab.kill()
        lab.wait()
        return False


COMMANDS = {"kernels": cmd_kernels, "sweep": cmd_sweep, "census": cmd_census, "export": cmd_export,
            "lookup": cmd_lookup, "check": cmd_check, "cache": cmd_cache, "audit-sglang": cmd_audit_sglang,
            "demo": lambda args: cmd_demo(quiet=args.quiet), "workbench": cmd_workbench}


if __name__ == "__main__":
    sys.exit(main())
