"""Changing any one axis of the tuning key must miss the cache; irrelevant changes must not."""
import shutil

import pytest
import torch

import flytune_nb.core.key as keymod
from flytune_nb.core.device import from_properties, interpreter_device
from flytune_nb.core.key import make_key, stride_class
from flytune_nb.core.registry import get_kernel, load_folder
from flytune_nb.errors import UsageError
from tests.conftest import H200_PROPS as H200
from tests.conftest import MI300X_PROPS as MI300X


@pytest.fixture
def spec():
    return get_kernel("rmsnorm")


def _inputs(M=8, N=64, dtype=torch.bfloat16):
    return {"x": torch.randn(M, N, dtype=dtype), "weight": torch.randn(N, dtype=dtype),
            "out": torch.empty(M, N, dtype=dtype)}


def _key(spec, shape=None, dtype="bf16", inputs=None, device=None):
    return make_key(spec, shape or {"M": 8, "N": 64}, dtype, inputs if inputs is not None else _inputs(),
                    device or interpreter_device()).digest


def test_same_inputs_same_key(spec):
    assert _key(spec) == _key(spec)


def test_shape_axis(spec):
    assert _key(spec, {"M": 8, "N": 128}) != _key(spec)
    assert _key(spec, {"M": 16, "N": 64}) != _key(spec)


def test_dtype_axis(spec):
    assert _key(spec, dtype="fp16") != _key(spec)


def test_stride_class_axis(spec):
    base = _inputs()
    strided = dict(base, x=torch.randn(8, 128, dtype=torch.bfloat16)[:, ::2])  # inner stride 2: class "other"
    broadcast = dict(base, weight=torch.randn(1, dtype=torch.bfloat16).expand(64))  # stride 0
    assert _key(spec, inputs=strided) != _key(spec, inputs=base)
    assert _key(spec, inputs=broadcast) != _key(spec, inputs=base)
    # Row strides 128 vs 64 are both "other": same class, same key (quack's rule).
    padded = dict(base, x=torch.randn(8, 128, dtype=torch.bfloat16)[:, :64])
    assert _key(spec, inputs=padded) == _key(spec, inputs=base)
    assert [stride_class(s) for s in (0, 1, 2, 4096)] == [0, 1, 2, 2]


def test_device_name_and_arch_axes(spec):
    h200 = from_properties(H200, hip=False)
    other_name = from_properties(type(H200)(**{**vars(H200), "name": "NVIDIA H100"}), hip=False)
    other_arch = from_properties(type(H200)(**{**vars(H200), "minor": 9}), hip=False)
    mi300 = from_properties(MI300X, hip=True)
    keys = {_key(spec, device=d) for d in (h200, other_name, other_arch, mi300, interpreter_device())}
    assert len(keys) == 5


def test_source_fingerprint_axis(tmp_path):
    """Any code edit in the kernel folder (here: the heuristic's warps) changes the key; a comment or docstring edit
    does not, so comments can be reworded without orphaning stored trials and exports."""
    src = get_kernel("rmsnorm").source_dir
    copy = tmp_path / "rmsnorm"
    shutil.copytree(src, copy, ignore=shutil.ignore_patterns("__pycache__"))
    spec_copy = load_folder(copy)
    before = _key(spec_copy)
    heuristic = copy / "heuristic.py"
    text = heuristic.read_text()
    assert text.startswith('"""')
    heuristic.write_text('"""Reworded: ' + text[3:].replace("num_stages=1)", "num_stages=1)  # why", 1) + "\n# a comment\n")
    assert _key(load_folder(copy)) == before
    assert "num_warps=" in text
    heuristic.write_text(text.replace("num_warps=", "num_warps=2 * ", 1))
    # The spec already imported keeps the key of the code it runs; loading the folder again imports the edit.
    assert _key(spec_copy) == before
    edited = load_folder(copy)
    assert edited is not spec_copy and _key(edited) != before


def test_toolchain_axis(spec, monkeypatch):
    before = _key(spec)
    real = keymod.toolchain
    monkeypatch.setattr(keymod, "toolchain", lambda: {**real(), "triton": "9.9.9"})
    assert _key(spec) != before
    monkeypatch.setattr(keymod, "toolchain", lambda: {**real(), "torch": "0.0.1"})
    assert _key(spec) != before


def test_codegen_env_axis(spec, monkeypatch):
    monkeypatch.delenv("TRITON_DEFAULT_FP_FUSION", raising=False)
    before = _key(spec)
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "0")
    assert _key(spec) != before
    monkeypatch.setenv("SOME_UNRELATED_VARIABLE", "1")
    monkeypatch.delenv("TRITON_DEFAULT_FP_FUSION")
    assert _key(spec) == before


def test_a_triton_kernels_key_is_the_one_its_stored_trials_and_exports_carry(spec):
    """The toolchain part comes from the kernel's backend; for a Triton kernel it is key.toolchain() and
    key.codegen_env(), so every stored trial and committed export keeps its key. The digest of fixed fields is
    pinned, so the key's shape (its fields, their order, the hash) cannot move unnoticed either."""
    from flytune_nb.core.key import TuningKey, codegen_env, toolchain

    assert spec.backend == "triton"
    k = make_key(spec, {"M": 8, "N": 64}, "bf16", _inputs(), interpreter_device())
    assert k.toolchain == tuple(toolchain().items()) and k.env == tuple(codegen_env().items())
    fixed = TuningKey("rmsnorm", (("M", 8), ("N", 64)), "bf16", (("x", "bfloat16", (2, 1)),), "NVIDIA_H200", "sm_90",
                      "0123456789abcdef", (("flytune_nb", "0.1.0"), ("triton", "3.6.0")), ())
    assert fixed.digest == "ccda08cd7b0d03b1809b2315"  # the digest stored keys were made with
def test_the_timing_mode_is_in_the_key_and_the_events_digest_leaves_it_out(spec):
    """Graph replay and events can pick different winners: different keys. The events digest (the default) is the
    hash of every other field, without the timing field, so every stored trial and exported key made without one
    stays valid."""
    import hashlib
    import json
    from dataclasses import asdict

    events = make_key(spec, {"M": 8, "N": 64}, "bf16", _inputs(), interpreter_device())
    graph = make_key(spec, {"M": 8, "N": 64}, "bf16", _inputs(), interpreter_device(), timing="graph")
    before = {k: v for k, v in asdict(events).items() if k != "timing"}
    assert events.digest == hashlib.sha256(json.dumps(before, sort_keys=True, default=list).encode()).hexdigest()[:24]
    assert graph.digest != events.digest and graph.to_dict()["timing"] == "graph"
    with pytest.raises(UsageError, match="unknown timing mode"):
        make_key(spec, {"M": 8, "N": 64}, "bf16", _inputs(), interpreter_device(), timing="replay")


def test_the_source_fingerprint_reads_the_same_tokens_on_every_python():
    """Python 3.12 renumbered the token types and splits an f-string into FSTRING_START / MIDDLE / END and its
    expressions' tokens; the fingerprint uses token names and one STRING per f-string, so a kernel tuned under one
    Python is current under another (the committed H200 exports were tuned under 3.12; CI runs 3.11). Pinned values:
    what 3.11, 3.12 and 3.13 all give."""
    from flytune_nb.core.key import code_tokens

    src = b'def f(x, n):\n    """doc"""\n    return f"{x!r:>{n}} and {f\'{n}\'}" + "s"  # c\n'
    toks = code_tokens(src).decode().split("\x1f")
    assert toks[:6] == ["NAME:def", "NAME:f", "OP:(", "NAME:x", "OP:,", "NAME:n"]
    assert 'STRING:f"{x!r:>{n}} and {f\'{n}\'}"' in toks and "STRING:\"s\"" in toks
    assert not any(t.startswith(("FSTRING", "COMMENT")) or "doc" in t for t in toks)
    import hashlib

    assert hashlib.sha256(code_tokens(src)).hexdigest()[:16] == PINNED_TOKENS


PINNED_TOKENS = "f199a760950aef7a"
