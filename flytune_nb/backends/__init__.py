"""What knows a DSL's compiler: one module per DSL (``triton``, ``flydsl``). A KernelSpec names its backend
(``backend="flydsl"``; Triton when it says nothing) and the core asks that module, never the DSL itself:

- ``toolchain()`` / ``codegen_env()``: the toolchain part of the tuning key and the environment variables that change
  what the compiler generates (core/key.py);
- ``DEVICE_BACKENDS``: the devices (``DeviceInfo.backend``) the DSL can launch on; a sweep or a tuned call anywhere
  else is refused with one message instead of failing every config;
- ``ISOLATED``: whether a launch must never run in the caller's process (a fault that aborts it cannot be caught);
- ``config_dir_name(toolchain)`` / ``running_config_dir_name()``: the version folder exported files go in
  (``triton_3_6_0`` as SGLang names it, ``flydsl_0_5_0``), and the one the running toolchain reads.

Importing a backend module imports nothing of its DSL: a kernel listing stays fast.
"""
from __future__ import annotations

import importlib

from flytune_nb.errors import UsageError

NAMES = ("triton", "flydsl")
DEFAULT = "triton"


def get(name: str):
    """The backend module ``name`` (one of NAMES)."""
    if name not in NAMES:
        raise UsageError(f"unknown kernel backend {name!r}; known: {', '.join(NAMES)}")
    return importlib.import_module(f"{__name__}.{name}")


def of(spec):
    """The backend module of a KernelSpec."""
    return get(getattr(spec, "backend", DEFAULT) or DEFAULT)


def cannot_launch(spec, device) -> str | None:
    """Why ``spec``'s kernel cannot launch on ``device`` (a DeviceInfo), or None when it can."""
    backend = of(spec)
    if device.backend in backend.DEVICE_BACKENDS:
        return None
    where = " or ".join(backend.DEVICE_NAMES)
    return (f"{spec.name} is a {backend.LABEL} kernel: it launches on {where} only, and this machine's device is "
            f"{device.name} ({device.backend}). {backend.ELSEWHERE}")
