"""flytune_nb: a Jupyter-first workbench for tuning GPU kernels.

The public API is what this module exports; the subpackages are by role:

- ``core``: configs, the kernel-plugin contract (KernelSpec), dtypes, devices, the tuning key, shape grids, the
  kernel registry;
- ``kit``: what kernel folders import to write spaces and launch (spaces, launch), and ``adopt``: an existing
  ``@triton.autotune`` kernel as a KernelSpec in one call;
- ``measure``: one trial (correctness, timing), memory checks, rooflines;
- ``strategies``: search strategies (one function each) and the search loop;
- ``engine``: sweeps over grids in isolated worker processes, the results store, events, the compile pool;
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

import sys as _sys

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
