"""Correctness of one config: fresh random inputs, NaN-poisoned outputs, relative error against an fp32 reference.

A kernel that leaves an element unwritten keeps the NaN and fails; NaN or Inf anywhere never passes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class CheckResult:
    ok: bool
    rel_error: float
    reason: str = ""


def as_tuple(x: Any) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """``||out - ref|| / ||ref||`` in float64; inf when out holds NaN/Inf or shapes differ."""
    if tuple(out.shape) != tuple(ref.shape):
        return math.inf
    o = out.detach().to("cpu", torch.float64)
    r = ref.detach().to("cpu", torch.float64)
    if not torch.isfinite(o).all():
        return math.inf
    denom = torch.linalg.vector_norm(r).item()
    num = torch.linalg.vector_norm(o - r).item()
    if denom == 0.0:
        return 0.0 if num == 0.0 else math.inf
    return num / denom


def compare(outs: Any, refs: Any, tol: float, elementwise: tuple[float, float] | None = None) -> CheckResult:
    """Norm check against ``tol`` and, when given, the element-wise bound ``(rtol, atol)``."""
    outs, refs = as_tuple(outs), as_tuple(refs)
    if len(outs) != len(refs):
        return CheckResult(False, math.inf, f"run returned {len(outs)} outputs, reference {len(refs)}")
    worst = 0.0
    for i, (o, r) in enumerate(zip(outs, refs)):
        if tuple(o.shape) != tuple(r.shape):
            return CheckResult(False, math.inf, f"output {i}: shape {tuple(o.shape)} != reference {tuple(r.shape)}")
        err = rel_error(o, r)
        if not math.isfinite(err):
            bad = (~torch.isfinite(o.detach().float())).sum().item()
            return CheckResult(False, math.inf, f"output {i}: {bad} of {o.numel()} elements NaN/Inf (unwritten?)")
        worst = max(worst, err)
        if elementwise is not None:
            rtol, atol = elementwise
            o64, r64 = o.detach().to("cpu", torch.float64), r.detach().to("cpu", torch.float64)
            bad = (o64 - r64).abs() > atol + rtol * r64.abs()
            if bad.any():
                i0 = tuple(int(v) for v in bad.nonzero()[0])
                return CheckResult(False, err, f"output {i}: {int(bad.sum())} of {o.numel()} elements off by more than "
                                   f"{atol:g} + {rtol:g}*|ref| (first at {i0}: {o64[i0].item():.4g} vs "
                                   f"{r64[i0].item():.4g})")
    if worst > tol:
        return CheckResult(False, worst, f"rel error {worst:.3g} > tolerance {tol:.3g}")
    return CheckResult(True, worst)


def poison(spec, inputs: dict) -> None:
    """Fill pure outputs with NaN so that anything the kernel fails to write is caught."""
    for name in spec.outputs:
        t = inputs[name]
        if t.is_floating_point():
            t.fill_(math.nan)
        else:  # integer outputs: a sentinel far from any plausible value
            t.fill_(torch.iinfo(t.dtype).min)
