import os

import torch

from flytune_nb.core.dtypes import to_torch
from flytune_nb.core.spec import KernelSpec

from .configs import configs
from .heuristic import default
from .kernel import launch
from .reference import ref


def make_inputs(shape, dtype, device):
    return {"x": torch.randn(shape["N"], dtype=to_torch(dtype)), "out": torch.empty(shape["N"], dtype=to_torch(dtype))}


def same_binary_per_ten_ms(shape, dtype, config, device):
    """A stand-in for Triton's binary hash, which the interpreter has none of: configs whose sleeps share a tens
    digit "compile to the same binary" (so SLEEP_MS=20 and 25 are twins, and only the first is timed)."""
    return f"{config['MODE']}-{config.get('SLEEP_MS', 0) // 10}"


SPEC = KernelSpec(
    name="evil", axes=("N",), batch_axis="N", dtypes=("fp32",), make_inputs=make_inputs,
    run=lambda i, c: launch(i["x"], i["out"], c), reference=lambda i: ref(i["x"]), configs=configs, default=default,
    shape_of=lambda i: {"N": i["x"].numel()}, outputs=("out",), bytes=lambda s, d: 8 * s["N"],
    baseline=lambda i: i["x"] * 2,
    extra={"binary": same_binary_per_ten_ms} if os.environ.get("FLYTUNE_EVIL_TWINS") else {},
)
