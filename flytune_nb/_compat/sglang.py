"""Every private SGLang internal flytune_nb touches, in one place, each with a fallback.

Verified against sglang 0.5.23 (``VERIFIED``; tests/compat/test_sglang_internals.py reads the installed package).
Nothing here imports SGLang: its fused-MoE modules take ~6 s to import (kernels/sglang_fused_moe imports them once,
with the stand-ins they need on a CPU machine, and hands the module in).

- ``reset_moe_config(triton_utils, config)``: the config SGLang's MoE functions are forced to
  (``moe_runner.triton_utils._config``, the module global ``override_config`` sets and ``get_config`` reads). Its
  ``override_config`` is a @contextmanager with no ``finally``: a config that raises inside the block (out of
  resources, a compile error) stays forced for every later MoE call of the process, and SGLang has no public reset.
"""
from __future__ import annotations

from flytune_nb._compat import distribution_version, version_listed

VERIFIED = {(0, 5, 23)}


def installed_version() -> str | None:
    """The installed sglang's version, from its metadata (no import); None when it is not installed."""
    return distribution_version("sglang")


def verified() -> bool:
    return version_listed(installed_version(), VERIFIED, 3)


def reset_moe_config(triton_utils, config) -> bool:
    """Force ``config`` (None: no config) on SGLang's MoE functions, as leaving ``override_config``'s block does.
    ``triton_utils``: SGLang's ``sglang.srt.layers.moe.moe_runner.triton_utils`` module. False, and nothing written,
    where that module keeps no ``_config`` global (a layout other than 0.5.23's): whatever was forced stays."""
    if "_config" not in vars(triton_utils):
        return False
    triton_utils._config = config
    return True
