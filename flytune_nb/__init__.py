"""flytune_nb: a Jupyter-first workbench for tuning GPU kernels. This package is the headless core: it never imports
Jupyter, ipywidgets or plotly (those live in ``flytune_nb.widgets``)."""
__version__ = "0.1.0"

from .config import Config, ConfigError  # noqa: E402
from .device import DeviceInfo, current_device  # noqa: E402
from .registry import get_kernel, list_kernels  # noqa: E402
from .spec import KernelSpec  # noqa: E402
from .trial import NoValidConfig, SearchResult, Trial, evaluate, search  # noqa: E402
from .tuner import TunedKernel, tuned  # noqa: E402

__all__ = ["Config", "ConfigError", "DeviceInfo", "KernelSpec", "NoValidConfig", "SearchResult", "Trial",
           "TunedKernel", "current_device", "evaluate", "get_kernel", "list_kernels", "search", "tuned",
           "__version__"]
