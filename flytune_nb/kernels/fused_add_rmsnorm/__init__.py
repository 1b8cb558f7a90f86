"""fused_add_rmsnorm: residual <- residual + x (in place); y = rmsnorm(residual) * w. Axes: M rows (batch), N."""
from __future__ import annotations

import torch

from flytune_nb.kit import KernelSpec, itemsize, to_torch

from .configs import configs
from .heuristic import default
from .kernel import fused_add_rmsnorm
from .reference import fused_add_rmsnorm_ref, fused_add_rmsnorm_torch

EPS = 1e-6


def make_inputs(shape, dtype, device):
    M, N, dt, dev = shape["M"], shape["N"], to_torch(dtype), device.torch_device
    return {
        "x": torch.randn(M, N, device=dev, dtype=dt),
        "residual": torch.randn(M, N, device=dev, dtype=dt),
        "weight": (1.0 + 0.5 * torch.randn(N, device=dev)).to(dt),
        "out": torch.empty(M, N, device=dev, dtype=dt),
    }


def run(inputs, config):
    return fused_add_rmsnorm(inputs["x"], inputs["residual"], inputs["weight"], inputs.get("out"),
                             inputs.get("eps", EPS), config=config)


def reference(inputs):
    return fused_add_rmsnorm_ref(inputs["x"], inputs["residual"], inputs["weight"], inputs.get("eps", EPS))


def baseline(inputs):
    return fused_add_rmsnorm_torch(inputs["x"], inputs["residual"], inputs["weight"], inputs.get("eps", EPS))


def shape_of(inputs):
    x = inputs["x"]
    return {"M": x.numel() // x.shape[-1], "N": x.shape[-1]}


SPEC = KernelSpec(
    name="fused_add_rmsnorm",
    axes=("M", "N"),
    batch_axis="M",
    dtypes=("bf16", "fp16", "fp32"),
    make_inputs=make_inputs,
    run=run,
    reference=reference,
    configs=configs,
    default=default,
    shape_of=shape_of,
    outputs=("out",),
    dtype_from="x",
    mutates=("residual",),
    bytes=lambda s, d: (4 * s["M"] * s["N"] + s["N"]) * itemsize(d),  # read x, r; write r, y; read w once
    flops=lambda s, d: 5 * s["M"] * s["N"],
    description="Residual add (in place) fused with RMSNorm; returns (y, residual).",
    baseline=baseline,
    optional_knobs={"BLOCK_M": 1},
)
