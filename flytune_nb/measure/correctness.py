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
    return _rel_error64(_f64(out, ref), _f64(ref, ref))


def _rel_error64(o: torch.Tensor, r: torch.Tensor) -> float:
    if not torch.isfinite(o).all():
        return math.inf
    denom = torch.linalg.vector_norm(r).item()
    num = torch.linalg.vector_norm(o - r).item()
    if denom == 0.0:
        return 0.0 if num == 0.0 else math.inf
    return num / denom


def _f64(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """float64 on the reference's device. On the GPU, not the host: moving a 4096x8192 output and its reference to
    the CPU and comparing there took ~0.4 s per trial on the H200 machine, longer than timing the config."""
    return t.detach().to(like.device, torch.float64)


def compare(outs: Any, refs: Any, tol: float, elementwise: tuple[float, float] | None = None) -> CheckResult:
    """Norm check against ``tol`` and, when given, the element-wise bound ``(rtol, atol)``."""
    outs, refs = as_tuple(outs), as_tuple(refs)
    if len(outs) != len(refs):
        return CheckResult(False, math.inf, f"run returned {len(outs)} outputs, reference {len(refs)}")
    worst = 0.0
    for i, (o, r) in enumerate(zip(outs, refs)):
        if tuple(o.shape) != tuple(r.shape):
            return CheckResult(False, math.inf, f"output {i}: shape {tuple(o.shape)} != reference {tuple(r.shape)}")
        o64, r64 = _f64(o, r), _f64(r, r)  # once per output: a 4096x8192 fp64 copy is 256 MiB
        err = _rel_error64(o64, r64)
        if not math.isfinite(err):
            bad = (~torch.isfinite(o64)).sum().item()
            return CheckResult(False, math.inf, f"output {i}: {bad} of {o.numel()} elements NaN/Inf (unwritten?)")
        worst = max(worst, err)
        if elementwise is not None:
            rtol, atol = elementwise
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
