"""Where the package's data lives: the built-in kernel folders, the committed exports and the notebooks.

They ship inside the package (``flytune_nb/kernels``, ``flytune_nb/exports``, ``flytune_nb/notebooks``) and are found
through ``importlib.resources``, so a wheel installed anywhere finds them exactly as a checkout does. They must be real
folders on disk (kernel folders are imported from their files): a zipped install is not supported.
"""
from __future__ import annotations

from importlib.resources import files
from pathlib import Path


def package_dir(name: str) -> Path:
    """``kernels``, ``exports`` or ``notebooks`` inside the installed flytune_nb package."""
    return Path(str(files("flytune_nb").joinpath(name)))


KERNELS = package_dir("kernels")
EXPORTS = package_dir("exports")
NOTEBOOKS = package_dir("notebooks")
