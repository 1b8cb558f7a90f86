"""flydsl_rmsnorm: RMSNorm written in FlyDSL for AMD GPUs (gfx942, gfx950): y = x * rsqrt(mean(x^2) + eps) * w over
the last axis. Axes: M rows (the batch axis), N. Its winners also export as FlyDSL offline configs
("flytune_rmsnorm", keyed by m_in, N and dtype) that FlyDSL's own autotuner serves with no search (docs/flydsl.md).
"""
import torch

from flytune_nb.kit import KernelSpec, itemsize, to_torch
from flytune_nb.kit.flydsl import FlyDSLArtifact, require

require()  # flydsl missing: listed as unavailable, with the install line

from .configs import configs  # noqa: E402
from .heuristic import default  # noqa: E402
from .reference import rmsnorm_ref, rmsnorm_torch  # noqa: E402

EPS = 1e-6


def _kernel():
    # kernel.py imports flydsl (~2 s on a 2-core machine): only when something compiles or runs, never to list.
    from . import kernel

    return kernel


def make_inputs(shape, dtype, device):
    M, N, dt, dev = shape["M"], shape["N"], to_torch(dtype), device.torch_device
    return {
        "x": torch.randn(M, N, device=dev, dtype=dt),
        "weight": (1.0 + 0.5 * torch.randn(N, device=dev)).to(dt),  # not ones: a dropped weight must show
        "out": torch.empty(M, N, device=dev, dtype=dt),
    }


def run(inputs, config):
    return _kernel().rmsnorm(inputs["x"], inputs["weight"], inputs.get("out"), inputs.get("eps", EPS), config=config)


def shape_of(inputs):
    x = inputs["x"]
    return {"M": x.numel() // x.shape[-1], "N": x.shape[-1]}


SPEC = KernelSpec(
    name="flydsl_rmsnorm",
    axes=("M", "N"),
    batch_axis="M",
    dtypes=("bf16", "fp16", "fp32"),
    make_inputs=make_inputs,
    run=run,
    reference=lambda inputs: rmsnorm_ref(inputs["x"], inputs["weight"], inputs.get("eps", EPS)),
    configs=configs,
    default=default,
    shape_of=shape_of,
    outputs=("out",),
    dtype_from="x",
    bytes=lambda s, d: (2 * s["M"] * s["N"] + s["N"]) * itemsize(d),  # read x, write y, read w once
    flops=lambda s, d: 4 * s["M"] * s["N"],
    description="RMSNorm in FlyDSL (AMD GPUs): one workgroup per row, the row in registers.",
    baseline=lambda inputs: rmsnorm_torch(inputs["x"], inputs["weight"], inputs.get("eps", EPS)),
    backend="flydsl",
    extra={"flydsl": FlyDSLArtifact("flytune_rmsnorm", {"m_in": "M", "N": "N", "dtype": "dtype"},
                                    launcher=lambda: _kernel().rmsnorm_launch)},
)
