"""One headless batch: sweep -> store -> results CSV/JSON -> SGLang exports -> a printed summary.
What notebooks/batch_sweep.ipynb calls (under papermill or by hand); no Jupyter import here."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

from flytune_nb.errors import RunError, UsageError
from flytune_nb.analysis.scores import speedup_rows
from flytune_nb.artifacts.export import export, refuse_interpreter_timings
from flytune_nb.artifacts.files import ArtifactError, check_writable, refuse_inside_layout
from flytune_nb.core.paths import beside
from flytune_nb.core.shapes import shape_text
from flytune_nb.ui.progress import LineListener, TqdmListener
from flytune_nb.analysis.failures import summarize
from flytune_nb.ui.report import failure_line, measured_line, summary_table, trials_table
from flytune_nb.engine.sweep import Sweep


# The embedded default job (`make demo`, `flytune demo`, the batch notebook run without a grid): a small rmsnorm
# sweep. On a GPU, decode (M=1) to prefill (M=4096) batch sizes at N=4096: 47 configs x 3 shapes, about a minute on
# the H200, most of it compiling (one N, so each config compiles once). On the interpreter, tiny shapes that finish
# in ~10 s on 2 cores (M=4096 alone would take most of an hour there: 5.6 s a call).
DEMO_GPU = ("rmsnorm", "M=1,64,4096 N=4096", "bf16")
DEMO_CPU = ("rmsnorm", "M=4,16 N=1024", "bf16")


def demo_job(is_gpu: bool) -> tuple[str, str, str]:
    """(kernel, grid, dtype) of the embedded default on this kind of machine."""
    return DEMO_GPU if is_gpu else DEMO_CPU


def _default_grid(kernel: str) -> str:
    """The grid of a batch given none: the demo's, sized for this machine, when the kernel is the demo's."""
    from flytune_nb.core.device import current_device

    demo_kernel, grid, _ = demo_job(current_device().is_gpu)
    if kernel != demo_kernel:
        raise UsageError(f"grid: name the shapes to sweep for {kernel}, e.g. \"M=1,64 N=4096\" (flytune kernels "
                         f"lists its axes); only the demo kernel, {demo_kernel}, has a default grid")
    print(f"grid: {grid} (the default on this machine)")
    return grid


def _home(path):
    """``path`` with a leading ``~`` expanded, of the type it was given as (str or Path)."""
    return type(path)(os.path.expanduser(path)) if isinstance(path, (str, Path)) else path


def _check_outputs(db, export_dir, **files) -> None:
    """Every output of the batch writable where it is named, before the sweep: a results file in a missing folder,
    a folder given for a file, a results file that is the store itself (which it would overwrite, losing every
    trial), or two results files that are one, is one UsageError naming the parameter."""
    store = Path(db).expanduser().resolve()
    named = [(name, Path(f).expanduser().resolve()) for name, f in files.items() if f]
    for i, (name, path) in enumerate(named):
        other = next((n for n, p in named[:i] if p == path), None)
        if other is not None:  # the later file would be written over the earlier
            raise UsageError(f"{other} and {name} name one file, {files[name]}; name two (or None to skip one)")
    for name, f in files.items():
        if not f:
            continue
        if Path(f).resolve() == store:
            raise UsageError(f"{name} {f} is the results store (db); name another file")
        if Path(f).is_dir():
            raise UsageError(f"{name} {f} is a folder; name a file in it")
        folder = Path(f).resolve().parent
        if not folder.is_dir() and folder != store.parent:  # the store's folder is made with it, as the CLI's is
            raise UsageError(f"{name} {f}: folder {folder} does not exist")
    if export_dir and Path(export_dir).exists() and not Path(export_dir).is_dir():
        raise UsageError(f"export_dir {export_dir} exists and is not a folder")
    if export_dir:
        from flytune_nb.core.device import current_device

        try:  # a folder the export could not write would otherwise be found after the whole sweep
            check_writable(Path(export_dir))
            refuse_inside_layout(export_dir)
        except ArtifactError as e:
            raise UsageError(f"export_dir: {e}") from None
        refuse_interpreter_timings(export_dir, {current_device().name})


class Interrupted(RunError):
    """The batch was interrupted (Ctrl-C, a kernel interrupt): what was measured is in the store."""


def _progress(value):
    """``progress``: True (tqdm bars), False (nothing) or "lines" (a line per finished shape and a status line
    every half minute: what a log shows, ``papermill --log-output``)."""
    if isinstance(value, str) and value.strip().lower() == "lines":
        return "lines"
    try:
        return _flag("progress", value)
    except UsageError:
        raise UsageError(f'progress must be True, False or "lines", got {value!r}') from None


def _flag(name: str, value) -> bool:
    """True/False, or papermill's and a shell's spellings of them; anything else is a UsageError, never a truthy
    guess ("no" would otherwise leave isolation on)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    text = str(value).strip().lower()
    if text in ("true", "yes", "on", "1"):
        return True
    if text in ("false", "no", "off", "0"):
        return False
    raise UsageError(f"{name} must be True or False, got {value!r}")


def run_batch(kernel: str, grid, dtypes=None, *, strategy: str = "exhaustive", budget: int | None = None,
              db: str = "batch.db", export_dir: str | None = "exports", results_csv: str | None = "",
              results_json: str | None = "", isolate: bool = True, paths=(), progress: bool = True,
              timeout: float | str = 120.0, retry_failed: bool = False):
    """Run the sweep (resuming from ``db``), write results and exports; returns the list of SearchResults.
    ``results_csv`` / ``results_json``: "" (default) writes them beside ``db`` (``batch.results.csv``), None skips.
    ``timeout``: seconds per trial before its worker is killed (recorded as timeout); ``paths``: folders that hold
    kernel folders (a plugin of yours). ``dtypes`` None: the kernel's own (KernelSpec.default_dtype). ``grid`` None:
    the demo's grid for this machine (the demo kernel only). ``progress``: see ``_progress``."""
    if not isinstance(kernel, str) or not kernel.strip():
        raise UsageError(f"kernel must be a kernel's name (flytune kernels lists them), got {kernel!r}")
    if grid is None:
        grid = _default_grid(kernel.strip())
    if not isinstance(db, (str, Path)) or not str(db).strip():
        raise UsageError(f"db must be the path of a results store, got {db!r}")
    if isinstance(budget, str):  # papermill -r passes text
        try:
            budget = int(budget) if budget.strip() else None
        except ValueError:
            raise UsageError(f"budget must be a whole number of configs, got {budget!r}") from None
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int)):
        raise UsageError(f"budget must be a whole number of configs, got {budget!r}")
    try:
        timeout = float(timeout)
    except (TypeError, ValueError):
        raise UsageError(f"timeout must be a number of seconds, got {timeout!r}") from None
    isolate, retry_failed, progress = _flag("isolate", isolate), _flag("retry_failed", retry_failed), _progress(progress)
    if isinstance(paths, str):  # papermill -p paths ./my_kernels
        paths = [p for p in paths.split(",") if p.strip()]
    # parameters are text no shell expanded: a ~ in them is the home folder, as in the CLI's path options
    db, paths = _home(db), [_home(p) for p in paths]
    export_dir, results_csv, results_json = (_home(f) if f else f for f in (export_dir, results_csv, results_json))
    results_csv = beside(db, ".results.csv") if results_csv == "" else results_csv
    results_json = beside(db, ".results.json") if results_json == "" else results_json
    _check_outputs(db, export_dir, results_csv=results_csv, results_json=results_json)  # before the sweep, not after
    # the tqdm listener also tracks the trials in flight, for the message after an interrupt, when it shows nothing
    tracker = TqdmListener(disable=progress is not True)
    listeners = [tracker] + ([LineListener()] if progress == "lines" else [])
    sweep = Sweep(kernel, grid, dtypes, db=db, strategy=strategy, budget=budget, isolate=isolate, paths=paths,
                  timeout=timeout, retry_failed=retry_failed, listeners=listeners)
    try:
        results = sweep.run()
    except KeyboardInterrupt:
        cut = "".join(f"; not recorded, in flight: {t}" for t in tracker.interrupted())
        raise Interrupted(f"interrupted: every trial measured so far is in {db}; run the same batch again to "
                          f"resume{cut}") from None
    rows = speedup_rows(results)
    if results_csv:
        import pandas as pd

        pd.DataFrame(rows).to_csv(results_csv, index=False)
    if results_json:
        clean = [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()}
                 for r in rows]
        Path(results_json).write_text(json.dumps(clean, indent=1) + "\n")
    written = export(sweep.store, export_dir, kernel=sweep.spec.name, paths=paths) if export_dir else []
    if results:
        print(trials_table(results[0], sweep.spec))  # every config of the first shape: latency, pass/fail, marks
        print()
    print(summary_table(results))
    print(f"\n{sum(len(r.trials) for r in results)} trials in {db} ({measured_line(sweep.measured)}): "
          f"{failure_line(results)}"
          + (f"; results: {', '.join(p for p in (results_csv, results_json) if p)}" if rows else "")
          + (f"; exported {len(written)} file(s) under {export_dir}" if written else ""))
    return results


def require_a_winner_per_shape(results) -> None:
    """The batch notebook's last cell: a RunError (papermill's exit status 1, as `flytune sweep` returns) unless every
    shape has a config that passed. Run after the report, so that the report still shows what failed and why;
    without it a batch whose every trial timed out ended as a success with nothing exported."""
    empty = [r for r in results if r.best is None]
    if empty:
        named = "; ".join(f"{shape_text(r.shape)} {r.dtype}: {summarize(r.trials).line()}" for r in empty[:5])
        more = f"; and {len(empty) - 5} more" if len(empty) > 5 else ""
        raise RunError(f"{len(empty)} of {len(results)} shapes have no config that passed, so none of them has a "
                       f"winner to export ({named}{more})")
