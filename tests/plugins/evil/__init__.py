import torch

from flytune_nb.core.dtypes import to_torch
from flytune_nb.core.spec import KernelSpec

from .configs import configs
from .heuristic import default
from .kernel import launch
from .reference import ref


def make_inputs(shape, dtype, device):
    return {"x": torch.randn(shape["N"], dtype=to_torch(dtype)), "out": torch.empty(shape["N"], dtype=to_torch(dtype))}


SPEC = KernelSpec(
    name="evil", axes=("N",), batch_axis="N", dtypes=("fp32",), make_inputs=make_inputs,
    run=lambda i, c: launch(i["x"], i["out"], c), reference=lambda i: ref(i["x"]), configs=configs, default=default,
    shape_of=lambda i: {"N": i["x"].numel()}, outputs=("out",), bytes=lambda s, d: 8 * s["N"],
    baseline=lambda i: i["x"] * 2,
)
