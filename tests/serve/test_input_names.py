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
from tests.serve import input_name_rules as rules

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


# -- the rules, on small functions (tests/serve/input_name_rules.py) --------------------------------------------------
@pytest.mark.parametrize("fn,known", rules.KNOWN)
def test_names_read_by_literal_are_known(fn, known):
    names = read([(fn, 0)])
    assert not names.unknowable and names.known == known


@pytest.mark.parametrize("fn,why", rules.UNKNOWABLE)
def test_inputs_read_out_of_sight_make_nothing_knowable(fn, why):
    names = read([(fn, 0)])
    assert names.unknown(["x", "anything"]) == []
    assert re.search(why, names.unknowable), names.unknowable


def test_a_call_naming_nothing_known_is_not_checked():
    """Code these rules do not see through names none of the call's inputs: then none is refused."""
    names = read([(rules._reads_x_and_eps, 0)])
    assert names.unknown(["a", "b"]) == [] and names.unknown(["x", "b"]) == ["b"]


def _other_pythons() -> list[str]:
    """Every other CPython 3.10+ here: on PATH (python3.10 ... python3.14) or under pyenv."""
    import ast
    import glob
    import shutil
    import subprocess
    import sys

    found = {shutil.which(f"python3.{minor}") for minor in range(10, 15)}
    found |= set(glob.glob(os.path.expanduser("~/.pyenv/versions/3.*/bin/python")))
    out = {}
    for exe in sorted(p for p in found if p):
        try:
            version = subprocess.run([exe, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True,
                                     text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            continue
        if version and version != str(sys.version_info[:2]) and ast.literal_eval(version) >= (3, 10):
            out.setdefault(version, exe)
    return sorted(out.values())


def test_the_rules_hold_on_every_other_python_here():
    """The reader reads bytecode, which each Python spells its own way (3.13's STORE_FAST_LOAD_FAST hid every read
    of a comprehension, so a call passing a name read there was refused): the cases run under each other Python
    found. Skipped where there is none (a CI image with one Python)."""
    import subprocess

    pythons = _other_pythons()
    if not pythons:
        pytest.skip("no other Python 3.10+ here")
    from tests.conftest import REPO

    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "input_name_rules.py")
    for exe in pythons:
        done = subprocess.run([exe, script, REPO], capture_output=True, text=True, timeout=120, cwd=REPO)
        assert done.returncode == 0, f"{exe}:\n{done.stdout}{done.stderr}"
