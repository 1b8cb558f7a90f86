"""What a kernel folder imports: the plugin API.

``from flytune_nb.kit import Config, KernelSpec, launch, itemsize, to_torch, ...``. Everything a kernel needs to declare
itself (KernelSpec, Config), write its space and heuristic (spaces), launch fast (launch), name dtypes, and say it
cannot load here (KernelUnavailable: an optional dependency is missing). docs/kernel-plugins.md walks through it.
"""
from flytune_nb.core.config import Config, ConfigError
from flytune_nb.core.device import DeviceInfo, current_device
from flytune_nb.core.dtypes import itemsize, to_torch
from flytune_nb.core.spec import KernelSpec
from flytune_nb.errors import KernelUnavailable
from flytune_nb.kit.launcher import launch

__all__ = ["Config", "ConfigError", "DeviceInfo", "KernelSpec", "KernelUnavailable", "current_device", "itemsize",
           "launch", "to_torch"]
