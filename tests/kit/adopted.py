"""@triton.autotune kernels written as libraries write them, and their adoption (loaded by the tests by file name,
``tests/kit/adopted.py:AXPY``, as worker processes load them).

- ``axpy_acc``: outer @triton.heuristics, prune_configs_by, restore_value=["acc"] (acc += alpha * x in place);
- ``scale_kernel``: y = 2x; its key is a bucket of n (NB), not n; the SKIP=True configs leave the last block
  unwritten (a wrong config the sweep must catch);
- ``total_kernel``: out += sum(x) with atomics, reset_to_zero=["out"].
"""
import torch
import triton
import triton.language as tl

from flytune_nb import adopt
from flytune_nb.core.dtypes import to_torch


def _small_blocks(configs, named_args, **kwargs):
    return [c for c in configs if c.kwargs["BLOCK"] <= 64]


@triton.heuristics({"EVEN": lambda args: args["n"] % 16 == 0})
@triton.autotune(
    configs=[triton.Config({"BLOCK": b}, num_warps=w, num_stages=s) for b in (16, 32, 128) for w, s in
             ((1, 1), (4, 3))],
    key=["n"], restore_value=["acc"], prune_configs_by={"early_config_prune": _small_blocks})
@triton.jit
def axpy_acc(x, acc, n, alpha, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    a = tl.load(acc + offs, mask=m)
    tl.store(acc + offs, a + alpha * tl.load(x + offs, mask=m), mask=m)


def axpy_inputs(shape, dtype, device):
    n, dt = shape["N"], to_torch(dtype)
    return {"x": torch.randn(n, dtype=dt, device=device.torch_device),
            "acc": torch.randn(n, dtype=dt, device=device.torch_device)}


def axpy_launch(kernel, inputs):
    n = inputs["x"].numel()
    kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](inputs["x"], inputs["acc"], n, 2.0)


def axpy_reference(inputs):
    return {"acc": inputs["acc"].double() + 2.0 * inputs["x"].double()}


AXPY = adopt(axpy_acc, axes=("N",), dtypes=("fp32", "fp16"), make_inputs=axpy_inputs, launch=axpy_launch,
             reference=axpy_reference, shape_of=lambda i: {"N": i["x"].numel()}, example_shape={"N": 100})


@triton.autotune(configs=[triton.Config({"BLOCK": b, "SKIP": s}, num_warps=w) for s in (False, True)
                          for b in (32, 64) for w in (1, 2)],
                 key=["NB"])
@triton.jit
def scale_kernel(x, y, n, NB, BLOCK: tl.constexpr, SKIP: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    if SKIP:
        m = m & (pid < tl.num_programs(0) - 1)
    tl.store(y + offs, 2 * tl.load(x + offs, mask=m), mask=m)


def scale_inputs(shape, dtype, device):
    x = torch.randn(shape["M"], shape["N"], dtype=to_torch(dtype), device=device.torch_device)
    return {"x": x, "y": torch.empty_like(x)}


def scale_launch(kernel, inputs):
    n = inputs["x"].numel()
    kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](inputs["x"], inputs["y"], n, triton.cdiv(n, 1024))


SCALE = adopt(scale_kernel, name="scale_adopted", axes=("M", "N"), dtypes=("fp32",), make_inputs=scale_inputs,
              launch=scale_launch, reference=lambda i: {"y": 2 * i["x"].double()},
              shape_of=lambda i: {"M": i["x"].shape[0], "N": i["x"].shape[1]}, example_shape={"M": 4, "N": 64})


@triton.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=1) for b in (16, 32)], key=["n"],
                 reset_to_zero=["out"])
@triton.jit
def total_kernel(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.atomic_add(out, tl.sum(tl.load(x + offs, mask=offs < n, other=0.0)))


def total_inputs(shape, dtype, device):
    # positive terms: a randn sum can land near zero, where one fp32 rounding is already a relative error above the
    # test's 1e-6. A positive sum errs by at most (rounding depth) x 2^-24 of itself: under 16 x 6e-8 at N=100
    # (numpy's sum of a block, then up to 7 atomic adds)
    return {"x": torch.rand(shape["N"], dtype=to_torch(dtype), device=device.torch_device),
            "out": torch.zeros(1, dtype=torch.float32, device=device.torch_device)}  # as its caller allocates it


def total_launch(kernel, inputs):
    n = inputs["x"].numel()
    kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](inputs["x"], inputs["out"], n)


TOTAL = adopt(total_kernel, name="total_adopted", axes=("N",), dtypes=("fp32",), make_inputs=total_inputs,
              launch=total_launch, reference=lambda i: {"out": i["x"].double().sum().reshape(1)},
              example_shape={"N": 100})
