"""Finds kernels: the built-in ``kernels/`` folder, folders named in ``FLYTUNE_KERNEL_PATH`` (os.pathsep-separated)
and folders passed as ``paths=``. Each sub-folder holding the five parts is one kernel; it is imported only when asked
for, as the package ``flytune_kernels.<name>`` so its files can import each other relatively.
"""
from __future__ import annotations

import difflib
import hashlib
import importlib.util
import os
import sys
import types
from pathlib import Path
from typing import Iterable

from flytune_nb.core.resources import KERNELS
from flytune_nb.errors import KernelUnavailable, UsageError
from flytune_nb.core.device import ensure_backend
from flytune_nb.core.key import source_fingerprint
from flytune_nb.core.spec import KernelSpec

BUILTIN_DIR = KERNELS  # shipped as package data
PARTS = ("__init__.py", "kernel.py", "configs.py", "heuristic.py", "reference.py")
_PACKAGE = "flytune_kernels"


class KernelNotFound(UsageError, LookupError):
    pass


class RegistryError(UsageError):
    pass


def search_path(paths: Iterable[str | os.PathLike] | None = None) -> list[Path]:
    dirs = [Path(p) for p in (paths or [])]
    env = os.environ.get("FLYTUNE_KERNEL_PATH", "")
    dirs += [Path(p) for p in env.split(os.pathsep) if p.strip()]
    for d in dirs:
        if not d.is_dir():
            raise RegistryError(f"kernel path {d} is not a folder (from paths= or FLYTUNE_KERNEL_PATH)")
    return dirs + [BUILTIN_DIR]


def discover(paths: Iterable[str | os.PathLike] | None = None) -> dict[str, Path]:
    """name -> folder, without importing anything. A name defined twice is an error naming both folders."""
    found: dict[str, Path] = {}
    for root in search_path(paths):
        for d in sorted(root.iterdir()):
            if not d.is_dir() or d.name.startswith((".", "_")) or not (d / "__init__.py").exists():
                continue
            if d.name in found and found[d.name].resolve() != d.resolve():
                raise RegistryError(f"kernel {d.name!r} is defined twice: {found[d.name]} and {d}; rename one folder")
            found.setdefault(d.name, d)
    return found


def list_kernels(paths=None) -> list[str]:
    return sorted(discover(paths))


def get_kernel(name: str, paths=None) -> KernelSpec:
    found = discover(paths)
    if name not in found:
        close = difflib.get_close_matches(name, found, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise KernelNotFound(f"unknown kernel {name!r}.{hint} Known: {', '.join(sorted(found)) or 'none'}. "
                             f"Add folders with FLYTUNE_KERNEL_PATH or paths=.")
    return load_folder(found[name])


def load_folder(folder: Path) -> KernelSpec:
    folder = Path(folder).resolve()
    missing = [p for p in PARTS if not (folder / p).exists()]
    if missing:
        raise RegistryError(f"kernel folder {folder} lacks {', '.join(missing)}; every kernel folder holds "
                            f"{', '.join(PARTS)} (see docs/kernel-plugins.md)")
    ensure_backend()  # TRITON_INTERPRET must be set before the folder's @triton.jit runs
    # One module per folder *and source version*: two folders with the same kernel name never replace each other, and
    # a folder edited on disk is imported afresh, so the fingerprint in the tuning key is always that of the code
    # that actually runs (never a new fingerprint on old, already-imported code).
    fingerprint = source_fingerprint(folder)
    modname = f"{_PACKAGE}.{folder.name}_{hashlib.sha1(str(folder).encode()).hexdigest()[:8]}_{fingerprint[:8]}"
    mod = sys.modules.get(modname)
    if mod is None:
        if _PACKAGE not in sys.modules:
            pkg = types.ModuleType(_PACKAGE)
            pkg.__path__ = []
            sys.modules[_PACKAGE] = pkg
        spec = importlib.util.spec_from_file_location(modname, folder / "__init__.py",
                                                      submodule_search_locations=[str(folder)])
        mod = importlib.util.module_from_spec(spec)
        sys.modules[modname] = mod
        try:
            spec.loader.exec_module(mod)
        except KernelUnavailable as e:  # an optional dependency missing here: one line, not a broken plugin
            sys.modules.pop(modname, None)
            raise KernelUnavailable(f"{folder.name}: {e}") from None
        except Exception as e:  # a plugin that does not import is reported by name, not as a traceback
            sys.modules.pop(modname, None)
            raise RegistryError(f"kernel folder {folder} failed to import: {type(e).__name__}: {e}") from e
    kspec = getattr(mod, "SPEC", None)
    if not isinstance(kspec, KernelSpec):
        raise RegistryError(f"{folder}/__init__.py must define SPEC = KernelSpec(...); found {type(kspec).__name__}")
    if kspec.name != folder.name:
        raise RegistryError(f"{folder}: SPEC.name is {kspec.name!r} but the folder is {folder.name!r}; make them equal")
    if kspec.source_dir is None:
        object.__setattr__(kspec, "source_dir", folder)
    if not kspec.fingerprint:
        object.__setattr__(kspec, "fingerprint", fingerprint)
    return kspec
