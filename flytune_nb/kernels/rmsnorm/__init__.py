"""rmsnorm: y = x * rsqrt(mean(x^2) + eps) * w over the last axis. Shape axes: M rows (the batch axis), N columns."""
from __future__ import annotations

import torch

from flytune_nb.kit import KernelSpec, itemsize, to_torch

from .configs import configs
from .heuristic import default
from .kernel import rmsnorm
from .reference import rmsnorm_ref, rmsnorm_torch

EPS = 1e-6


def make_inputs(shape, dtype, device):
    M, N, dt, dev = shape["M"], shape["N"], to_torch(dtype), device.torch_device
    return {
        "x": torch.randn(M, N, device=dev, dtype=dt),
        "weight": (1.0 + 0.5 * torch.randn(N, device=dev)).to(dt),  # not ones: a dropped weight must show
        "out": torch.empty(M, N, device=dev, dtype=dt),
    }


def run(inputs, config):
    return rmsnorm(inputs["x"], inputs["weight"], inputs.get("out"), inputs.get("eps", EPS), config=config)


def reference(inputs):
    return rmsnorm_ref(inputs["x"], inputs["weight"], inputs.get("eps", EPS))


def baseline(inputs):
    return rmsnorm_torch(inputs["x"], inputs["weight"], inputs.get("eps", EPS))


def shape_of(inputs):
    x = inputs["x"]
    return {"M": x.numel() // x.shape[-1], "N": x.shape[-1]}


SPEC = KernelSpec(
    name="rmsnorm",
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
    bytes=lambda s, d: (2 * s["M"] * s["N"] + s["N"]) * itemsize(d),  # read x, write y, read w once
    flops=lambda s, d: 4 * s["M"] * s["N"],
    description="RMSNorm over the last axis (one program per row; single-pass or looped).",
    baseline=baseline,
    optional_knobs={"BLOCK_M": 1},
)
