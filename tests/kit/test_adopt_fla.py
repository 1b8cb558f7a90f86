"""A real third-party library: flash-linear-attention's autotuned kernels (fla-core, the `fla` extra), adopted from
examples/fla_kernels.py, swept on the CPU path, then served to fla's own Python functions with zero benchmarking."""
import os
import warnings

import pytest
import torch

pytest.importorskip("fla", reason="needs fla-core: pip install 'flytune_nb[fla]'")

import flytune_nb  # noqa: E402
from flytune_nb import Sweep  # noqa: E402
from flytune_nb._compat import triton as tc  # noqa: E402
from flytune_nb.artifacts.export import export  # noqa: E402
from flytune_nb.core.registry import get_kernel  # noqa: E402
from flytune_nb.engine.store import Store  # noqa: E402
from flytune_nb.serve.prime import CoarseKeyWarning  # noqa: E402
from tests.conftest import REPO, wall_clock  # noqa: E402

FLA = os.path.join(REPO, "examples", "fla_kernels.py")


def load(attr):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fla warns that it found no GPU
        spec = get_kernel(f"{FLA}:{attr}")
    spec.extra["adopted"].autotuner.cache.clear()
    return spec


def relerr(got, want):
    return ((got.double() - want.double()).norm() / want.double().norm()).item()


def test_the_decorators_are_read_as_fla_wrote_them():
    l2, conv, rms = load("L2NORM"), load("CONV_UPDATE"), load("RMSNORM")
    assert type(l2.extra["adopted"].autotuner).__name__ == "CachedAutotuner"
    assert l2.extra["adopted"].fields["keys"] == ["D", "NB"] and l2.outputs == ("y", "rstd")
    assert l2.extra["coarse_axes"] == ("T",)  # NB buckets T by 65536: every T below shares an entry
    assert conv.mutates == ("cache",) and conv.outputs == ("y",)  # restore_value=['cache']
    assert conv.extra["adopted"].heuristics == ["USE_INITIAL_STATE", "HAS_WEIGHT", "HAS_BIAS", "HAS_RESIDUAL"]
    assert conv.extra["coarse_axes"] == ("N",)
    assert rms.extra["adopted"].fields["keys"] == ["D", "NB", "HAS_RESIDUAL", "STORE_RESIDUAL_OUT", "IS_RMS_NORM"]


def test_l2norm_swept_in_workers_then_served_to_fla_with_zero_benchmarks(tmp_path):
    from fla.modules.norm.l2norm import l2norm_fwd

    spec = load("L2NORM")
    store = Store(tmp_path / "r.db")
    (r,) = Sweep(spec, "T=40 D=32", ["fp32"], db=store, budget=6, strategy="random").run()  # worker processes
    assert r.best.ok and all(t.ok for t in r.trials) and len(r.trials) >= 6
    export(store, tmp_path / "exports")
    report = flytune_nb.prime(spec, tmp_path / "exports")
    assert [k.key for k in report.keys] == [(32, 1, "torch.float32", "torch.float32", "torch.float32")]
    ad = spec.extra["adopted"]
    at = ad.autotuner
    x = torch.randn(40, 32)
    with tc.count_benchmarks(at, wall_clock) as count:
        y, rstd = l2norm_fwd(x)  # fla's own function, unmodified
    assert count.calls == 0 and at.best_config is ad.to_triton(r.pick.config)  # the exported (selected) winner
    assert relerr(y, x / x.norm(dim=-1, keepdim=True)) < 1e-5
    with tc.count_benchmarks(at, wall_clock) as count:  # D=64 has no tuned entry: fla's own decorator tunes it
        y, _ = l2norm_fwd(torch.randn(24, 64))
    assert count.calls == len(ad.fields["configs"]) == 25


def test_conv_update_in_place_swept_and_served_to_fla(tmp_path):
    from fla.modules.causal_conv1d.ops import causal_conv1d_update

    spec = load("CONV_UPDATE")
    store = Store(tmp_path / "r.db")
    results = Sweep(spec, "N=1,3 D=48 W=4", ["fp32"], db=store, budget=4, strategy="random", isolate=False).run()
    assert all(r.best.ok and all(t.ok for t in r.trials) for r in results)  # cache restored between timed runs
    export(store, tmp_path / "exports")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CoarseKeyWarning)  # N=1 and N=3 share the key (D, W): one winner serves
        report = flytune_nb.prime(spec, tmp_path / "exports")
    (pk,) = report.keys
    assert pk.key == (48, 4) + ("torch.float32",) * 4 and len(pk.shapes) == 2
    ad = spec.extra["adopted"]
    x, cache, w = torch.randn(3, 48), torch.randn(3, 48, 4), torch.randn(48, 4)
    new = torch.cat([cache[..., 1:], x[..., None]], -1)
    want = (new * w).sum(-1)
    with tc.count_benchmarks(ad.autotuner, wall_clock) as count:
        y, cache_out = causal_conv1d_update(x, cache, weight=w, activation="silu")
    assert count.calls == 0 and ad.autotuner.best_config is ad.to_triton(pk.config)
    assert relerr(y, want * torch.sigmoid(want)) < 1e-5 and relerr(cache_out, new) < 1e-6
