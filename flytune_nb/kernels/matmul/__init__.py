"""matmul: out = a @ w.T (a linear layer). Axes: M tokens (the batch axis), N output features, K input features.
Artifacts are keyed ``N=…,K=…,device_name=…,dtype=…`` with batch sizes M inside, like SGLang's."""
from __future__ import annotations

import torch

from flytune_nb.kit import KernelSpec, itemsize, to_torch

from .configs import configs
from .heuristic import default
from .kernel import matmul
from .reference import matmul_ref, matmul_torch


def make_inputs(shape, dtype, device):
    M, N, K, dt, dev = shape["M"], shape["N"], shape["K"], to_torch(dtype), device.torch_device
    return {
        "a": torch.randn(M, K, device=dev, dtype=dt),
        "w": torch.randn(N, K, device=dev, dtype=dt).mul_(K ** -0.5),  # unit-variance outputs, as in a trained layer
        "out": torch.empty(M, N, device=dev, dtype=dt),
    }


def run(inputs, config):
    return matmul(inputs["a"], inputs["w"], inputs.get("out"), config=config)


def reference(inputs):
    return matmul_ref(inputs["a"], inputs["w"])


def baseline(inputs):
    return matmul_torch(inputs["a"], inputs["w"])


def shape_of(inputs):
    a, w = inputs["a"], inputs["w"]
    return {"M": a.numel() // a.shape[-1], "N": w.shape[0], "K": a.shape[-1]}


SPEC = KernelSpec(
    name="matmul",
    axes=("M", "N", "K"),
    batch_axis="M",
    dtypes=("bf16", "fp16"),
    make_inputs=make_inputs,
    run=run,
    reference=reference,
    configs=configs,
    default=default,
    shape_of=shape_of,
    outputs=("out",),
    dtype_from="a",
    bytes=lambda s, d: (s["M"] * s["K"] + s["N"] * s["K"] + s["M"] * s["N"]) * itemsize(d),
    flops=lambda s, d: 2 * s["M"] * s["N"] * s["K"],
    description="GEMM a @ w.T (bf16/fp16, fp32 accumulate), grouped tile order; SGLang's knobs, TMA, swapped-operand "
                "decode tiles, split-K and stream-K (deterministic reduction).",
    baseline=baseline,
    # absent = pointer loads, the whole K loop in one program: what a stored or exported config without them means
    optional_knobs={"TMA": 0, "SPLIT_K": 1, "STREAM_K": 0, "SWAP_AB": 0, "DIRECT_STORE": 0, "CTAS_PER_SM": 1},
    schedule_knobs=("GROUP_SIZE_M",),  # the grouped tile order: which tile, not how it is computed
)
