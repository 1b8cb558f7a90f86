"""Dtype names: users type ``bf16``; torch wants ``torch.bfloat16``; artifacts write ``bf16``."""
from __future__ import annotations

from collections.abc import Iterable

import torch

from flytune_nb.errors import UsageError

_ALIASES = {
    "bf16": "bf16", "bfloat16": "bf16",
    "fp16": "fp16", "float16": "fp16", "half": "fp16",
    "fp32": "fp32", "float32": "fp32", "float": "fp32",
    # fp8 weights (e4m3) with per-tensor scales, activations quantised the same way on the fly: SGLang's "fp8_w8a8"
    "fp8": "fp8", "fp8_w8a8": "fp8", "fp8_e4m3": "fp8", "float8_e4m3fn": "fp8", "e4m3": "fp8",
}
_TORCH = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "fp8": torch.float8_e4m3fn}
_SHORT = {v: k for k, v in _TORCH.items()}
# ROCm's gfx942 fp8 (no negative zero, bias 8): the same name; a kernel that makes fp8 inputs picks the platform's.
_SHORT[torch.float8_e4m3fnuz] = "fp8"

# ||out - ref|| / ||ref|| against an fp64 reference. A few times the storage rounding error: bf16 keeps 8
# significant bits (RMS rounding error ~1.6e-3; measured 1.7e-3 for rmsnorm on the H200, 3.3e-3 through the CPU
# interpreter), fp16 11 bits (~2e-4), fp32 24 bits.
# fp8: operands quantised to e4m3 (4 significant bits: one step is 6-12% of a value), output in bf16. A reference
# applies the same quantisation, but the kernel's fp8 MMA does not round like float64 (on the H200 27% of a gate+up
# GEMM's bf16 outputs differ from float64's rounding of the same fp8 products), and an activation quantised per tensor
# on the fly takes its scale from its absmax: where that moves by an ulp, every element's rounding shifts. fp8_w8a8
# MoE on the H200, 240 trials on fresh inputs: 2.4e-3 where the absmax agreed, up to 3.3e-2 (single elements up to
# 0.06 on outputs of ~0.3) where it did not.
DEFAULT_TOLERANCE = {"bf16": 8e-3, "fp16": 2e-3, "fp32": 1e-5, "fp8": 1.6e-2}
# Element-wise bound |out - ref| <= atol + rtol * |ref|, next to the norm: a norm averages a single wrong row of
# 8192 down to ~1e-2 of error, which a norm-only bf16 check would pass. Two ulps of the storage type.
ELEMENT_TOLERANCE = {"bf16": (1.6e-2, 1.6e-2), "fp16": (2e-3, 2e-3), "fp32": (1e-4, 1e-5), "fp8": (4e-2, 4e-2)}


class DtypeError(UsageError):
    pass


def canonical(name: str | torch.dtype) -> str:
    """``"bfloat16"``, ``"bf16"`` or ``torch.bfloat16`` -> ``"bf16"``."""
    if isinstance(name, torch.dtype):
        if name in _SHORT:
            return _SHORT[name]
        raise DtypeError(f"unsupported dtype {name}; supported: {', '.join(_TORCH)}")
    key = str(name).strip().lower().removeprefix("torch.")
    if key not in _ALIASES:
        raise DtypeError(f"unknown dtype {name!r}; supported: {', '.join(_TORCH)} (aliases: {', '.join(sorted(_ALIASES))})")
    return _ALIASES[key]


def parse_list(dtypes) -> list[str]:
    """``"bf16,fp16"``, ``"bf16 fp16"``, ``"bf16"`` or a sequence -> ["bf16", "fp16"] (names as written; canonical()
    checks them). A plain string is one or more names, never a sequence of characters; so is each string of a
    sequence (the CLI's repeatable ``--dtype`` gives ["bf16,fp16"] for ``--dtype bf16,fp16``)."""
    if isinstance(dtypes, str):
        return dtypes.replace(",", " ").split()
    if isinstance(dtypes, torch.dtype):
        return [dtypes]
    if not isinstance(dtypes, Iterable):  # papermill's -p dtypes 3 is an int
        raise DtypeError(f"dtypes must be text like 'bf16,fp16' or a list of names; got {type(dtypes).__name__} "
                         f"{dtypes!r}")
    return [n for d in dtypes for n in (d.replace(",", " ").split() if isinstance(d, str) else [d])]


def is_torch_dtype(value) -> bool:
    return isinstance(value, torch.dtype)


def to_torch(name: str | torch.dtype) -> torch.dtype:
    return _TORCH[canonical(name)]


def itemsize(name: str | torch.dtype) -> int:
    return to_torch(name).itemsize
