import torch

from flytune_nb.core.dtypes import to_torch
from flytune_nb.core.spec import KernelSpec

from .configs import configs
from .heuristic import default
from .kernel import scale
from .reference import scale_ref


def make_inputs(shape, dtype, device):
    n = shape["N"]
    return {"x": torch.randn(n, dtype=to_torch(dtype), device=device.torch_device),
            "out": torch.empty(n, dtype=to_torch(dtype), device=device.torch_device)}


SPEC = KernelSpec(
    name="toy", axes=("N",), batch_axis="N", dtypes=("fp32", "bf16"),
    make_inputs=make_inputs, run=lambda i, c: scale(i["x"], i["out"], c), reference=lambda i: scale_ref(i["x"]),
    configs=configs, default=default, shape_of=lambda i: {"N": i["x"].numel()}, outputs=("out",),
    bytes=lambda s, d: 8 * s["N"], baseline=lambda i: i["x"] * 2,
)
