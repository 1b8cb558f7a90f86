"""fused_moe: alignment, every tile form through the interpreter, a sharp reference, SGLang-style artifact names
(E and N only, no dtype part), and export -> lookup -> check with the full shape read back from provenance."""
import importlib
import importlib.util
import json
from pathlib import Path

import pytest
import torch

from flytune_nb.artifacts.export import export
from flytune_nb.artifacts.files import ArtifactError, file_name
from flytune_nb.artifacts.gate import check
from flytune_nb.core.device import from_properties
from flytune_nb.core.registry import get_kernel
from flytune_nb.engine.store import Store
from flytune_nb.engine.sweep import Sweep
from flytune_nb.kit.spaces import next_pow2, tile_fits
from flytune_nb.measure.correctness import compare
from flytune_nb.serve.lookup import LOOKUP, lookup
from tests.conftest import H200_PROPS as H200
from tests.conftest import MI300X_PROPS as MI300X
from tests.conftest import REPO

SIM = {"H200": from_properties(H200, hip=False), "MI300X": from_properties(MI300X, hip=True)}
TINY = {"M": 13, "E": 4, "N": 40, "K": 64, "topk": 2}


@pytest.fixture
def spec():
    return get_kernel("fused_moe")


@pytest.fixture
def kmod(spec):
    return importlib.import_module(spec.run.__module__ + ".kernel")


@pytest.mark.parametrize("block_m", [16, 64])
def test_align_groups_tokens_by_expert_in_padded_runs(kmod, block_m):
    E, M, topk = 5, 37, 2
    ids = torch.stack([torch.randperm(E)[:topk] for _ in range(M)]).to(torch.int32)
    sorted_ids, expert_ids, n_post = kmod.moe_align(ids, E, block_m)
    n, flat, total = M * topk, ids.flatten(), int(n_post)
    counts = torch.bincount(flat.long(), minlength=E)
    assert total == int(((counts + block_m - 1) // block_m * block_m).sum()) and total % block_m == 0
    real = sorted_ids[:total][sorted_ids[:total] < n]
    assert sorted(real.tolist()) == list(range(n))  # every (token, slot) exactly once
    assert (sorted_ids[total:] == n).all()  # past the padded total: padding only
    for b in range(total // block_m):  # every row tile belongs to one expert, the one expert_ids names
        tile = sorted_ids[b * block_m:(b + 1) * block_m]
        tile = tile[tile < n].long()
        assert (flat[tile] == expert_ids[b]).all()


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("shape", [{"M": 1, "E": 4, "N": 32, "K": 48, "topk": 2},  # decode, ragged K
                                   TINY,
                                   {"M": 33, "E": 3, "N": 64, "K": 64, "topk": 3}])
def test_every_tile_form_is_correct(spec, shape, dtype, dev, cpu_timer):
    from flytune_nb.measure.trial import evaluate

    space = spec.configs(shape, dtype, dev)
    assert spec.default(shape, dtype, dev) in space
    tiles = {(c["BLOCK_SIZE_M"], c["BLOCK_SIZE_N"], c["BLOCK_SIZE_K"], c["GROUP_SIZE_M"]): c for c in space}
    for cfg in tiles.values():
        t = evaluate(spec, shape, dtype, cfg, dev, cpu_timer)
        assert t.ok, (str(cfg), t.status, t.reason)


def test_reference_catches_routing_bugs(spec, dev):
    inputs = spec.make_inputs(TINY, "fp16", dev)
    ref = spec.reference(inputs)
    tol = spec.tol("fp16")
    unweighted = spec.reference({**inputs, "topk_weights": torch.ones_like(inputs["topk_weights"])})
    shifted = spec.reference({**inputs, "topk_ids": (inputs["topk_ids"] + 1) % TINY["E"]})
    assert not compare(unweighted, ref, tol).ok and not compare(shifted, ref, tol).ok
    assert compare(spec.run(inputs, spec.default(TINY, "fp16", dev)), ref, tol, spec.element_tol("fp16")).ok


@pytest.mark.parametrize("device", sorted(SIM))
@pytest.mark.parametrize("M", [1, 16, 64, 512, 4096])
@pytest.mark.parametrize("model", [(8, 14336, 4096, 2), (128, 768, 2048, 8), (64, 1408, 2048, 6)])
def test_space_follows_sglang_and_is_pruned(spec, device, M, model):
    dev = SIM[device]
    E, N, K, topk = model
    shape = {"M": M, "E": E, "N": N, "K": K, "topk": topk}
    space = spec.configs(shape, "bf16", dev)
    assert space and len(space) == len(set(space)) and spec.default(shape, "bf16", dev) in space
    for c in space:
        assert set(c.to_dict()) == {"BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps",
                                    "num_stages"}  # SGLang's knobs, nothing else
        bm = c["BLOCK_SIZE_M"]
        assert tile_fits(bm, c["BLOCK_SIZE_N"], c["BLOCK_SIZE_K"], c.num_warps, c.num_stages, "bf16", dev)
        assert bm <= max(32 if device == "MI300X" else 16, next_pow2(M * topk))
        assert c["GROUP_SIZE_M"] in ((1, 4, 8, 16, 32) if device == "MI300X" else (1, 16, 32, 64))
    if M == 4096 and device == "H200":
        assert len(space) >= 500  # big enough for the surrogate benchmark


def test_file_names_follow_sglangs_moe_contract(spec):
    assert file_name(spec, {"M": 7, "E": 8, "N": 14336, "K": 4096, "topk": 2}, "NVIDIA_H200", "bf16") == \
        "E=8,N=14336,device_name=NVIDIA_H200.json"


def test_export_lookup_and_check_round_trip(spec, tmp_path, dev):
    db = tmp_path / "moe.db"
    Sweep(spec, "M=1,4 E=4 N=32 K=48 topk=2", ["fp16"], db=db, isolate=False, baselines=(), strategy="random",
          budget=3).run()
    out = tmp_path / "exports"
    [path] = export(Store(db), out)
    assert path.name == f"E=4,N=32,device_name={dev.name}.json"
    table = json.loads(path.read_text())
    assert list(table) == ["1", "4"]
    prov = json.loads((path.parent / "provenance.json").read_text())[path.name]
    assert prov["1"]["shape"] == {"E": 4, "N": 32, "K": 48, "topk": 2} and prov["1"]["dtype"] == "fp16"
    LOOKUP.clear()
    try:
        cfg, source = lookup(spec, {"M": 3, "E": 4, "N": 32, "K": 48, "topk": 2}, "fp16", device=dev, directory=out)
    finally:
        LOOKUP.clear()
    assert source == "artifact" and cfg.to_dict() == table["4"]  # nearest batch size: 4
    seen = []

    def measure(spec_, shape, dtype, config):
        seen.append((shape, dtype))
        from flytune_nb.measure.trial import Trial
        return Trial(spec_.name, shape, dtype, config, "ok", p20=1.0, p50=1.0, p80=1.0)

    rows = check(out, device=dev, measure=measure)
    assert [r.status for r in rows] == ["OK", "OK"]  # 1.0 ms now vs the interpreter's slower exported p50
    assert seen[0] == ({"M": 1, "E": 4, "N": 32, "K": 48, "topk": 2}, "fp16")  # K and topk from the provenance


def test_two_models_that_would_share_a_file_are_refused(spec, tmp_path):
    db = tmp_path / "moe.db"
    for K in (48, 64):  # same E and N, different hidden size: one SGLang file name
        Sweep(spec, f"M=1 E=4 N=32 K={K} topk=2", ["fp16"], db=db, isolate=False, baselines=(), strategy="random",
              budget=2).run()
    with pytest.raises(ArtifactError, match="cannot tell them apart"):
        export(Store(db), tmp_path / "exports")
    assert not (tmp_path / "exports").exists()



def test_bf16_and_fp16_of_one_shape_are_exported_one_dtype_at_a_time(spec, tmp_path, capsys):
    """SGLang's MoE file name has no dtype part for bf16 and fp16, so a store holding both cannot export them into
    one file. The refusal names the way out that works (--dtype; --kernel cannot part them), and --dtype exports
    each."""
    from flytune_nb.ui.cli import main

    db = tmp_path / "moe.db"
    Sweep(spec, "M=1 E=4 N=32 K=48 topk=2", ["bf16", "fp16"], db=db, isolate=False, baselines=(), strategy="random",
          budget=1).run()
    with pytest.raises(ArtifactError, match="cannot tell them apart") as refused:
        export(Store(db), tmp_path / "both")
    assert "--dtype bf16" in str(refused.value) and "--kernel" not in str(refused.value)
    assert not (tmp_path / "both").exists()
    for dtype in ("bf16", "fp16"):
        out = tmp_path / dtype
        assert main(["export", "--db", str(db), "--out", str(out), "--dtype", dtype]) == 0
        (path,) = sorted(out.rglob("E=4,N=32,*.json"))
        prov = json.loads((path.parent / "provenance.json").read_text())[path.name]
        assert list(prov) == ["1"] and prov["1"]["dtype"] == dtype
    capsys.readouterr()


def test_bf16_and_fp16_at_different_batch_sizes_of_one_file_are_refused_not_mixed(spec, tmp_path):
    """bf16 swept at M=1 and fp16 at M=2 of one MoE shape: SGLang reads the one file for both dtypes, so a mixed file
    would serve fp16's M=2 config to a bf16 server and bf16's M=1 to an fp16 one, measured for neither. Refused with
    both batch sizes named; --dtype exports one dtype's entries."""
    db = tmp_path / "moe.db"
    for m, dtype in ((1, "bf16"), (2, "fp16")):
        Sweep(spec, f"M={m} E=4 N=32 K=48 topk=2", [dtype], db=db, isolate=False, baselines=(), strategy="random",
              budget=1).run()
    with pytest.raises(ArtifactError, match=r"batch size \d was measured for .* (bf16|fp16) and batch size \d for "
                                            r".*cannot tell them apart: export one dtype") as refused:
        export(Store(db), tmp_path / "mixed")
    assert "--dtype bf16" in str(refused.value) and "--dtype fp16" in str(refused.value)
    assert not (tmp_path / "mixed").exists()
    [path] = export(Store(db), tmp_path / "bf16", dtype="bf16")
    prov = json.loads((path.parent / "provenance.json").read_text())[path.name]
    assert {m: e["dtype"] for m, e in prov.items()} == {"1": "bf16"}


def test_a_second_model_exported_into_the_same_file_is_refused_not_merged(spec, tmp_path):
    """Following the advice above (one store per model) into the same config dir: the file already holds K=48's
    batch sizes; K=64's would be served for K=48's model, or replace them, so the export is refused and the file kept."""
    out = tmp_path / "exports"
    for K, M in ((48, "1,4"), (64, "4")):
        db = tmp_path / f"k{K}.db"
        Sweep(spec, f"M={M} E=4 N=32 K={K} topk=2", ["fp16"], db=db, isolate=False, baselines=(),
              strategy="random", budget=2).run()
        if K == 48:
            (path,) = export(Store(db), out)
            before = path.read_text(), (path.parent / "provenance.json").read_text()
        else:
            with pytest.raises(ArtifactError, match=r"holds batch size 1 tuned for \{'E': 4, 'K': 48, 'N': 32, "
                                                    r"'topk': 2\} fp16; this export is for \{'E': 4, 'K': 64"):
                export(Store(db), out)
    assert (path.read_text(), (path.parent / "provenance.json").read_text()) == before


def test_kernels_listing_and_the_workbench_use_the_example_shape(spec, capsys):
    from flytune_nb.ui.cli import main

    assert spec.example() == {"M": 64, "E": 8, "N": 14336, "K": 4096, "topk": 2}
    assert main(["kernels"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("fused_moe"))
    assert "E=8 N=14336 K=4096 topk=2" in line


def test_memory_check_counts_every_expert_not_the_traffic(spec):
    """At M=1 the traffic model reads 2 of 256 experts (0.66 GiB); the weights on the device are 21 GiB."""
    import dataclasses

    from flytune_nb.measure.memory import ShapeTooLarge, check_fits, footprint

    shape = {"M": 1, "E": 256, "N": 2048, "K": 7168, "topk": 8}
    h200 = SIM["H200"]
    assert footprint(spec, shape, "bf16", h200) == pytest.approx(21.0 * 2**30, rel=1e-3)
    assert 3 * spec.bytes(shape, "bf16") < 2 * 2**30  # 3x the traffic alone would let it through on a 40 GiB card
    with pytest.raises(ShapeTooLarge, match="needs ~63.0 GiB"):
        check_fits(spec, shape, "bf16", dataclasses.replace(h200, total_memory=40 * 2**30))
    check_fits(spec, shape, "bf16", h200)  # 141 GB H200: fits


def test_heuristic_regimes_follow_the_tokens_per_expert():
    """t = M * topk / E: below 4 the smallest row tile; 4 <= t <= 16 wider tiles (BM 32, 64 from t=12; BN 128),
    which the H200 Mixtral sweeps had 1.2-1.4x ahead of BM=16; compute-bound 128-row tiles on 8 warps above."""
    spec, dev = get_kernel("fused_moe"), SIM["H200"]
    mixtral = {"E": 8, "N": 14336, "K": 4096, "topk": 2}
    picks = {m: spec.default({**mixtral, "M": m}, "bf16", dev) for m in (8, 16, 48, 1024)}
    assert [(c["BLOCK_SIZE_M"], c["BLOCK_SIZE_N"]) for c in picks.values()] == [(16, 64), (32, 128), (64, 128),
                                                                                 (128, 128)]
    assert picks[1024].num_warps == 8


def test_routing_is_the_same_for_every_trial_of_a_shape(dev):
    """A fused_moe timing depends on how many experts the batch touches, so every trial of a shape must see one
    routing; the activations and weights stay fresh draws."""
    spec = get_kernel("fused_moe")
    a, b = (spec.make_inputs(TINY, "fp16", dev) for _ in range(2))
    assert torch.equal(a["topk_ids"], b["topk_ids"]) and torch.equal(a["topk_weights"], b["topk_weights"])
    assert not torch.equal(a["x"], b["x"]) and not torch.equal(a["w1"], b["w1"])
    other = spec.make_inputs({**TINY, "M": TINY["M"] + 1}, "fp16", dev)
    assert not torch.equal(other["topk_ids"][: TINY["M"]], a["topk_ids"])


@pytest.mark.skipif(not hasattr(torch, "_grouped_mm"), reason="torch._grouped_mm needs torch >= 2.8")
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_the_grouped_gemm_baseline_matches_the_reference(dtype, dev):
    """torch's grouped-GEMM MoE (the installed fused path benchmarks/moe_baselines.py times beside ours) computes the
    same MoE as the fp64 loop, ragged expert runs and all."""
    path = Path(REPO) / "benchmarks" / "moe_grouped.py"
    module_spec = importlib.util.spec_from_file_location("moe_grouped", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    grouped, spec = module.fused_moe_grouped, get_kernel("fused_moe")
    inputs = spec.make_inputs({"M": 37, "E": 8, "N": 64, "K": 128, "topk": 2}, dtype, dev)
    out = grouped(*(inputs[k] for k in ("x", "w1", "w2", "topk_weights", "topk_ids")))
    assert compare(out, spec.reference(inputs), spec.tol(dtype), spec.element_tol(dtype)).ok
