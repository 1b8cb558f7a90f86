"""KernelSpec's contract checks: a field of the wrong type is one SpecError naming the field, at construction, not a
TypeError or a misread name deep inside a sweep."""
import dataclasses
import os

import pytest

from flytune_nb.core.config import Config
from flytune_nb.core.registry import get_kernel
from flytune_nb.core.spec import SpecError

PLUGINS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "plugins")


@pytest.fixture(scope="module")
def toy():
    return get_kernel("toy", [PLUGINS])


@pytest.mark.parametrize("field, value, says", [
    ("outputs", "out", r"outputs must be a tuple of names, e\.g\. \('out',\)"),
    ("axes", "MN", r"axes must be a tuple of names, e\.g\. \('M', 'N'\)"),
    ("zeroes", ["acc", 3], "zeroes must be a tuple of names"),
    ("axes", (), "axes is empty"),
    ("tolerance", 1e-3, r"tolerance must be a function or None \(a bound per dtype"),
    ("default", "BLOCK=128", "default must be a function, got str"),
    ("configs", [Config({"BLOCK": 64})], "configs must be a function, got list"),
    ("run", None, "run must be a function"),
    ("tolerance_scale", 0, "tolerance_scale must be a positive number"),
    ("example_shape", [("N", 64)], "example_shape must be a dict"),
    ("batch_axis", 0, "batch_axis must be one of the axes' names"),
    ("name", 5, "kernel name must be letters"),
])
def test_a_field_of_the_wrong_type_is_refused_by_name(toy, field, value, says):
    with pytest.raises(SpecError, match=says):
        dataclasses.replace(toy, **{field: value})


def test_name_lists_become_tuples_and_dtypes_may_be_text(toy):
    spec = dataclasses.replace(toy, outputs=["out"], dtypes="fp32, float16")
    assert spec.outputs == ("out",) and spec.dtypes == ("fp32", "fp16")


def test_a_real_torch_dtype_no_kernel_runs_is_not_called_unknown(toy):
    import torch

    from flytune_nb.core.dtypes import DtypeError

    with pytest.raises(DtypeError, match=r"^toy does not run torch\.float64; toy supports "):
        toy.check_dtype(torch.float64)
    with pytest.raises(DtypeError, match=r"^unknown dtype 'fp61'; toy supports "):
        toy.check_dtype("fp61")


def test_inputs_made_in_another_dtype_than_asked_are_refused(toy, dev, tmp_path):
    import torch

    made = toy.make_inputs({"N": 64}, "bf16", dev)
    toy.check_made_inputs(made, "bf16")  # the right dtype passes
    fp32_always = dataclasses.replace(toy, make_inputs=lambda s, d, device: {
        "x": torch.randn(s["N"], device=device.torch_device), "out": torch.empty(s["N"], device=device.torch_device)})
    with pytest.raises(SpecError, match=r"toy: make_inputs\(shape, 'bf16', device\) made fp32 tensors"):
        fp32_always.check_made_inputs(fp32_always.make_inputs({"N": 64}, "bf16", dev), "bf16")
    with pytest.raises(SpecError, match="no floating-point tensor"):
        toy.check_made_inputs({"n": 3}, "fp32")
    # a sweep refuses it before the first trial, so nothing is stored under a dtype that never ran
    from flytune_nb import Sweep
    from flytune_nb.errors import FlytuneError

    with pytest.raises(FlytuneError, match="made fp32 tensors"):
        Sweep(fp32_always, "N=64", ["bf16"], db=tmp_path / "r.db", isolate=False).run()


def test_a_shape_breaking_a_shape_rule_is_refused_naming_the_shape_and_the_rule(toy):
    """A kernel declares what it cannot run whatever the config; check_shape (every sweep, census and lookup calls
    it first) refuses such a shape with the shape, the rule and its reason in one line, and passes the others."""
    from flytune_nb.errors import UsageError

    ruled = dataclasses.replace(toy, shape_rules={"N % 16 == 0": "a program reads 16 columns at a time"})
    assert ruled.check_shape({"N": 64}) == {"N": 64}
    with pytest.raises(UsageError) as e:
        ruled.check_shape({"N": 40})
    assert str(e.value) == "toy: shape N=40 breaks the rule N % 16 == 0: a program reads 16 columns at a time"
    chained = dataclasses.replace(toy, shape_rules={"64 <= N * 2 <= 256": ""})
    assert [n for n in (16, 32, 128, 129) if _passes(chained, n)] == [32, 128]


def _passes(spec, n: int) -> bool:
    from flytune_nb.errors import UsageError

    try:
        spec.check_shape({"N": n})
    except UsageError:
        return False
    return True


@pytest.mark.parametrize("rule, says", [
    ("topk <= E", r"names 'topk', not one of the axes \['N'\]"),
    ("N", "is not a comparison"),
    ("N <= ", "is not a comparison"),
    ("__import__('os').getpid() > N", "may only compare axes and whole numbers"),
    ("N.bit_length() > 2", "may only compare axes and whole numbers"),
    ("N <= 1.5", "1.5 is not a whole number"),
    # a comparison is the rule itself, never a number inside it: these would reach check_shape and fail there
    ("(N >= 16) == 1", "compares inside a comparison"),
    ("N <= (N > 1) * 64", "compares inside a comparison"),
    # a sum of 1200 terms parsed, then raised RecursionError at every check_shape; of 5000, when the spec was made
    ("N" + " + N" * 1200 + " >= 1", "has more than 100 parts"),
    ("N" + " + N" * 5000 + " >= 1", "has more than 100 parts"),
])
def test_a_shape_rule_that_is_not_a_comparison_of_axes_is_refused_at_construction(toy, rule, says):
    """A rule is read, never run as Python: anything but a comparison of the axes and whole numbers is refused when
    the spec is made, not when the first shape is checked."""
    with pytest.raises(SpecError, match=f"^toy: shape rule .*{says}"):
        dataclasses.replace(toy, shape_rules={rule: "why"})
