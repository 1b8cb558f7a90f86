"""SGLang's fused-MoE kernel on the GPU (skipped without one or without sglang): bf16 against the float64 loop on
both paths, fp8_w8a8 against the quantised float64 loop, the shipped H200 entries found and measured, the down GEMM,
and the precompile pool's compile-only path (SGLang's launcher compiles on meta inputs and launches nothing)."""
import dataclasses
import importlib

import pytest

pytest.importorskip("sglang")

from flytune_nb.core.registry import get_kernel  # noqa: E402
from flytune_nb.measure.correctness import compare  # noqa: E402
from flytune_nb.measure.timer import GpuTimer  # noqa: E402
from flytune_nb.measure.trial import evaluate  # noqa: E402
from flytune_nb.strategies.loop import search  # noqa: E402

pytestmark = pytest.mark.gpu
QWEN3 = {"E": 128, "N": 768, "K": 2048, "topk": 8}


@pytest.mark.parametrize("M", [1, 64, 1024])
def test_sglangs_kernel_is_correct_in_bf16_on_both_paths(M, dev):
    spec = get_kernel("sglang_fused_moe")
    km = importlib.import_module(spec.run.__module__)
    shape = {"M": M, **QWEN3}
    for cfg in (spec.default(shape, "bf16", dev), spec.configs(shape, "bf16", dev)[-1]):
        inputs = spec.make_inputs(shape, "bf16", dev)
        ref = spec.reference(inputs)
        for y in (spec.run(inputs, cfg), km.two_launches(inputs, km.launch_dict(cfg))):
            assert compare(y, ref, spec.tol("bf16"), spec.element_tol("bf16")).ok, (M, str(cfg))
    assert km.sglang().triton_utils.get_config() is None


def test_the_shipped_h200_entry_is_measured_beside_the_default(dev):
    spec = get_kernel("sglang_fused_moe")
    shape = {"M": 64, **QWEN3}
    if dev.name != "NVIDIA_H200":
        pytest.skip(f"SGLang's shipped files checked here are the H200's, not {dev.name}'s")
    assert set(spec.named(shape, "bf16", dev)) == {"SGLang shipped"}
    r = search(spec, shape, "bf16", dev, GpuTimer(dev, warmup_ms=1, rep_ms=5, min_reps=3), budget=4)
    assert r.named_trials["SGLang shipped"].ok and r.default_trial.ok and len(r.trials) == 4


def test_down_gemm_is_correct(dev):
    down = get_kernel("sglang_fused_moe_down")
    shape = {"M": 96, **QWEN3}
    timer = GpuTimer(dev, warmup_ms=1, rep_ms=2, min_reps=3)
    for cfg in (down.default(shape, "bf16", dev), down.configs(shape, "bf16", dev)[0]):
        t = evaluate(down, shape, "bf16", cfg, dev, timer)
        assert t.ok, (str(cfg), t.reason)


@pytest.mark.parametrize("kernel", ["sglang_fused_moe", "sglang_fused_moe_down"])
def test_precompile_compiles_on_meta_inputs(kernel, dev):
    from flytune_nb.backends.triton import current_target
    from flytune_nb.engine.tasks import _NO_META, compile_one

    spec = get_kernel(kernel)
    shape = {"M": 48, **QWEN3}
    cfg = spec.configs(shape, "bf16", dev)[3]
    status, _, _, _ = compile_one(kernel, (), shape, "bf16", cfg.to_dict(), device=dataclasses.asdict(dev),
                                  target=current_target())
    assert status == "ok"
    assert not any(case[0] == kernel for case in _NO_META)  # compiled on meta inputs, not on real ones


MIXTRAL = {"E": 8, "N": 14336, "K": 4096, "topk": 2}


@pytest.mark.parametrize("M", [1, 256])
def test_fp8_w8a8_is_correct_and_its_shipped_h200_entry_is_found(M, dev):
    """fp8_w8a8 per tensor on the GPU: bf16 activations quantised per tensor inside SGLang's launcher (ours where
    sgl_kernel is missing), float8 weights with a scale per expert, against the float64 loop that applies the same
    quantisation; SGLang ships a Mixtral fp8_w8a8 file for the H200."""
    spec = get_kernel("sglang_fused_moe")
    km = importlib.import_module(spec.run.__module__)
    shape = {"M": M, **MIXTRAL}
    picks = [spec.default(shape, "fp8", dev), spec.configs(shape, "fp8", dev)[-1]]
    if dev.name == "NVIDIA_H200":
        found = spec.extra["shipped_entry"](shape, dev, dtype="fp8")
        assert found and found[1].name == "E=8,N=14336,device_name=NVIDIA_H200,dtype=fp8_w8a8.json"
        picks.append(found[0])
    inputs = spec.make_inputs(shape, "fp8", dev)
    assert inputs["x"].dtype.is_floating_point and inputs["x"].element_size() == 2
    ref = spec.reference(inputs)
    for cfg in picks:
        for y in (spec.run(inputs, cfg), km.two_launches(inputs, km.launch_dict(cfg))):
            v = compare(y, ref, spec.tol("fp8"), spec.element_tol("fp8"))
            assert v.ok, (M, str(cfg), v.reason)
    down = get_kernel("sglang_fused_moe_down")
    t = evaluate(down, shape, "fp8", down.default(shape, "fp8", dev), dev, GpuTimer(dev, warmup_ms=1, rep_ms=2,
                                                                                    min_reps=3))
    assert t.ok, t.reason
