"""The input names a kernel reads, read from its code (flytune_nb.core.input_names): every registered kernel accepts
what its make_inputs makes and refuses a misspelling; code that reads its inputs out of sight refuses nothing."""
import dataclasses
import os
import re

import pytest
import torch

from flytune_nb.core.input_names import check_call, read
from flytune_nb.core.registry import get_kernel, list_kernels
from flytune_nb.errors import KernelUnavailable, UsageError
from flytune_nb.serve.tuned import TunedKernel

ADOPTED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "kit", "adopted.py")
# Optional inputs a kernel reads that its make_inputs leaves out (outputs are made)
OPTIONAL = {"rmsnorm": {"eps": 1e-5}, "fused_add_rmsnorm": {"eps": 1e-5}, "flydsl_rmsnorm": {"eps": 1e-5},
            "flydsl_fused_add_rmsnorm": {"eps": 1e-5}}
# What each kernel's message lists: the names its code reads by literal, a check on the reading itself
READS = {
    "rmsnorm": "eps, out, weight, x", "flydsl_rmsnorm": "eps, out, weight, x",
    "fused_add_rmsnorm": "eps, out, residual, weight, x", "flydsl_fused_add_rmsnorm": "eps, out, residual, weight, x",
    "softmax": "out, x", "matmul": "a, out, w", "fused_moe": "out, topk_ids, topk_weights, w1, w2, x",
    "sglang_fused_moe": "topk_ids, topk_weights, w1, w1_scale, w2, w2_scale, x",
    "sglang_fused_moe_down": "act, topk_ids, topk_weights, w2, w2_scale",
}


def _spec(ref):
    try:
        return get_kernel(ref)
    except KernelUnavailable as e:  # sglang or flydsl not installed here
        pytest.skip(str(e))


@pytest.mark.parametrize("ref", list_kernels() + [f"{ADOPTED}:{a}" for a in ("AXPY", "SCALE", "TOTAL")])
def test_every_kernel_accepts_what_it_makes_and_refuses_a_misspelling(ref, dev):
    spec = _spec(ref)
    meta = dataclasses.replace(dev, torch_device="meta")  # shapes only: the example shape costs nothing
    made = {}
    for dtype in spec.dtypes:  # fp8 makes weight scales too
        made.update(spec.make_inputs(spec.example(), dtype, meta))
    call = {**made, **OPTIONAL.get(spec.name, {})}
    check_call(spec, call)
    first = next(iter(made))
    with pytest.raises(UsageError, match=rf"^{spec.name}: no input named '{first}_' \(did you mean '{first}'\?\); "
                                         rf"it reads: {READS.get(spec.name, '.*')}$"):
        check_call(spec, {**call, f"{first}_": made[first]})


def test_an_adopted_kernel_refuses_a_name_its_launch_does_not_read(dev, tmp_path):
    """adopt declares the names its user's functions read: its run passes the inputs to launch, out of sight."""
    spec = _spec(f"{ADOPTED}:AXPY")
    assert spec.input_names == ("acc", "x")
    op = TunedKernel(spec, device=dev, cache_dir=tmp_path)
    inputs = spec.make_inputs({"N": 64}, "fp32", dev)
    acc = inputs["acc"].clone()
    with pytest.raises(UsageError, match=r"axpy_acc: no input named 'alpha'; it reads: acc, x$"):
        op(**inputs, alpha=3.0)
    assert torch.equal(inputs["acc"], acc)  # acc += 2x in place: not launched
    op(**inputs)
    assert torch.allclose(inputs["acc"], acc + 2.0 * inputs["x"])


# -- the rules, on small functions -------------------------------------------------------------------------------------
NAMES = ("x", "w")


def _reads_x_and_eps(inputs, config):
    return inputs["x"] * inputs.get("eps", 1e-6)


def _passes_on(inputs, config):
    return _reads_x_and_eps(inputs, config)


def _nested(inputs, config):
    def inner():
        return inputs["q"]

    return inner() if "out" in inputs else None


def _keys_by_name(inputs, config):
    return [inputs[k] for k in NAMES]


def _iterates(inputs, config):
    return [inputs[k] for k in inputs]


def _items(inputs, config):
    return {k: v for k, v in inputs.items()}


def _aliases(inputs, config):
    other = inputs
    return other["x"]


def _to_torch(inputs, config):
    return torch.stack(inputs)


def _to_a_method(inputs, config):
    return config.launch(inputs)


def _d1(a):
    return _d2(a)


def _d2(b):
    return _d3(b)


def _d3(c):
    return _d4(c)


def _d4(d):
    return d["deep"]


def _deep(inputs, config):
    return _d1(inputs)


@pytest.mark.parametrize("fn,known", [
    (_reads_x_and_eps, {"x", "eps"}),
    (_passes_on, {"x", "eps"}),  # a function of this package it passes the inputs to is read too
    (lambda i, c: _reads_x_and_eps(i, c), {"x", "eps"}),
    (_nested, {"q", "out"}),
    (_keys_by_name, {"x", "w"}),  # a key that is not a literal: the strings the code names
])
def test_names_read_by_literal_are_known(fn, known):
    names = read([(fn, 0)])
    assert not names.unknowable and names.known == known


@pytest.mark.parametrize("fn,why", [
    (lambda i, c: _reads_x_and_eps(**i), r"passes the inputs on whole \(DICT_MERGE\)"),
    (_iterates, r"passes the inputs on whole \(GET_ITER\)"),
    (_items, "reads inputs.items"),
    (_aliases, r"passes the inputs on whole \(STORE_FAST\)"),
    (_to_torch, "passes the inputs to .*stack, which is not read"),  # another package's: not followed
    (_to_a_method, "passes the inputs to a call, which is not read"),
    (_deep, "more than 3 calls deep"),
    # by keyword the stack position says nothing of the parameter: d would be missed and cfg read as the inputs
    (lambda i, c: _reads_x_and_eps(config=c, inputs=i), "in a call with keyword arguments"),
])
def test_inputs_read_out_of_sight_make_nothing_knowable(fn, why):
    names = read([(fn, 0)])
    assert names.unknown(["x", "anything"]) == []
    assert re.search(why, names.unknowable), names.unknowable


def test_a_call_naming_nothing_known_is_not_checked():
    """Code these rules do not see through names none of the call's inputs: then none is refused."""
    names = read([(_reads_x_and_eps, 0)])
    assert names.unknown(["a", "b"]) == [] and names.unknown(["x", "b"]) == ["b"]
