"""flydsl_fused_add_rmsnorm: residual <- residual + x (in place); y = rmsnorm(residual) * w, written in FlyDSL for
AMD GPUs (gfx942, gfx950). Axes: M rows (batch), N. The residual is restored before every timed rep (``mutates``);
FlyDSL's own autotuner over it restores it too (``restore_value``). Its winners also export as FlyDSL offline
configs ("flytune_fused_add_rmsnorm", keyed by m_in, N and dtype).
"""
import torch

from flytune_nb.kit import KernelSpec, itemsize, to_torch
from flytune_nb.kit.flydsl import FlyDSLArtifact, require

require()  # flydsl missing: listed as unavailable, with the install line

from .configs import configs  # noqa: E402
from .heuristic import default  # noqa: E402
from .reference import fused_add_rmsnorm_ref, fused_add_rmsnorm_torch  # noqa: E402

EPS = 1e-6


def _kernel():
    # kernel.py imports flydsl (~2 s on a 2-core machine): only when something compiles or runs, never to list.
    from . import kernel

    return kernel


def make_inputs(shape, dtype, device):
    M, N, dt, dev = shape["M"], shape["N"], to_torch(dtype), device.torch_device
    return {
        "x": torch.randn(M, N, device=dev, dtype=dt),
        "residual": torch.randn(M, N, device=dev, dtype=dt),
        "weight": (1.0 + 0.5 * torch.randn(N, device=dev)).to(dt),
        "out": torch.empty(M, N, device=dev, dtype=dt),
    }


def run(inputs, config):
    return _kernel().fused_add_rmsnorm(inputs["x"], inputs["residual"], inputs["weight"], inputs.get("out"),
                                       inputs.get("eps", EPS), config=config)


def shape_of(inputs):
    x = inputs["x"]
    return {"M": x.numel() // x.shape[-1], "N": x.shape[-1]}


SPEC = KernelSpec(
    name="flydsl_fused_add_rmsnorm",
    axes=("M", "N"),
    batch_axis="M",
    dtypes=("bf16", "fp16", "fp32"),
    make_inputs=make_inputs,
    run=run,
    reference=lambda inputs: fused_add_rmsnorm_ref(inputs["x"], inputs["residual"], inputs["weight"],
                                                   inputs.get("eps", EPS)),
    configs=configs,
    default=default,
    shape_of=shape_of,
    outputs=("out",),
    dtype_from="x",
    mutates=("residual",),
    bytes=lambda s, d: (4 * s["M"] * s["N"] + s["N"]) * itemsize(d),  # read x, r; write r, y; read w once
    flops=lambda s, d: 5 * s["M"] * s["N"],
    description="Residual add (in place) fused with RMSNorm, in FlyDSL (AMD GPUs); returns (y, residual).",
    baseline=lambda inputs: fused_add_rmsnorm_torch(inputs["x"], inputs["residual"], inputs["weight"],
                                                    inputs.get("eps", EPS)),
    backend="flydsl",
    extra={"flydsl": FlyDSLArtifact("flytune_fused_add_rmsnorm", {"m_in": "M", "N": "N", "dtype": "dtype"},
                                    restore_value=("residual",), launcher=lambda: _kernel().fused_add_rmsnorm_launch)},
)
