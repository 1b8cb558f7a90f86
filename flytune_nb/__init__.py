"""flytune_nb: a Jupyter-first workbench for tuning GPU kernels.

The public API is what this module exports; the subpackages are by role:

- ``core``: configs, the kernel-plugin contract (KernelSpec), dtypes, devices, the tuning key, shape grids, the
  kernel registry, the events a search or sweep emits;
- ``kit``: what kernel folders import to write spaces and launch (spaces, launch), and ``adopt``: an existing
  ``@triton.autotune`` kernel as a KernelSpec in one call;
- ``measure``: one trial (correctness, timing), memory checks, rooflines;
- ``strategies``: search strategies (one function each) and the search loop;
- ``engine``: sweeps over grids in isolated worker processes, the results store, the compile pool;
- ``backends``: what knows a DSL's compiler (Triton today);
- ``serve``: the run path with zero search (tuned, disk cache, artifact lookup, and ``prime``: an adopted kernel's
  own autotuner filled with the exported winners);
- ``artifacts``: SGLang-format exports, provenance, the regression gate (``flytune check``);
- ``analysis``: heuristic vs best, regret, re-scoring an edited heuristic;
- ``ui``: the CLI, papermill batches, reports, and ``ui.notebook`` (the only package that imports ipywidgets/plotly);
- ``_compat``: every private Triton / torch / CPython touch, behind version checks.

Errors share one root, ``FlytuneError`` (``flytune_nb.errors``).
"""
__version__ = "0.1.0"

import os as _os
import signal as _signal
import sys as _sys


def _started_as_the_cli() -> bool:
    """Whether this process is the ``flytune`` command: its console script, or ``python -m flytune_nb`` (while runpy
    imports the package, ``sys.argv[0]`` is still ``-m``; ``sys.orig_argv`` says which module follows it)."""
    if _os.environ.get("_FLYTUNE_PARENT_PID"):  # a worker of a sweep
        return False
    # a process multiprocessing spawned (where there is no forkserver, or the server's environment changed): it gets
    # the command's sys.argv before it imports anything, but its own command line says what it is
    if "--multiprocessing-fork" in getattr(_sys, "orig_argv", ()):
        return False
    if _sys.argv and _os.path.basename(_sys.argv[0]) == "flytune":
        return True
    if not _sys.argv or _sys.argv[0] != "-m":
        return False
    argv = list(getattr(_sys, "orig_argv", ()))
    named = [b for a, b in zip(argv, argv[1:]) if a == "-m"] + [a[2:] for a in argv if a.startswith("-m") and a != "-m"]
    # the command's own modules only: a census worker runs as -m flytune_nb.engine.census_worker
    return any(m in ("flytune_nb", "flytune_nb.__main__", "flytune_nb.ui.cli") for m in named)


def _interrupted_while_importing(signum, frame) -> None:
    """Ctrl-C while the ``flytune`` command imports (torch alone takes ~1 s on 2 cores), before anything ran: one
    line and the status a shell gives an interrupted program (128 + SIGINT). The process ends here, in the handler,
    instead of raising KeyboardInterrupt into the imports: torch's and numpy's import code does not survive one
    (seen on 2 cores: numpy half-imported, then an AttributeError traceback; the interrupt swallowed and the command
    run to the end; a C++ abort from torch's init; a caught interrupt still exiting by SIGINT, as CPython does once
    one passed through a nested PyRun call). Nothing is open or started yet, so there is nothing to clean up."""
    _os.write(2, b"flytune: interrupted before anything ran\n")
    _os._exit(130)


# Only for the command, whose own handler (ui/cli.main) takes over once it runs; anyone else importing flytune_nb
# (a notebook, a script) keeps Python's KeyboardInterrupt. A process that ignores SIGINT (a background job) still does.
_SIGINT_BEFORE = None
# The finished command's exit status, once ui/cli.main has it and its output is out: from then on a Ctrl-C ends the
# process with that status instead of killing it by SIGINT (see ui/cli._end_at_ctrl_c_in_teardown).
EXIT_STATUS = None
_LAST_EXIT_HANDLER = False  # whether _ignore_ctrl_c_in_final_teardown is registered


def _ignore_ctrl_c_in_final_teardown() -> None:
    """The last exit handler to run (registered before any import that registers one): past it only the
    interpreter's own teardown is left (seconds once SGLang and FlyDSL are imported), and before that teardown
    Python resets a Python-level SIGINT handler to the default action, so a Ctrl-C there would kill a finished
    command by signal. No Python code can end the process cleanly then; ignored, it ends with its own status."""
    if EXIT_STATUS is not None:
        _signal.signal(_signal.SIGINT, _signal.SIG_IGN)


if _started_as_the_cli():
    import atexit as _atexit

    _atexit.register(_ignore_ctrl_c_in_final_teardown)  # first registered: runs last
    _LAST_EXIT_HANDLER = True
if _started_as_the_cli() and _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
    try:
        _SIGINT_BEFORE = _signal.signal(_signal.SIGINT, _interrupted_while_importing)
    except ValueError:  # not the main thread: Python's handler stays
        pass

from flytune_nb.core.config import Config, ConfigError  # noqa: E402
from flytune_nb.core.device import DeviceInfo, choose_interpreter_early, current_device  # noqa: E402
from flytune_nb.core.registry import get_kernel, list_kernels  # noqa: E402
from flytune_nb.core.spec import KernelSpec  # noqa: E402
from flytune_nb.errors import FlytuneError, RunError, UsageError  # noqa: E402
from flytune_nb.measure.trial import Trial, evaluate  # noqa: E402
from flytune_nb.serve.tuned import TunedKernel, tuned  # noqa: E402
from flytune_nb.strategies.loop import NoValidConfig, SearchResult, search  # noqa: E402

choose_interpreter_early()

__all__ = ["Config", "ConfigError", "DeviceInfo", "FlytuneError", "KernelSpec", "NoValidConfig", "RunError",
           "SearchResult", "Store", "Sweep", "Trial", "TunedKernel", "UsageError", "adopt", "current_device",
           "evaluate", "get_kernel", "list_kernels", "lookup", "prime", "search", "tuned", "__version__"]

# Imported on first use: the sweep engine and the lookup pull in sqlite, the process machinery and the artifact code,
# which a serving process that only calls tuned(...) never needs; adopt and prime reach into Triton's autotuner.
_LAZY = {"Sweep": "flytune_nb.engine.sweep", "Store": "flytune_nb.engine.store", "lookup": "flytune_nb.serve.lookup",
         "adopt": "flytune_nb.kit.adopt", "prime": "flytune_nb.serve.prime"}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'flytune_nb' has no attribute {name!r}")


def _legacy_paths() -> None:
    """The short import paths kernel folders use (``flytune_nb.config``, ``flytune_nb.spaces``, ...), answered by the
    subpackage modules that hold that code (``flytune_nb.core.config``, ``flytune_nb.kit.spaces``, ...). A kernel folder's bytes are fingerprinted into the tuning key of every
    stored trial and export (core/key.py), so rewriting its imports would orphan them; the folders keep their bytes
    and these names keep working. New code imports from the subpackages."""
    import importlib

    for old, new in (("config", "core.config"), ("device", "core.device"), ("dtypes", "core.dtypes"),
                     ("spec", "core.spec"), ("launch", "kit.launcher"), ("spaces", "kit.spaces")):
        _sys.modules.setdefault(f"{__name__}.{old}", importlib.import_module(f"{__name__}.{new}"))


_legacy_paths()
if _SIGINT_BEFORE is not None:  # imported: from here an interrupt is the command's to report
    _signal.signal(_signal.SIGINT, _SIGINT_BEFORE)
