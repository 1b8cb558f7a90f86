"""softmax: y = exp(x - max(x)) / sum(exp(x - max(x))) over the last axis. Axes: M rows (the batch axis), N columns."""
from __future__ import annotations

import torch

from flytune_nb.kit import KernelSpec, itemsize, to_torch

from .configs import configs
from .heuristic import default
from .kernel import softmax
from .reference import softmax_ref, softmax_torch

# Logits offset by +100: exp(100) overflows fp32 (max ~exp(88.7)), so a kernel that forgot to subtract the row max
# returns inf/NaN and fails the check instead of passing by luck. Scale 4: rows are peaked, as attention logits are.
OFFSET, SCALE = 100.0, 4.0


def make_inputs(shape, dtype, device):
    M, N, dt, dev = shape["M"], shape["N"], to_torch(dtype), device.torch_device
    return {"x": (OFFSET + SCALE * torch.randn(M, N, device=dev)).to(dt), "out": torch.empty(M, N, device=dev, dtype=dt)}


def run(inputs, config):
    return softmax(inputs["x"], inputs.get("out"), config=config)


def reference(inputs):
    return softmax_ref(inputs["x"])


def baseline(inputs):
    return softmax_torch(inputs["x"])


def shape_of(inputs):
    x = inputs["x"]
    return {"M": x.numel() // x.shape[-1], "N": x.shape[-1]}


SPEC = KernelSpec(
    name="softmax",
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
    bytes=lambda s, d: 2 * s["M"] * s["N"] * itemsize(d),  # read x, write y
    flops=lambda s, d: 5 * s["M"] * s["N"],  # max, sub, exp, sum, div
    description="Row-wise softmax, fp32 accumulation (single pass, online two-pass, or a row split over programs).",
    baseline=baseline,
    optional_knobs={"BLOCK_M": 1, "SPLIT_N": 1},
)
