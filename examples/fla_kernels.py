"""Three of flash-linear-attention's ``@triton.autotune`` kernels (fla-core 0.6.0), adopted: their decorators
unchanged, each one call. ``pip install 'flytune_nb[fla]'``.

- ``L2NORM``: ``fla.modules.norm.l2norm.l2norm_fwd_kernel`` (fla's CachedAutotuner; key D and NB, a bucket of the
  token count T: every T up to 65536 shares one autotuner entry);
- ``RMSNORM``: ``fla.modules.norm.layernorm.layer_norm_fwd_kernel`` as ``rms_norm`` calls it (plain Autotuner; its
  key holds three booleans besides D and a bucket of T);
- ``CONV_UPDATE``: ``fla.modules.causal_conv1d.ops.causal_conv1d_update_kernel``, the decode step of the short
  convolution (outer ``@triton.heuristics``; ``restore_value=['cache']``: it updates the conv state in place; key D
  and W, not the batch N).

Each ``launch`` is the kernel's call in fla's own Python wrapper, argument for argument and in its order (the
autotuner's key lists the tensors' dtypes in the order the caller passes them), so the keys ``flytune_nb.prime``
fills are the keys fla's own code looks up. Use them by name: ``flytune sweep examples/fla_kernels.py:L2NORM ...``.
"""
import torch
import triton

from flytune_nb import adopt
from flytune_nb.core.dtypes import itemsize, to_torch

EPS_L2, EPS_RMS = 1e-6, 1e-5  # fla's defaults (l2norm_fwd, rms_norm)


# -- l2norm ----------------------------------------------------------------------------------------------------------
def l2norm_inputs(shape, dtype, device):
    T, D = shape["T"], shape["D"]
    x = torch.randn(T, D, dtype=to_torch(dtype), device=device.torch_device)
    return {"x": x, "y": torch.empty_like(x), "rstd": torch.empty(T, dtype=torch.float32, device=x.device)}


def l2norm_launch(kernel, inputs):
    # fla/modules/norm/l2norm.py, l2norm_fwd, the D <= 512 branch (wider rows take its row kernel)
    x, y, rstd = inputs["x"], inputs["y"], inputs["rstd"]
    T, D = x.shape
    BD = min(65536 // x.element_size(), triton.next_power_of_2(D))
    NB = triton.cdiv(T, 2048 * 32)

    def grid(meta):
        return (triton.cdiv(T, meta["BT"]),)

    kernel[grid](x=x, y=y, rstd=rstd, eps=EPS_L2, T=T, D=D, BD=BD, NB=NB)


def l2norm_reference(inputs):
    x = inputs["x"].double()
    rstd = 1 / torch.sqrt((x * x).sum(-1) + EPS_L2)
    return {"y": x * rstd[:, None], "rstd": rstd}


L2NORM = adopt(
    "fla.modules.norm.l2norm:l2norm_fwd_kernel", name="fla_l2norm_fwd", axes=("T", "D"),
    dtypes=("bf16", "fp16", "fp32"), make_inputs=l2norm_inputs, launch=l2norm_launch, reference=l2norm_reference,
    shape_of=lambda i: {"T": i["x"].shape[0], "D": i["x"].shape[1]}, example_shape={"T": 4096, "D": 128},
    bytes=lambda s, d: s["T"] * s["D"] * 2 * itemsize(d) + 4 * s["T"],  # read x, write y and rstd
)


# -- rmsnorm ---------------------------------------------------------------------------------------------------------
def rmsnorm_inputs(shape, dtype, device):
    T, D, dt = shape["T"], shape["D"], to_torch(dtype)
    x = torch.randn(T, D, dtype=dt, device=device.torch_device)
    return {"x": x, "weight": torch.randn(D, dtype=dt, device=x.device), "y": torch.empty_like(x),
            "rstd": torch.empty(T, dtype=torch.float32, device=x.device)}


def rmsnorm_launch(kernel, inputs):
    # fla/modules/norm/layernorm.py, layer_norm_fwd(x, weight, None, is_rms_norm=True), the D <= 512 branch
    x, w, y, rstd = inputs["x"], inputs["weight"], inputs["y"], inputs["rstd"]
    T, D = x.shape
    BD = min(65536 // x.element_size(), triton.next_power_of_2(D))
    NB = triton.cdiv(T, 2048)

    def grid(meta):
        return (triton.cdiv(T, meta["BT"]),)

    kernel[grid](x=x, y=y, w=w, b=None, res=None, res_out=None, mean=None, rstd=rstd, eps=EPS_RMS, T=T, G=1, D=D,
                 BD=BD, NB=NB, IS_RMS_NORM=True, HAS_RESIDUAL=False, STORE_RESIDUAL_OUT=False, HAS_WEIGHT=True,
                 HAS_BIAS=False)


def rmsnorm_reference(inputs):
    x = inputs["x"].double()
    rstd = torch.rsqrt((x * x).mean(-1) + EPS_RMS)
    return {"y": x * rstd[:, None] * inputs["weight"].double(), "rstd": rstd}


RMSNORM = adopt(
    "fla.modules.norm.layernorm:layer_norm_fwd_kernel", name="fla_rmsnorm_fwd", axes=("T", "D"),
    dtypes=("bf16", "fp16", "fp32"), make_inputs=rmsnorm_inputs, launch=rmsnorm_launch, reference=rmsnorm_reference,
    shape_of=lambda i: {"T": i["x"].shape[0], "D": i["x"].shape[1]}, example_shape={"T": 4096, "D": 128},
    bytes=lambda s, d: (2 * s["T"] * s["D"] + s["D"]) * itemsize(d) + 4 * s["T"],
)


# -- causal conv1d, one decode step ----------------------------------------------------------------------------------
def conv_update_inputs(shape, dtype, device):
    N, D, W, dt = shape["N"], shape["D"], shape["W"], to_torch(dtype)
    x = torch.randn(N, D, dtype=dt, device=device.torch_device)
    return {"x": x, "cache": torch.randn(N, D, W, dtype=dt, device=x.device),
            "weight": torch.randn(D, W, dtype=dt, device=x.device), "y": torch.empty_like(x)}


def conv_update_launch(kernel, inputs):
    # fla/modules/causal_conv1d/ops.py, causal_conv1d_update(x, cache, weight=weight, activation="silu"), x (N, D)
    x, cache, weight, y = inputs["x"], inputs["cache"], inputs["weight"], inputs["y"]
    N, D = x.shape
    W = weight.shape[1]

    def grid(meta):
        return (triton.cdiv(D, meta["BD"]) * N,)

    kernel[grid](x=x, cache=cache, residual=None, y=y, weight=weight, bias=None, stride_x_n=x.stride(0),
                 stride_x_d=x.stride(1), stride_y_n=y.stride(0), stride_y_d=y.stride(1), D=D, W=W,
                 BW=triton.next_power_of_2(W), ACTIVATION="silu")


def conv_update_reference(inputs):
    cache = torch.cat([inputs["cache"].double()[..., 1:], inputs["x"].double()[..., None]], -1)
    y = (cache * inputs["weight"].double()).sum(-1)
    return {"y": y * torch.sigmoid(y), "cache": cache}


CONV_UPDATE = adopt(
    "fla.modules.causal_conv1d.ops:causal_conv1d_update_kernel", name="fla_conv1d_update", axes=("N", "D", "W"),
    dtypes=("bf16", "fp16", "fp32"), make_inputs=conv_update_inputs, launch=conv_update_launch,
    reference=conv_update_reference, shape_of=lambda i: {"N": i["x"].shape[0], "D": i["x"].shape[1],
                                                          "W": i["weight"].shape[1]},
    example_shape={"N": 64, "D": 2048, "W": 4},
    bytes=lambda s, d: (2 * s["N"] * s["D"] * s["W"] + 2 * s["N"] * s["D"] + s["D"] * s["W"]) * itemsize(d),
)
