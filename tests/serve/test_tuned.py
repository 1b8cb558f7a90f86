"""The run path: memory -> disk -> artifact -> default; search only when asked."""
import dataclasses
import json
import re

import pytest
import torch

import flytune_nb.serve.tuned as tuner_mod
from flytune_nb.core.config import Config
from flytune_nb.core.registry import get_kernel
from flytune_nb.measure.correctness import compare
from flytune_nb.measure.timer import CpuTimer
from flytune_nb.serve.disk_cache import DiskCache
from flytune_nb.serve.tuned import TunedKernel, tuned
from flytune_nb.strategies.loop import NoValidConfig

SHAPE = {"M": 4, "N": 200}


@pytest.fixture
def spec():
    return get_kernel("rmsnorm")


@pytest.fixture
def counting(monkeypatch):
    """Counts searches (each evaluate is one trial)."""
    calls = []
    real = tuner_mod.search

    def spy(*a, **k):
        calls.append(a[1])
        return real(*a, **k)

    monkeypatch.setattr(tuner_mod, "search", spy)
    return calls


def _check_output(spec, inputs, out):
    ref = spec.reference(inputs)
    assert torch.linalg.vector_norm(out.double() - ref) / torch.linalg.vector_norm(ref) < spec.tol("fp32")


def test_normal_calls_never_search_and_use_the_default(spec, dev, tmp_path, counting):
    op = TunedKernel(spec, device=dev, cache_dir=tmp_path)
    inputs = spec.make_inputs(SHAPE, "fp32", dev)
    out = op(**inputs)
    assert op.last_source == "default" and counting == []
    _check_output(spec, inputs, out)
    op(**spec.make_inputs(SHAPE, "fp32", dev))
    assert op.last_source == "memory" and counting == []


def test_autotune_env_searches_once_then_memory_then_disk(spec, dev, tmp_path, counting, monkeypatch):
    monkeypatch.setenv("FLYTUNE_AUTOTUNE", "1")
    op = TunedKernel(spec, device=dev, cache_dir=tmp_path, timer=CpuTimer(reps=1, warmup=0))
    inputs = spec.make_inputs(SHAPE, "fp32", dev)
    _check_output(spec, inputs, op(**inputs))
    assert op.last_source == "search" and len(counting) == 1
    best = op.last_result.pick.config  # the selection stage's winner, not always the fastest timing
    op(**spec.make_inputs(SHAPE, "fp32", dev))
    assert op.last_source == "memory" and len(counting) == 1
    # A new process (new TunedKernel) finds the winner on disk, still with no search.
    op2 = TunedKernel(spec, device=dev, cache_dir=tmp_path)
    assert op2.config_for(spec.make_inputs(SHAPE, "fp32", dev)) == best
    assert op2.last_source == "disk" and len(counting) == 1
    files = list(tmp_path.rglob("*.json"))
    assert len(files) == 1 and json.loads(files[0].read_text())["config"] == best.to_dict()


def test_artifact_beats_default_and_cache_beats_artifact(spec, dev, tmp_path, counting):
    from_artifact = Config({"BLOCK_N": 256}, num_warps=2, num_stages=2)
    op = TunedKernel(spec, device=dev, cache_dir=tmp_path, artifact_lookup=lambda *a: from_artifact)
    inputs = spec.make_inputs(SHAPE, "fp32", dev)
    _check_output(spec, inputs, op(**inputs))
    assert op.last_source == "artifact" and op.config_for(inputs) == from_artifact
    op.tune(**spec.make_inputs(SHAPE, "fp32", dev))
    op2 = TunedKernel(spec, device=dev, cache_dir=tmp_path, artifact_lookup=lambda *a: from_artifact)
    op2.config_for(inputs)
    assert op2.last_source == "disk"
    # An artifact hook that has nothing for this shape falls through to the heuristic.
    op3 = TunedKernel(spec, device=dev, cache_dir=tmp_path / "other", artifact_lookup=lambda *a: None)
    assert op3.config_for(inputs) == spec.default(SHAPE, "fp32", dev) and op3.last_source == "default"


def test_changed_shape_or_layout_resolves_again(spec, dev, tmp_path):
    op = TunedKernel(spec, device=dev, cache_dir=tmp_path)
    op(**spec.make_inputs(SHAPE, "fp32", dev))
    op(**spec.make_inputs({"M": 4, "N": 5000}, "fp32", dev))
    assert op.last_source == "default"
    with torch.device(dev.torch_device):  # the tensors made here live where the kernel runs
        x = torch.randn(4, 400)[:, :200]  # row stride 400 vs 200: same class ("other"), same tuning key
        assert op.config_for(dict(x=x, weight=torch.randn(200), out=torch.empty(4, 200))) == op.config_for(
            spec.make_inputs(SHAPE, "fp32", dev))
        inputs = dict(x=torch.randn(4, 200), weight=torch.randn(1).expand(200), out=torch.empty(4, 200))
        out = op(**inputs)  # broadcast weight: stride class 0, a new entry
        assert op.last_source == "default"
        _check_output(spec, inputs, out)


def test_a_cache_folder_that_cannot_be_written_keeps_the_search_with_a_warning(spec, dev, tmp_path, counting,
                                                                              monkeypatch):
    # a service account whose home does not exist (HOME=/nonexistent) has no writable default cache folder; a file
    # standing where the folder should be fails the same way for root, which ignores permissions
    blocked = tmp_path / "cache"
    blocked.write_text("")
    monkeypatch.setenv("FLYTUNE_AUTOTUNE", "1")
    op = TunedKernel(spec, device=dev, cache_dir=blocked / "flytune_nb", timer=CpuTimer(reps=1, warmup=0))
    inputs = spec.make_inputs(SHAPE, "fp32", dev)
    with pytest.warns(RuntimeWarning, match="could not cache the tuned winner.*FLYTUNE_CACHE_DIR"):
        out = op(**inputs)
    _check_output(spec, inputs, out)
    assert op.last_source == "search" and len(counting) == 1
    op(**spec.make_inputs(SHAPE, "fp32", dev))
    assert op.last_source == "memory" and len(counting) == 1
    with pytest.warns(RuntimeWarning, match="could not cache"):
        result = op.tune(**spec.make_inputs(SHAPE, "fp32", dev))
    assert result.best is not None and blocked.read_text() == ""


def test_corrupt_disk_cache_file_is_a_miss_with_a_warning(spec, dev, tmp_path):
    cache = DiskCache(tmp_path)
    p = cache.put("rmsnorm", "abc", Config({"BLOCK_N": 256}))
    p.write_text("{ torn")
    with pytest.warns(RuntimeWarning, match="unreadable"):
        assert cache.get("rmsnorm", "abc") is None
    p.write_text(json.dumps({"config": {"BLOCK_N": "x"}}))
    with pytest.warns(RuntimeWarning):
        assert cache.get("rmsnorm", "abc") is None


def test_all_configs_failing_raises_a_clear_error(dev, tmp_path):
    from tests.conftest import PLUGINS

    toy = get_kernel("toy", [PLUGINS])
    import dataclasses

    broken = dataclasses.replace(toy, configs=lambda *a: [Config({"BLOCK": 64, "MODE": 1}, num_warps=1)],
                                 default=lambda *a: Config({"BLOCK": 64, "MODE": 2}, num_warps=1))
    op = TunedKernel(broken, device=dev, cache_dir=tmp_path, autotune=True)
    with pytest.raises(NoValidConfig, match="none of 2 configs passed"):
        op(**toy.make_inputs({"N": 64}, "fp32", dev))
    assert list(tmp_path.rglob("*.json")) == []  # nothing cached


def test_tuned_by_name_and_unknown_name(dev):
    assert tuned("rmsnorm").spec.name == "rmsnorm"
    with pytest.raises(LookupError, match="Did you mean 'rmsnorm'"):
        tuned("rmsnrom")


def test_dtype_comes_from_x_whatever_the_keyword_order(spec, dev, tmp_path):
    asked = []
    recording = dataclasses.replace(spec, default=lambda s, d, v: (asked.append(d), spec.default(s, d, v))[1])
    op = TunedKernel(recording, device=dev, cache_dir=tmp_path)
    x = torch.randn(4, 64, dtype=torch.bfloat16)
    op.config_for({"weight": torch.randn(64), "x": x, "out": torch.empty_like(x)})
    assert asked == ["bf16"]  # from x, though the fp32 weight came first
    op.config_for({"x": x, "weight": torch.randn(64, dtype=torch.bfloat16), "out": torch.empty_like(x)})
    assert op.last_source == "default" and asked == ["bf16", "bf16"]  # fp32 weight was another specialisation


def test_bad_call_inputs_are_one_clear_message(spec, dev, tmp_path):
    op = TunedKernel(spec, device=dev, cache_dir=tmp_path)
    with pytest.raises(ValueError, match=r"cannot read the shape from inputs \(weight\).*KeyError: 'x'"):
        op(weight=torch.randn(8))
    with pytest.raises(ValueError, match="missing input 'weight'"):
        op(x=torch.randn(4, 8))
    with pytest.raises(ValueError, match="no floating-point tensor"):
        TunedKernel(dataclasses.replace(spec, dtype_from=""), device=dev, cache_dir=tmp_path)(x=torch.ones(4, 8,
                                                                                                 dtype=torch.int32))
    # an empty tensor: said as such, not as a misnamed input
    with pytest.raises(ValueError, match=r"cannot read the shape from inputs \(x, weight\): x is empty \(shape "
                                         r"\(4, 0\)\); every axis must be >= 1$"):
        op(x=torch.randn(4, 0), weight=torch.randn(0))


@pytest.mark.parametrize("eps", [None, "1e-5"])
def test_a_scalar_input_that_is_not_a_number_is_named_when_the_launch_fails(spec, dev, tmp_path, eps):
    """eps=None or a string reaches the kernel's launch, which fails inside Triton ("'NoneType' object has no attribute
    'type'"): the error names the input, and the caller's valid call still works after it."""
    op = TunedKernel(spec, device=dev, cache_dir=tmp_path)
    x, w = torch.randn(4, 64), torch.randn(64)
    with pytest.raises(ValueError, match=rf"rmsnorm: the launch failed \(.*\) with inputs that are neither tensors "
                                         rf"nor numbers: eps={re.escape(repr(eps))}; a scalar input takes a number"):
        op(x=x, weight=w, eps=eps)
    got = op(x=x, weight=w, eps=1e-5)
    want = torch.nn.functional.rms_norm(x.double(), (64,), w.double(), eps=1e-5)
    assert torch.allclose(got.double(), want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("kernel,inputs", [
    ("rmsnorm", lambda: {"x": torch.randn(8, 64), "weight": torch.randn(64)}),
    ("softmax", lambda: {"x": torch.randn(8, 64)}),
    ("matmul", lambda: {"a": torch.randn(4, 64, dtype=torch.float16), "w": torch.randn(32, 64, dtype=torch.float16)}),
])
def test_an_out_of_another_shape_is_refused_before_anything_is_written(kernel, inputs, dev, tmp_path):
    """A smaller out would be written past its end (the interpreter crashed the process on it; a GPU corrupts
    memory), a larger one left partly unwritten: both are one clear message, the buffer untouched; the right shape
    gets the kernel's result, equal to the reference."""
    from flytune_nb.errors import FlytuneError

    spec = get_kernel(kernel)
    op = TunedKernel(spec, device=dev, cache_dir=tmp_path)
    with torch.device(dev.torch_device):  # a GPU's kernels take GPU tensors
        args = inputs()
        right = spec.reference(args)
        for rows in (right.shape[0] // 2, right.shape[0] * 2):
            out = torch.full((rows, right.shape[1]), 7.0, dtype=next(iter(args.values())).dtype)
            with pytest.raises(FlytuneError, match=rf"out has shape \({rows}, {right.shape[1]}\), but the kernel "
                                                   rf"writes \({right.shape[0]}, {right.shape[1]}\)"):
                op(**args, out=out)
            assert (out == 7.0).all()
        out = torch.empty(tuple(right.shape), dtype=next(iter(args.values())).dtype)
        got = op(**args, out=out)
        assert got.data_ptr() == out.data_ptr()
        assert compare(out, right, spec.tol("fp16")).ok


def test_tuned_of_something_that_is_not_a_kernel_is_one_message():
    from flytune_nb.errors import FlytuneError

    for thing in (42, None):
        with pytest.raises(FlytuneError, match="takes a kernel's name or its KernelSpec"):
            tuned(thing)


def test_a_kernel_wrappers_own_argument_check_is_a_flytune_error(spec, dev, tmp_path):
    from flytune_nb.errors import FlytuneError

    with pytest.raises(FlytuneError, match=r"rmsnorm: weight must have shape \(64,\), got \(32,\)"):
        TunedKernel(spec, device=dev, cache_dir=tmp_path)(x=torch.randn(4, 64), weight=torch.randn(32))


def test_autotune_asked_later_in_the_session_searches_past_a_remembered_default(spec, dev, tmp_path, monkeypatch,
                                                                               counting):
    op = TunedKernel(spec, device=dev, cache_dir=tmp_path, timer=CpuTimer(reps=1, warmup=0))
    op(**spec.make_inputs(SHAPE, "fp32", dev))
    assert op.last_source == "default"
    monkeypatch.setenv("FLYTUNE_AUTOTUNE", "1")
    op(**spec.make_inputs(SHAPE, "fp32", dev))
    assert op.last_source == "search" and len(counting) == 1


def test_transposed_inputs_run_correctly(spec, dev):
    with torch.device(dev.torch_device):  # a GPU's kernels take GPU tensors
        x = torch.randn(3, 2, 64).transpose(0, 1)  # last dim contiguous, leading dims permuted
        w = torch.randn(64)
        out = spec.run({"x": x, "weight": w}, spec.default({"M": 6, "N": 64}, "fp32", dev))
        ref = spec.reference({"x": x, "weight": w})
        assert out.shape == x.shape and torch.allclose(out.double(), ref, atol=1e-5)


class _LuckyTimer:
    """Every config takes 1 ms, but the search's second timing (its first config after the default) comes out at
    0.5 ms: one lucky measurement, as a noisy GPU gives one config in a pass."""

    def __init__(self):
        self.calls = 0

    def measure(self, fn, setup=None):
        from flytune_nb.measure.timer import summarise

        if setup:
            setup()
        fn()
        self.calls += 1
        return summarise([0.5 if self.calls == 2 else 1.0] * 3, "wall")


@pytest.mark.parametrize("selection", ["auto", None])
def test_a_tuned_search_keeps_the_default_over_a_lucky_timing_unless_the_stage_is_off(spec, dev, tmp_path, selection):
    op = TunedKernel(spec, device=dev, cache_dir=tmp_path, timer=_LuckyTimer(), selection=selection)
    result = op.tune(**spec.make_inputs(SHAPE, "fp32", dev))
    lucky = result.trials[1].config
    assert result.best.config == lucky != result.default and result.best.p50 == 0.5
    cached = json.loads(next(tmp_path.rglob("*.json")).read_text())
    if selection is None:  # the fastest of one pass, as triton.autotune keeps
        assert result.selection is None and op.config_for(spec.make_inputs(SHAPE, "fp32", dev)) == lucky
        assert cached["config"] == lucky.to_dict() and "selection" not in cached
        return
    # re-timed against the default, the lucky config takes the same time: the default is kept
    assert result.selection.contenders == [result.default, lucky] and result.selection.chose_default
    assert op.config_for(spec.make_inputs(SHAPE, "fp32", dev)) == result.default and op.last_source == "memory"
    assert cached["config"] == result.default.to_dict()
    assert cached["selection"]["winner"] == "default" and cached["p50_ms"] == cached["default_p50_ms"] == 1.0


class _EvenTimer:
    """Every config takes 1 ms: no candidate beats the default beyond the tie band."""

    def measure(self, fn, setup=None):
        from flytune_nb.measure.timer import summarise

        if setup:
            setup()
        fn()
        return summarise([1.0] * 3, "wall")


def test_a_default_that_failed_once_in_the_search_and_won_the_rounds_is_what_is_served(spec, dev, tmp_path):
    """The default's first launch fails (a flaky failure), every re-timed round of it passes, and no candidate beats
    it: the selection keeps the default, so the default is served and cached, as an export of the same decision
    writes it; serving the search's fastest instead would contradict the cached record of the decision."""
    default = spec.default(SHAPE, "fp32", dev)
    failed_once = []

    def run(inputs, config):
        if config == default and not failed_once:
            failed_once.append(True)
            raise RuntimeError("flaky launch")
        return spec.run(inputs, config)

    flaky = dataclasses.replace(spec, run=run)
    op = TunedKernel(flaky, device=dev, cache_dir=tmp_path, timer=_EvenTimer(), selection={"top": 1, "rounds": 3})
    inputs = flaky.make_inputs(SHAPE, "fp32", dev)
    result = op.tune(**inputs)
    assert not result.default_trial.ok and result.selection.chose_default and not result.selection.failed
    assert result.pick.config == default
    assert op.config_for(inputs) == default
    cached = json.loads(next(tmp_path.rglob("*.json")).read_text())
    assert cached["config"] == default.to_dict() and cached["selection"]["winner"] == "default"
    assert cached["p50_ms"] == cached["default_p50_ms"] == 1.0


# -- the names of a call's inputs -------------------------------------------------------------------------------------
@pytest.mark.parametrize("kernel", ["rmsnorm", "fused_add_rmsnorm"])
@pytest.mark.parametrize("typo,meant", [("epsilon", "eps"), ("output", "out")])
def test_a_misspelled_optional_input_is_refused_before_anything_is_written(kernel, typo, meant, dev, tmp_path):
    """epsilon= for eps ran the default eps, output= for out wrote a new tensor and left the caller's buffer unwritten:
    silent wrong results. Refused before the launch, naming the input meant: fused_add_rmsnorm's residual, written
    in place by a launch, is as it was, so the corrected retry adds x to it once."""
    from flytune_nb.errors import UsageError

    spec = get_kernel(kernel)
    op = TunedKernel(spec, device=dev, cache_dir=tmp_path)
    inputs = spec.make_inputs(SHAPE, "fp32", dev)
    buf = inputs.pop("out").fill_(7.0)
    before = {k: v.clone() for k, v in inputs.items()}
    for call in (lambda extra: op(**inputs, **extra), lambda extra: op.config_for({**inputs, **extra})):
        with pytest.raises(UsageError, match=rf"^{kernel}: no input named '{typo}' \(did you mean '{meant}'\?\); "
                                             rf"it reads: eps, out, (residual, )?weight, x$"):
            call({typo: 1e-2 if typo == "epsilon" else buf})
        assert all(torch.equal(inputs[k], before[k]) for k in inputs) and (buf == 7.0).all()
    assert op._memory == {}  # nothing remembered: the same call is checked again


@pytest.mark.parametrize("kernel", ["rmsnorm", "fused_add_rmsnorm"])
def test_a_call_with_every_optional_input_uses_them(kernel, dev, tmp_path):
    """eps and out, spelled right: the result is the reference's at that eps (0.5 moves every output by ~20% from the
    default's), written into the caller's out."""
    spec = get_kernel(kernel)
    op = TunedKernel(spec, device=dev, cache_dir=tmp_path)
    inputs = {**spec.make_inputs(SHAPE, "fp32", dev), "eps": 0.5}
    expected = spec.reference(inputs)  # from the inputs before the launch (the residual too)
    expected = expected if isinstance(expected, tuple) else (expected,)
    got = op(**inputs)
    got = got if isinstance(got, tuple) else (got,)
    assert got[0].data_ptr() == inputs["out"].data_ptr()
    for g, e in zip(got, expected):
        assert compare(g, e, spec.tol("fp32")).ok


def test_a_memory_hit_does_not_check_the_names_again(spec, dev, tmp_path, monkeypatch):
    from flytune_nb.errors import UsageError

    checked = []
    real = tuner_mod.check_names
    monkeypatch.setattr(tuner_mod, "check_names", lambda s, inputs: (checked.append(sorted(inputs)), real(s, inputs)))
    op = TunedKernel(spec, device=dev, cache_dir=tmp_path)
    inputs = spec.make_inputs(SHAPE, "fp32", dev)
    op(**inputs)
    op(**inputs)
    assert op.last_source == "memory" and checked == [["out", "weight", "x"]]
    # other names are another memory key, whatever their value (None is no tensor and no number): checked
    with pytest.raises(UsageError, match="no input named 'outptu' \\(did you mean 'out'\\?\\)"):
        op(**inputs, outptu=None)
    assert len(checked) == 2


def test_tune_refuses_a_misspelled_input_before_searching(spec, dev, tmp_path, counting):
    from flytune_nb.errors import UsageError

    op = TunedKernel(spec, device=dev, cache_dir=tmp_path)
    with pytest.raises(UsageError, match="no input named 'epsilon' \\(did you mean 'eps'\\?\\)"):
        op.tune(**spec.make_inputs(SHAPE, "fp32", dev), epsilon=1e-5)
    assert counting == [] and list(tmp_path.rglob("*.json")) == []


def _scale(x, out=None, factor=2.0):
    return torch.mul(x, factor, out=out)


def _generic_spec(**changes):
    """A kernel whose run passes its inputs on whole (``_scale(**inputs)``), its reference reading x by name."""
    from flytune_nb.core.spec import KernelSpec

    fields = dict(name="generic_scale", axes=("N",), batch_axis="N", dtypes=("fp32",),
                  make_inputs=lambda s, d, v: {"x": torch.randn(s["N"])},
                  run=lambda inputs, config: _scale(**inputs),
                  reference=lambda inputs: inputs["x"].double() * 2.0,
                  configs=lambda s, d, v: [Config({"B": 1})], default=lambda s, d, v: Config({"B": 1}),
                  shape_of=lambda inputs: {"N": inputs["x"].numel()}, outputs=("out",))
    fields.update(changes)
    return KernelSpec(**fields)


def test_a_kernel_that_passes_its_inputs_on_whole_is_not_refused(dev, tmp_path):
    """Its run may read any name (here factor, which no literal names, while x is): nothing can be said about the
    names, so none is refused."""
    op = TunedKernel(_generic_spec(), device=dev, cache_dir=tmp_path)
    x = torch.randn(8)
    assert torch.equal(op(x=x, factor=3.0), x * 3.0)


def test_declared_input_names_are_what_a_call_may_pass(dev, tmp_path):
    from flytune_nb.core.spec import SpecError
    from flytune_nb.errors import UsageError

    op = TunedKernel(_generic_spec(input_names=("x", "out", "factor")), device=dev, cache_dir=tmp_path)
    x = torch.randn(8)
    assert torch.equal(op(x=x, factor=3.0), x * 3.0)
    with pytest.raises(UsageError, match=r"no input named 'factr' \(did you mean 'factor'\?\); it reads: factor, out, "
                                         r"x$"):
        op(x=x, factr=3.0)
    with pytest.raises(SpecError, match=r"\['out'\] missing from input_names"):
        _generic_spec(input_names=("x", "factor"))


def test_autotune_env_set_to_a_word_for_off_never_searches(spec, dev, tmp_path, monkeypatch):
    """FLYTUNE_AUTOTUNE=false (or no, off) is how a serving process says "do not search": read as on, every new
    shape would start a search of the kernel's whole space on the serving path. A value that is neither is said in
    one warning and searches nothing."""
    import warnings

    def no_search(*a, **k):
        raise AssertionError("searched")

    monkeypatch.setattr(tuner_mod, "search", no_search)
    inputs = spec.make_inputs(SHAPE, "fp32", dev)
    for off in ("false", "No", " off ", "0", ""):
        monkeypatch.setenv("FLYTUNE_AUTOTUNE", off)
        op = TunedKernel(spec, device=dev, cache_dir=tmp_path)
        op.config_for(inputs)
        assert op.last_source == "default", off
    for on in ("1", "true", "YES", "on"):
        monkeypatch.setenv("FLYTUNE_AUTOTUNE", on)
        assert TunedKernel(spec, device=dev, cache_dir=tmp_path)._want_search(), on
    monkeypatch.setenv("FLYTUNE_AUTOTUNE", "maybe")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        op = TunedKernel(spec, device=dev, cache_dir=tmp_path)
        op.config_for(inputs)
    assert op.last_source == "default"
    assert [str(w.message) for w in caught] == [
        "FLYTUNE_AUTOTUNE='maybe' is neither on (1, true, yes, on) nor off (0, false, no, off); not searching"]
