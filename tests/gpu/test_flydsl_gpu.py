"""The FlyDSL kernels on an AMD GPU (gfx942 / gfx950 with ROCm 7): correctness against torch, the in-place residual,
the sweep and the offline configs for real. Skipped everywhere else, the NVIDIA device machine included (FlyDSL
launches through HIP only). Run on an AMD machine: python -m pytest -m gpu tests/gpu/test_flydsl_gpu.py"""
import dataclasses
import json

import pytest
import torch

from flytune_nb.core.registry import get_kernel
from flytune_nb.measure.timer import GpuTimer
from flytune_nb.measure.trial import evaluate

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not getattr(torch.version, "hip", None),
                                                  reason="FlyDSL kernels launch on AMD GPUs (ROCm) only")]
KERNELS = ["flydsl_rmsnorm", "flydsl_fused_add_rmsnorm"]


@pytest.fixture(autouse=True)
def _flydsl(flydsl_installed):
    return flydsl_installed


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("N", [4096, 5120])  # 5120: a ragged last tile for most BLOCK_THREADS
def test_every_config_of_the_space_is_right_on_the_gpu(kernel, N, dev):
    spec = get_kernel(kernel)
    shape = {"M": 257, "N": N}
    timer = GpuTimer(dev, warmup_ms=1, rep_ms=1, min_reps=3)
    failures = [(str(c), t.status, t.reason) for c in spec.configs(shape, "bf16", dev)
                for t in [evaluate(spec, shape, "bf16", c, dev, timer)] if not t.ok]
    assert failures == []


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("N", [64, 100, 1024, 8192, 32768])
def test_the_default_is_right_for_every_dtype_and_width(kernel, dtype, N, dev):
    spec = get_kernel(kernel)
    shape = {"M": 33, "N": N}
    t = evaluate(spec, shape, dtype, spec.default(shape, dtype, dev), dev, GpuTimer(dev, warmup_ms=1, rep_ms=1,
                                                                                     min_reps=3))
    assert t.ok, t.reason


def test_the_residual_is_updated_once_and_strided_rows_are_read_right(dev):
    spec = get_kernel("flydsl_fused_add_rmsnorm")
    x = torch.randn(16, 8192, device="cuda", dtype=torch.bfloat16)[:, :4096]  # row stride 8192: one compile for both
    r = torch.randn(16, 4096, device="cuda", dtype=torch.bfloat16)
    w = (1 + 0.5 * torch.randn(4096, device="cuda")).to(torch.bfloat16)
    want_y, want_r = spec.reference({"x": x, "residual": r.clone(), "weight": w})
    y, r_out = spec.run({"x": x, "residual": r, "weight": w, "out": torch.empty_like(r)},
                        spec.default({"M": 16, "N": 4096}, "bf16", dev))
    torch.cuda.synchronize()
    assert r_out is r and torch.equal(r.double(), want_r)  # rounded sum, stored exactly once
    assert ((y.double() - want_y).norm() / want_y.norm()).item() < 1.6e-2


def test_a_sweep_measures_and_its_export_is_served_by_flydsl_with_no_search(tmp_path, dev, monkeypatch):
    from flytune_nb.artifacts.export import export
    from flytune_nb.backends.flydsl import autotuner
    from flytune_nb.engine.store import Store
    from flytune_nb.engine.sweep import Sweep

    db = tmp_path / "fly.db"
    results = Sweep("flydsl_rmsnorm", "M=1,256 N=4096", ["bf16"], db=db, strategy="random", budget=6,
                    baselines=("torch_eager",), timer={"rep_ms": 20}).run()
    assert all(r.best is not None and r.best.p50 > 0 for r in results)
    written = export(Store(db), tmp_path / "exports")
    fly = [p for p in written if p.parent.name == "flydsl_autotune"]
    assert len(fly) == 2
    monkeypatch.setenv("FLYDSL_AUTOTUNE_CONFIG_DIR", str(tmp_path / "exports" / "flydsl_autotune"))
    monkeypatch.delenv("FLYDSL_AUTOTUNE", raising=False)
    from flytune_nb._compat.flydsl import device_descriptor

    prov = json.loads((tmp_path / "exports" / "flydsl_autotune" / "provenance.json").read_text())
    ident = json.loads(fly[0].read_text())["identity"]["device"]
    assert ident == device_descriptor()  # the identity recorded at sweep time is FlyDSL's own for this GPU
    spec = get_kernel("flydsl_rmsnorm")
    for r in results:
        M = r.shape["M"]
        tuner = autotuner(spec)
        tuner._do_bench = lambda *a, **k: pytest.fail("searched while serving")
        x = torch.randn(M, 4096, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
        got = tuner.resolve_config(x, w, torch.empty_like(x), M, 4096, "bf16")
        served = {k: v for k, v in {**got.all_kwargs(), **got.compiler_opts()}.items() if v is not None}
        assert served == r.best.config.to_dict()
        out = torch.empty_like(x)
        tuner(x, w, out, M, 4096, "bf16")  # FlyDSL's own launch with the served config
        torch.cuda.synchronize()
        ref = spec.reference({"x": x, "weight": w})
        assert ((out.double() - ref).norm() / ref.norm()).item() < 1.6e-2
    assert {p["shape"]["M"] for p in prov.values()} == {1, 256}
    assert dataclasses.asdict(dev)["raw_name"] == ident["name"]
