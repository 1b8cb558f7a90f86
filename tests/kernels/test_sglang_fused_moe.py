"""sglang_fused_moe / sglang_fused_moe_down: SGLang's own kernel under the interpreter (mostly fp16, the tighter
bound: bf16 carries the interpreter's round-toward-zero fp32 -> bf16 stores) against the float64 loop, its space and
default, the override never left behind, the shipped entry measured beside the default, exports SGLang's own
get_moe_configs reads back, and the audit."""
import importlib
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("sglang")

from flytune_nb._compat.sglang import reset_moe_config  # noqa: E402
from flytune_nb.artifacts import sglang as files  # noqa: E402
from flytune_nb.core.config import Config  # noqa: E402
from flytune_nb.core.device import current_device, from_properties  # noqa: E402
from flytune_nb.core.registry import get_kernel  # noqa: E402
from flytune_nb.errors import UsageError  # noqa: E402
from flytune_nb.measure.correctness import compare  # noqa: E402
from flytune_nb.measure.trial import evaluate  # noqa: E402
from tests.conftest import H200_PROPS, MI300X_PROPS, REPO  # noqa: E402

TINY = {"M": 5, "E": 4, "N": 64, "K": 32, "topk": 2}


@pytest.fixture(scope="module")
def spec():
    return get_kernel("sglang_fused_moe")


@pytest.fixture(scope="module")
def down():
    return get_kernel("sglang_fused_moe_down")


@pytest.fixture(scope="module")
def km(spec):
    return importlib.import_module(spec.run.__module__)


@pytest.fixture(scope="module")
def sg(km):
    return km.sglang()


def _device_named(monkeypatch, sg, name="CPU_interpreter"):
    """SGLang names files after torch.cuda.get_device_name(), None without a GPU: answer as the interpreter device."""
    monkeypatch.setattr(sg.config, "get_device_name", lambda *a: name)


def test_align_matches_sglangs_contract(km):
    E, M, topk, bm = 6, 29, 2, 16
    ids = torch.stack([torch.randperm(E)[:topk] for _ in range(M)]).to(torch.int32)
    ids[3, 0] = -1  # filtered by expert parallelism: bucket 0, expert id -1
    sorted_ids, expert_ids, n_post = km.moe_align(ids, bm, E)
    n, flat, total = M * topk, ids.flatten().long(), int(n_post)
    assert sorted_ids.numel() == km.align_capacity(n, E, bm) and sorted_ids.numel() % 4 == 0
    counts = torch.bincount(flat + 1, minlength=E + 1)
    assert total == int(((counts + bm - 1) // bm * bm).sum())
    real = sorted_ids[:total][sorted_ids[:total] < n]
    assert sorted(real.tolist()) == list(range(n)) and (sorted_ids[total:] == n).all()
    assert int(expert_ids[0]) == -1  # the filtered pair's tile comes first
    for b in range(total // bm):
        tile = sorted_ids[b * bm:(b + 1) * bm]
        assert (flat[tile[tile < n].long()] == expert_ids[b]).all()


# top-k 1: the down GEMM writes the output directly (no combine), on the CPU as on SGLang's GPU branches
@pytest.mark.parametrize("shape", [TINY, {"M": 1, "E": 3, "N": 32, "K": 48, "topk": 2},
                                   {"M": 7, "E": 4, "N": 64, "K": 64, "topk": 1}])
def test_sglangs_kernel_matches_the_float64_loop_on_both_paths(spec, km, sg, shape, dev):
    space = spec.configs(shape, "fp16", dev)
    picks = [spec.default(shape, "fp16", dev), space[0], space[-1]]
    for cfg in picks:
        inputs = spec.make_inputs(shape, "fp16", dev)
        ref = spec.reference(inputs)
        fused = km.fused_experts(inputs, km.launch_dict(cfg))  # SGLang's fused_experts_impl, our alignment
        two = km.two_launches(inputs, km.launch_dict(cfg))  # invoke_fused_moe_kernel x2 (a GPU without sgl_kernel)
        for y in (fused, two):
            v = compare(y, ref, spec.tol("fp16"), spec.element_tol("fp16"))
            assert v.ok and v.rel_error < 2e-3, (str(cfg), v.reason)
    assert sg.path == "fused_experts" and not sg.native_align  # the CPU: SGLang's own call, our alignment
    # a routing bug is far outside the bound: the reference is sharp
    inputs = spec.make_inputs(TINY, "fp16", dev)
    shifted = spec.reference({**inputs, "topk_ids": (inputs["topk_ids"] + 1) % TINY["E"]})
    assert not compare(shifted, spec.reference(inputs), spec.tol("fp16")).ok


def test_bf16_the_default_dtype_passes_on_the_interpreter(spec, down, dev, cpu_timer):
    """bf16 (the sweep's default) through the interpreter, whose stock bf16 tl.dot multiplies the values' bits (rel
    error 1e+11): with the dot widened to fp32 (flytune_nb._compat.triton) SGLang's kernel passes, both GEMMs and the
    down GEMM alone."""
    for s in (spec, down):
        for cfg in (s.default(TINY, "bf16", dev), s.configs(TINY, "bf16", dev)[-1]):
            t = evaluate(s, TINY, "bf16", cfg, dev, cpu_timer)
            assert t.ok and t.rel_error < s.tol("bf16"), (s.name, str(cfg), t.reason)


def test_fp8_w8a8_matches_the_quantised_float64_loop_on_both_paths(spec, km, down, dev, cpu_timer):
    """fp8_w8a8 per tensor: float8 weights with a scale per expert, activations quantised per tensor by SGLang's
    launcher (ours standing in for sgl_kernel's quantiser). The reference applies the same quantisation; against the
    unquantised computation the kernel is ~5e-2 off. The two-launch path rounds the SiLU*up activation as the
    reference does: 3e-4 from it over 30 draws, 150x closer than to the unquantised result. SGLang's fused_experts
    path rounds that activation its own way before quantising it, and an element near an fp8 step then lands on the
    neighbouring value (e4m3 steps are up to 12.5% apart): 8e-4 to 1.3e-2 over 30 draws, still at least 3.7x closer
    than to the unquantised result."""
    shape = {"M": 33, "E": 4, "N": 128, "K": 64, "topk": 2}
    space = spec.configs(shape, "fp8", dev)
    # 1-byte operands: more stages fit in shared memory than at fp16 (234 configs against 174 here)
    assert len(space) > len(spec.configs(shape, "fp16", dev))
    for cfg in (spec.default(shape, "fp8", dev), space[0], space[-1]):
        inputs = spec.make_inputs(shape, "fp8", dev)
        assert inputs["w1"].dtype == torch.float8_e4m3fn and inputs["w1_scale"].shape == (4,)
        assert spec.shape_of(inputs) == shape
        ref = spec.reference(inputs)
        scaled = {k: inputs[k].float() * inputs[f"{k}_scale"][:, None, None] for k in ("w1", "w2")}
        unquantised = spec.reference({**inputs, **scaled, "w1_scale": None, "w2_scale": None})
        for path, bound, closer in ((km.two_launches, 2e-3, 20), (km.fused_experts, 3e-2, 2)):
            y = path(inputs, km.launch_dict(cfg))
            v = compare(y, ref, spec.tol("fp8"), spec.element_tol("fp8"))
            assert v.ok and v.rel_error < bound, (path.__name__, str(cfg), v.rel_error, v.reason)
            assert (y.double() - unquantised).norm() / unquantised.norm() > closer * v.rel_error, path.__name__
    t = evaluate(down, shape, "fp8", down.default(shape, "fp8", dev), dev, cpu_timer)
    assert t.ok and t.rel_error < 1e-2, t.reason


def test_down_gemm_alone_matches_its_reference_and_keeps_the_up_block_m(down, dev, cpu_timer):
    d = down.default(TINY, "fp16", dev)
    space = down.configs(TINY, "fp16", dev)
    assert space and {c["BLOCK_SIZE_M"] for c in space} == {d["BLOCK_SIZE_M"]}
    for cfg in (d, space[0], space[-1]):
        t = evaluate(down, TINY, "fp16", cfg, dev, cpu_timer)
        assert t.ok and t.rel_error < 2e-3, (str(cfg), t.reason)


def test_a_config_dir_without_configs_is_refused_for_the_down_gemm(down, dev, tmp_path, monkeypatch):
    """SGLANG_MOE_CONFIG_DIR one level above an export: SGLang raises FileNotFoundError there and no server starts, so
    there is no up config to pin; the down GEMM's space and default say so instead of pinning SGLang's default."""
    (tmp_path / "sglang_fused_moe" / "configs" / running()).mkdir(parents=True)
    monkeypatch.setenv("SGLANG_MOE_CONFIG_DIR", str(tmp_path))
    for call in (down.configs, down.default):
        with pytest.raises(UsageError, match=r"SGLANG_MOE_CONFIG_DIR=.* has no configs/ folder: a SGLang server "
                                             r"started with it raises FileNotFoundError.*subfolder sglang_fused_moe"):
            call(TINY, "fp16", dev)
    monkeypatch.setenv("SGLANG_MOE_CONFIG_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(UsageError, match=r"nowhere is not a folder: a SGLang server started with it raises"):
        down.default(TINY, "fp16", dev)


def test_a_malformed_up_file_is_named_in_a_warning(spec, down, dev, tmp_path, monkeypatch):
    from flytune_nb.serve.lookup import ArtifactWarning

    bad = tmp_path / "configs" / running() / files.file_name(TINY["E"], TINY["N"], dev.name)
    bad.parent.mkdir(parents=True)
    bad.write_text('{"1": {"BLOCK_SIZE_M": 64,')
    monkeypatch.setenv("SGLANG_MOE_CONFIG_DIR", str(tmp_path))
    with pytest.warns(ArtifactWarning, match=rf"{bad.name}: not a SGLang MoE config file .*SGLang cannot use this "
                                             r"up config either, so the down GEMM is pinned to SGLang's default"):
        assert down.default(TINY, "fp16", dev) == spec.default(TINY, "fp16", dev)


def test_space_is_sglangs_and_the_default_is_get_default_config(spec, sg, dev):
    h200, mi300 = from_properties(H200_PROPS, hip=False), from_properties(MI300X_PROPS, hip=True)
    cfgmod = importlib.import_module(spec.configs.__module__)
    raw = cfgmod.sglang_space(h200)
    assert len(raw) == 1920 and len(cfgmod.sglang_space(mi300)) == 1600
    assert all(c.waves_per_eu == 0 for c in cfgmod.sglang_space(mi300))
    first = raw[0]  # SGLang's loop order: stages, BM, BK, BN, warps, group
    assert (first.num_stages, first["BLOCK_SIZE_M"], first["BLOCK_SIZE_K"], first["BLOCK_SIZE_N"]) == (2, 16, 64, 32)
    mixtral = {"E": 8, "N": 14336, "K": 4096, "topk": 2}
    decode = spec.configs({"M": 1, **mixtral}, "bf16", h200)
    prefill = spec.configs({"M": 4096, **mixtral}, "bf16", h200)
    assert {c["BLOCK_SIZE_M"] for c in decode} == {16} and 16 < len(decode) < len(prefill) < 1920
    assert all(set(c.to_dict()) <= set(files.KNOB_ORDER) for c in prefill)
    for m, want in ((8, (16, 32, 64, 1)), (9, (64, 64, 32, 8))):  # M <= E vs M > E
        sgl = sg.config.get_default_config(m, 8, 14336, 4096, 2, None, False, None)
        cfg = spec.default({"M": m, **mixtral}, "bf16", h200)
        assert tuple(cfg[k] for k in files.KNOB_ORDER[:4]) == want == tuple(sgl[k] for k in files.KNOB_ORDER[:4])
        assert (cfg.num_warps, cfg.num_stages) == (4, 3)  # Triton's CUDA launch defaults, which SGLang leaves to it
    assert spec.default({"M": 9, **mixtral}, "bf16", mi300).num_stages == 2
    for m in (1, 64, 512):  # fp8_w8a8: SGLang's default for that dtype string, with its own warps and stages
        sgl = sg.config.get_default_config(m, 8, 14336, 4096, 2, "fp8_w8a8", False, None)
        cfg = spec.default({"M": m, **mixtral}, "fp8", h200)
        assert {k: cfg.to_dict()[k] for k in sgl} == sgl


def test_a_config_failing_inside_the_override_leaves_none_behind(spec, km, sg, dev, cpu_timer):
    tu = sg.triton_utils
    assert tu.get_config() is None
    bad = spec.default(TINY, "fp16", dev).replace(BLOCK_SIZE_N=48)  # not a power of two: tl.arange refuses it
    t = evaluate(spec, TINY, "fp16", bad, dev, cpu_timer)
    assert not t.ok and t.status in ("compile_error", "launch_error")
    assert tu.get_config() is None  # SGLang's own override_config (no finally) would have left BLOCK_SIZE_N=48 set
    with pytest.raises(RuntimeError, match="inside"):
        with tu.override_config({"BLOCK_SIZE_M": 1}):
            raise RuntimeError("inside")
    leaked = tu.get_config()
    reset_moe_config(tu, None)
    assert leaked == {"BLOCK_SIZE_M": 1}  # why forced_config exists
    ok = evaluate(spec, TINY, "fp16", spec.default(TINY, "fp16", dev), dev, cpu_timer)
    assert ok.ok and tu.get_config() is None


def test_file_rules_are_sglangs(sg, monkeypatch):
    _device_named(monkeypatch, sg, "NVIDIA H200")
    for args in ((8, 14336, None), (256, 512, "fp8_w8a8", [128, 128]), (64, 1024, "int8_w8a8", None, True, True)):
        E, N, dtype, *rest = args
        block = rest[0] if rest else None
        pcq, dn = (rest[1], rest[2]) if len(rest) > 1 else (False, False)
        ours = files.file_name(E, N, "NVIDIA_H200", dtype, block, pcq, dn)
        assert ours == sg.config.get_config_file_name(E, N, dtype, block, pcq, dn)
        meta = files.parse_name(ours)
        assert (meta["E"], meta["N"], meta["device"], meta["dtype"], meta["down"]) == (E, N, "NVIDIA_H200", dtype, dn)
    # every file SGLang ships is named by the rule and, where its tuner wrote it, rendered byte for byte
    shipped = sorted((files.package_root() / "configs").glob("triton_*/*.json"))
    assert len(shipped) > 100
    same = 0
    for p in shipped:
        meta = files.parse_name(p.name)
        assert meta is not None, p.name
        assert files.file_name(meta["E"], meta["N"], meta["device"], meta["dtype"], meta["block_shape"],
                               meta["per_channel_quant"], meta["down"]) == p.name
        text = p.read_text()
        try:
            same += files.render(files.read_table(p)) == text
        except Exception:  # noqa: BLE001 - older hand-written files with other knobs
            pass
    assert same > 0.8 * len(shipped)  # the rest: indent=2 or other knob orders, not written by the current tuner


def test_a_device_name_with_parentheses_is_named_read_and_audited_as_sglang_does(spec, sg, tmp_path, monkeypatch,
                                                                                 capsys):
    """SGLang ships files for "Intel(R)_Arc(TM)_Pro_B60_Graphics": its name is get_device_name() with spaces as '_',
    parentheses kept. flytune's device name, its export's file name, its lookup, `flytune check` and the audit must
    all use that very name, or SGLang never reads what flytune exported for such a GPU."""
    import dataclasses
    import random

    import triton

    from flytune_nb.artifacts import files as artifact_files
    from flytune_nb.artifacts.gate import files_for
    from flytune_nb.artifacts.sglang_audit import device_files
    from flytune_nb.serve.lookup import LOOKUP, lookup

    raw = "Intel(R) Arc(TM) A770 Graphics"
    intel = from_properties(SimpleNamespace(**{**vars(H200_PROPS), "name": raw}), hip=False)
    # the interpreter's space, as `flytune lookup --device NAME` checks another device's files against this machine's
    dev = dataclasses.replace(current_device(), name=intel.name, raw_name=raw)
    _device_named(monkeypatch, sg, raw)
    name = artifact_files.file_name(spec, {"E": 4, "N": 64}, dev.name, "fp16")  # the name export writes
    assert name == sg.config.get_config_file_name(4, 64, None)
    assert name == "E=4,N=64,device_name=Intel(R)_Arc(TM)_A770_Graphics.json"
    shape = {"M": 5, "E": 4, "N": 64, "K": 32, "topk": 2}
    space = spec.configs(shape, "fp16", dev)
    table = {m: random.choice(space).to_dict() for m in (1, 16)}  # any configs of the space, drawn afresh
    root = tmp_path / "out" / "sglang_fused_moe"
    _fake_shipped(root, running(), name, table)
    monkeypatch.setenv("SGLANG_MOE_CONFIG_DIR", str(root))
    sg.config.get_moe_configs.cache_clear()
    try:
        assert sg.config.get_moe_configs(4, 64, None) == table  # SGLang reads flytune's file
    finally:
        sg.config.get_moe_configs.cache_clear()
    LOOKUP.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "not a safe file-name part" fallback
        assert lookup(spec, {**shape, "M": 12}, "fp16", device=dev, directory=tmp_path / "out") == (
            Config.from_dict(table[16]), "artifact")
    LOOKUP.clear()
    from flytune_nb.ui.cli import main

    # as a user asks for it, by torch's name
    assert main(["lookup", "sglang_fused_moe", "M=12 E=4 N=64 K=32 topk=2", "--dtype", "fp16", "--device", raw,
                 "--dir", str(tmp_path / "out")]) == 0
    assert f"{Config.from_dict(table[16])}  (source: artifact, device: {dev.name})" in capsys.readouterr().out
    LOOKUP.clear()
    assert [(k, p.name) for k, p in files_for(tmp_path / "out", dev.name)] == [("sglang_fused_moe", name)]
    assert list(device_files(root, dev.name, triton.__version__)) == [name]


def _sweep_and_export(kernel, tmp_path, budget=2, dtype="fp16"):
    from flytune_nb.artifacts.export import export
    from flytune_nb.engine.store import Store
    from flytune_nb.engine.sweep import Sweep

    store = Store(tmp_path / f"{kernel}.db")
    Sweep(kernel, "M=1,5 E=4 N=64 K=32 topk=2", [dtype], db=store, isolate=False, budget=budget,
          baselines=()).run()
    return export(store, tmp_path / "out", kernel=kernel)


def test_export_is_read_back_by_sglangs_own_lookup(sg, tmp_path, monkeypatch):
    import triton

    from flytune_nb.artifacts.files import triton_dir_name
    from flytune_nb.artifacts.gate import files_for

    up_files = _sweep_and_export("sglang_fused_moe", tmp_path)
    root = tmp_path / "out" / "sglang_fused_moe"
    # the documented order: the up file first, SGLang pointed at it, then the down GEMM (its BLOCK_SIZE_M pinned to
    # the up config SGLang will run)
    monkeypatch.setenv("SGLANG_MOE_CONFIG_DIR", str(root))
    down_files = _sweep_and_export("sglang_fused_moe_down", tmp_path)
    here = triton_dir_name(triton.__version__)  # the running Triton's folder, e.g. triton_3_6_0
    assert [p.relative_to(root).as_posix() for p in up_files + down_files] == [
        f"configs/{here}/E=4,N=64,device_name=CPU_interpreter.json",
        f"configs/{here}/E=4,N=64,device_name=CPU_interpreter_down.json"]
    text = up_files[0].read_text()
    table = json.loads(text)
    assert list(table) == ["1", "5"] and list(table["1"]) == list(files.KNOB_ORDER[:6])
    assert text == json.dumps(table, indent=4) + "\n"  # SGLang's save_configs: json.dump(indent=4) + "\n"
    prov = json.loads((up_files[0].parent / "provenance.json").read_text())
    assert set(prov) == {up_files[0].name, down_files[0].name}
    assert prov[up_files[0].name]["5"]["shape"] == {"E": 4, "N": 64, "K": 32, "topk": 2}

    down_table = json.loads(down_files[0].read_text())
    assert all(down_table[m]["BLOCK_SIZE_M"] == table[m]["BLOCK_SIZE_M"] for m in table)
    _device_named(monkeypatch, sg)
    sg.config.get_moe_configs.cache_clear()
    try:
        assert sg.config.get_moe_configs(4, 64, None) == {int(m): c for m, c in table.items()}
        up, (dn, _) = sg.config.try_get_optimal_moe_config((4, 128, 32), (4, 32, 64), 2, None, 4,
                                                          return_down_config=True)
        assert up == table["5"] and dn == down_table["5"]  # nearest batch size to M=4 is 5, in both files
    finally:
        sg.config.get_moe_configs.cache_clear()
    # flytune's own lookup and `flytune check` find both files in SGLang's layout, each with its kernel
    assert [k for k, _ in files_for(tmp_path / "out", "CPU_interpreter")] == ["sglang_fused_moe",
                                                                             "sglang_fused_moe_down"]
    from flytune_nb.serve.lookup import LOOKUP, lookup

    LOOKUP.clear()
    cfg, source = lookup(get_kernel("sglang_fused_moe"), {"M": 4, "E": 4, "N": 64, "K": 32, "topk": 2}, "fp16",
                         directory=tmp_path / "out")
    assert source == "artifact" and cfg.to_dict() == table["5"]


def _write_moe_files(spec, root, layout, device_name="CPU_interpreter"):
    """``layout``: {triton folder: {E: {M: config}}} under ``root``/configs, as SGLang's tuner writes them."""
    for folder, by_e in layout.items():
        (root / "configs" / folder).mkdir(parents=True)
        for E, table in by_e.items():
            (root / "configs" / folder / files.file_name(E, 64, device_name)).write_text(
                files.render({m: c.to_dict() for m, c in table.items()}))


def _sglangs_choice(sg, E, M):
    """The config SGLang's own try_get_optimal_moe_config runs for (E, N=64, K=32, top-k 2) at M, and whether it came
    from a file."""
    sg.config.get_moe_configs.cache_clear()
    try:
        from_file = sg.config.get_moe_configs(E, 64, None) is not None
        return sg.config.try_get_optimal_moe_config((E, 128, 32), (E, 32, 64), 2, None, M), from_file
    finally:
        sg.config.get_moe_configs.cache_clear()


def test_lookup_without_an_export_names_the_entry_sglang_ships(spec, tmp_path, monkeypatch, capsys):
    """No export for the shape: lookup's answer is the heuristic default, but a SGLang server without
    SGLANG_MOE_CONFIG_DIR reads the file SGLang ships in its package; the command says which entry that server runs."""
    import triton

    from flytune_nb.serve.lookup import LOOKUP
    from flytune_nb.ui.cli import main

    package = tmp_path / "pkg"
    shipped = {1: _entry(1), 16: _entry(16, bn=32)}
    _fake_shipped(package, files.version_dir(triton.__version__), "E=4,N=64,device_name=CPU_interpreter.json", shipped)
    monkeypatch.setattr(files, "package_root", lambda: package)
    monkeypatch.delenv("SGLANG_MOE_CONFIG_DIR", raising=False)
    LOOKUP.clear()
    empty = tmp_path / "no_exports"
    empty.mkdir()
    assert main(["lookup", "sglang_fused_moe", "M=12 E=4 N=64 K=32 topk=2", "--dtype", "fp16", "--dir",
                 str(empty)]) == 0
    out = capsys.readouterr().out
    assert "(source: default," in out
    note = next(line for line in out.splitlines() if line.startswith("note: "))
    assert "SGLang server started without SGLANG_MOE_CONFIG_DIR" in note and "batch size 16 of " in note
    assert "BLOCK_SIZE_N=32," in note
    (package / "configs").rename(tmp_path / "gone")  # SGLang ships nothing for the shape: no note
    assert main(["lookup", "sglang_fused_moe", "M=12 E=4 N=64 K=32 topk=2", "--dtype", "fp16", "--dir",
                 str(empty)]) == 0
    assert "note:" not in capsys.readouterr().out
    LOOKUP.clear()


def test_lookup_of_the_down_gemm_without_an_export_names_the_down_entry_sglang_ships(tmp_path, monkeypatch, capsys):
    """As for the up GEMM: with no export, a SGLang server without SGLANG_MOE_CONFIG_DIR runs the ``_down`` entry
    SGLang ships, with the BLOCK_SIZE_M of the up entry it runs (both GEMMs share one alignment), not lookup's
    default; the command names it. Without a shipped ``_down`` file that server reuses the up config, which is the
    default: no note."""
    import triton

    from flytune_nb.serve.lookup import LOOKUP
    from flytune_nb.ui.cli import main

    package = tmp_path / "pkg"
    folder = files.version_dir(triton.__version__)
    _fake_shipped(package, folder, "E=4,N=64,device_name=CPU_interpreter.json",
                  {1: _entry(1), 16: {**_entry(16), "BLOCK_SIZE_M": 32}})
    down = _fake_shipped(package, folder, "E=4,N=64,device_name=CPU_interpreter_down.json",
                         {1: _entry(1), 16: {**_entry(16, bn=128), "BLOCK_SIZE_M": 64, "num_warps": 8}})
    monkeypatch.setattr(files, "package_root", lambda: package)
    # this shell points at another folder, whose up file pins another BLOCK_SIZE_M: the note is of a server without it
    _fake_shipped(tmp_path / "mine", folder, "E=4,N=64,device_name=CPU_interpreter.json",
                  {16: {**_entry(16), "BLOCK_SIZE_M": 128}})
    monkeypatch.setenv("SGLANG_MOE_CONFIG_DIR", str(tmp_path / "mine"))
    LOOKUP.clear()
    empty = tmp_path / "no_exports"
    empty.mkdir()
    args = ["lookup", "sglang_fused_moe_down", "M=12 E=4 N=64 K=32 topk=2", "--dtype", "fp16", "--dir", str(empty)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "(source: default," in out
    note = next(line for line in out.splitlines() if line.startswith("note: "))
    assert "SGLang server started without SGLANG_MOE_CONFIG_DIR" in note and f"batch size 16 of {down}" in note
    assert ("instead of this default: BLOCK_SIZE_K=64,BLOCK_SIZE_M=32,BLOCK_SIZE_N=128,GROUP_SIZE_M=1,num_stages=2,"
            "num_warps=8  " in note)  # the shipped down entry, BLOCK_SIZE_M from the shipped up entry
    # a down entry equal to the up entry this shell's server runs (its default) is named as that default
    monkeypatch.delenv("SGLANG_MOE_CONFIG_DIR")
    assert main([*args[:2], "M=1 E=4 N=64 K=32 topk=2", *args[3:]]) == 0
    out = capsys.readouterr().out
    assert f"{Config.from_dict(_entry(1))}  (source: default," in out
    assert f"runs the entry SGLang ships, which is this default  (batch size 1 of {down})" in out
    down.unlink()
    LOOKUP.clear()
    assert main(args) == 0
    assert "note:" not in capsys.readouterr().out
    LOOKUP.clear()


@pytest.mark.parametrize("layout", ["running and older", "newer and older"])
def test_lookup_takes_each_file_from_the_folder_sglang_takes_it_from(layout, spec, sg, tmp_path, monkeypatch, dev):
    """Per file, the running Triton's folder if it holds it, else the newest other folder that does (3_10_0 is newer
    than 3_5_0): what SGLang's get_moe_configs reads, for a file every folder has, one only an older folder has, and
    one none has."""
    import random

    import triton

    from flytune_nb.serve.lookup import LOOKUP, lookup

    here = files.version_dir(triton.__version__)
    space = spec.configs({**TINY, "E": 8}, "fp16", dev)
    first = here if layout == "running and older" else "triton_3_10_0"
    assert first not in ("triton_3_5_0", "triton_3_4_0")
    tables = {f: {E: {m: random.choice(space) for m in (1, 8)} for E in es}
              for f, es in ((first, (4,)), ("triton_3_5_0", (4, 8)), ("triton_3_4_0", (4, 8, 12)))}
    root = tmp_path / "out" / "sglang_fused_moe"
    _write_moe_files(spec, root, tables)
    monkeypatch.setenv("SGLANG_MOE_CONFIG_DIR", str(root))
    _device_named(monkeypatch, sg)
    LOOKUP.clear()
    for E, served_from in ((4, first), (8, "triton_3_5_0"), (12, "triton_3_4_0"), (16, None)):
        M = random.randint(1, 16)
        theirs, from_file = _sglangs_choice(sg, E, M)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            cfg, source = lookup(spec, {**TINY, "E": E, "M": M}, "fp16", directory=tmp_path / "out")
        assert source == ("artifact" if from_file else "default") and from_file == (served_from is not None), E
        if from_file:
            assert cfg.to_dict() == theirs, (E, M)
            want = tables[served_from][E][min((1, 8), key=lambda m: abs(m - M))]
            assert cfg == want, (E, M)
        said = " ".join(str(w.message) for w in caught)
        assert (served_from in (None, here)) == ("newest folder that holds it" not in said), said
        if served_from not in (None, here):
            assert f"using {served_from}'s" in said, said
    LOOKUP.clear()


def test_lookup_breaks_a_tie_of_distance_as_sglang_does(spec, sg, tmp_path, monkeypatch, dev):
    """Of two entries as near to M, SGLang runs the one first in the file (its min() over the int()ed keys in file
    order); so does lookup, whatever the order the file lists them in."""
    import random

    import triton

    from flytune_nb.serve.lookup import LOOKUP, lookup

    space = spec.configs({**TINY, "E": 8}, "fp16", dev)
    root = tmp_path / "out" / "sglang_fused_moe"
    path = root / "configs" / files.version_dir(triton.__version__) / files.file_name(8, 64, "CPU_interpreter")
    path.parent.mkdir(parents=True)
    monkeypatch.setenv("SGLANG_MOE_CONFIG_DIR", str(root))
    _device_named(monkeypatch, sg)
    for keys in [[16, 3, 1]] + [random.sample([1, 3, 9, 16], 4) for _ in range(2)]:
        entries = random.sample(space, len(keys))  # a different config per batch size
        path.write_text(json.dumps({str(k): files.ordered(c.to_dict()) for k, c in zip(keys, entries)}, indent=4))
        LOOKUP.clear()
        for M in range(1, 21):
            theirs, from_file = _sglangs_choice(sg, 8, M)
            cfg, source = lookup(spec, {**TINY, "E": 8, "M": M}, "fp16", directory=tmp_path / "out")
            assert from_file and source == "artifact" and cfg.to_dict() == theirs, (keys, M)
    LOOKUP.clear()


def test_fp8_export_is_read_back_by_sglang_and_served_by_dtype(spec, sg, tmp_path, monkeypatch):
    from flytune_nb.serve.lookup import LOOKUP
    from flytune_nb.serve.tuned import tuned

    (path,) = _sweep_and_export("sglang_fused_moe", tmp_path, dtype="fp8")
    assert path.name == "E=4,N=64,device_name=CPU_interpreter,dtype=fp8_w8a8.json"
    table = json.loads(path.read_text())
    _device_named(monkeypatch, sg)
    sg.config.get_moe_configs.cache_clear()
    try:
        assert sg.config.get_moe_configs(4, 64, "fp8_w8a8") is None  # SGLang's own folder: nothing for this GPU
        monkeypatch.setenv("SGLANG_MOE_CONFIG_DIR", str(path.parents[2]))
        sg.config.get_moe_configs.cache_clear()
        assert sg.config.get_moe_configs(4, 64, "fp8_w8a8") == {int(m): c for m, c in table.items()}
        assert sg.config.get_moe_configs(4, 64, None) is None  # the bf16/fp16 file is another file
    finally:
        sg.config.get_moe_configs.cache_clear()
    LOOKUP.clear()
    monkeypatch.setenv("FLYTUNE_CONFIG_DIR", str(tmp_path / "out"))
    kernel = tuned("sglang_fused_moe", autotune=False)
    inputs = spec.make_inputs({"M": 4, "E": 4, "N": 64, "K": 32, "topk": 2}, "fp8", current_device())
    assert kernel.config_for(inputs).to_dict() == table["5"]  # dtype read from w1 (float8), nearest batch size 5
    v = compare(kernel(**inputs), spec.reference(inputs), spec.tol("fp8"), spec.element_tol("fp8"))
    assert v.ok, v.reason


def running() -> str:
    """The running Triton's folder, the one SGLang reads first (``triton_3_6_0`` under Triton 3.6.0); the fallback
    cases below put files in an older one."""
    import triton

    return files.version_dir(triton.__version__)


def _fake_shipped(root: Path, folder: str, name: str, table: dict) -> Path:
    p = root / "configs" / folder / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(files.render(table))
    return p


def test_shipped_entry_is_measured_beside_the_default(spec, tmp_path, monkeypatch, dev, cpu_timer):
    from flytune_nb.engine.sweep import Sweep
    from flytune_nb.strategies.loop import search

    shipped = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1, "num_warps": 4,
               "num_stages": 2}
    _fake_shipped(tmp_path / "pkg", "triton_3_1_0", "E=4,N=64,device_name=CPU_interpreter.json",
                  {1: shipped, 64: {**shipped, "BLOCK_SIZE_M": 64}})
    monkeypatch.setattr(files, "package_root", lambda: tmp_path / "pkg")
    want = {"SGLang shipped": type(spec.default(TINY, "fp16", dev)).from_dict(shipped)}
    assert spec.named(TINY, "fp16", dev) == want  # M=5 -> nearest key 1, found through the Triton-version fallback
    r = search(spec, TINY, "fp16", dev, cpu_timer, budget=3)
    assert r.named == want and len(r.trials) == 3
    assert [t.config for t in r.trials[:2]] == [r.default, want["SGLang shipped"]]
    assert r.named_trials["SGLang shipped"].ok
    one = Sweep(spec, "M=5 E=4 N=64 K=32 topk=2", ["fp16"], isolate=False, budget=1, baselines=()).run()[0]
    assert one.named == want and len(one.trials) == 2  # measured even past the budget


def test_export_warns_of_the_shipped_batch_sizes_a_server_would_no_longer_read(tmp_path, monkeypatch):
    """SGLANG_MOE_CONFIG_DIR replaces SGLang's folder: an export of M=1,5 for a shape SGLang ships M=1,5,64,512 for
    would serve 64 and 512 with the M=5 entry. Export says so, naming them; copied into the folder first, SGLang's
    entries are kept and nothing is lost."""
    from flytune_nb.artifacts.export import export
    from flytune_nb.engine.store import Store
    from flytune_nb.engine.sweep import Sweep
    from flytune_nb.serve.lookup import ArtifactWarning

    shipped = {m: _entry(m, bn=32 if m >= 64 else 64) for m in (1, 5, 64, 512)}
    name = "E=4,N=64,device_name=CPU_interpreter.json"
    theirs = _fake_shipped(tmp_path / "pkg", running(), name, shipped)
    monkeypatch.setattr(files, "package_root", lambda: tmp_path / "pkg")
    store = Store(tmp_path / "moe.db")
    Sweep("sglang_fused_moe", "M=1,5 E=4 N=64 K=32 topk=2", ["fp16"], db=store, isolate=False, budget=1,
          baselines=()).run()
    with pytest.warns(ArtifactWarning) as caught:
        (path,) = export(store, tmp_path / "out")
    said = [str(w.message) for w in caught if "SGLang ships" in str(w.message)]
    assert len(said) == 1 and "batch sizes 64,512, which this export lacks" in said[0], said
    assert "M=5's for 64,512" in said[0] and str(theirs) in said[0]
    assert sorted(json.loads(path.read_text()), key=int) == ["1", "5"]

    # the remedy it names: SGLang's file copied over first keeps 64 and 512 as SGLang ships them
    path.write_text(theirs.read_text())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        export(store, tmp_path / "out")
    assert not [w for w in caught if "SGLang ships" in str(w.message)]
    table = json.loads(path.read_text())
    assert sorted(table, key=int) == ["1", "5", "64", "512"] and table["512"] == files.ordered(shipped[512])


def _entry(m, bn=64):
    return {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1, "num_warps": 4,
            "num_stages": 2}


def _default_entry(spec, m):
    """SGLang's own default config for E=4 N=64 K=32 topk=2 fp16 at batch size ``m`` on this device, as a shipped
    entry. An audit re-times an entry and a default it differs from twice more each to confirm before reporting:
    6 timings of ~1 s of interpreted MoE calls on 2 cores, where an entry that ties with its default, as the
    default itself does on a quiet machine (within the 3% band), costs 2. For tests of the audit's plumbing, not of
    its verdicts."""
    shape = {"M": m, "E": 4, "N": 64, "K": 32, "topk": 2}
    return spec.default(shape, "fp16", current_device()).to_dict()


def test_audit_reports_slower_missing_fallback_and_broken_entries(tmp_path):
    from flytune_nb.artifacts.sglang_audit import audit, to_markdown
    from flytune_nb.measure.trial import Trial

    root = tmp_path / "sglang"
    _fake_shipped(root, running(), "E=4,N=64,device_name=CPU_interpreter.json",
                  {1: _entry(1), 4: _entry(4, bn=32), 8: _entry(8, bn=48)})
    _fake_shipped(root, "triton_3_1_0", "E=4,N=32,device_name=CPU_interpreter.json", {1: _entry(1)})
    _fake_shipped(root, running(), "E=4,N=64,device_name=CPU_interpreter,dtype=fp8_w8a8.json", {1: _entry(1)})
    _fake_shipped(root, running(), "E=9,N=96,device_name=CPU_interpreter.json", {1: _entry(1)})
    _fake_shipped(root, running(), "E=4,N=64,device_name=NVIDIA_H200.json", {1: _entry(1)})  # another GPU
    timed = []

    def measure(spec, shape, dtype, config):  # the shipped M=4 entry is 2x the default, the others tie
        timed.append((spec.name, shape["M"], str(config)))
        if config["BLOCK_SIZE_N"] == 48:
            return Trial(spec.name, shape, dtype, config, "compile_error", "BLOCK_SIZE_N must be a power of 2")
        ms = 0.2 if (config["BLOCK_SIZE_N"], config.num_stages) == (32, 2) else 0.1
        return Trial(spec.name, shape, dtype, config, "ok", p50=ms)

    shapes = {(4, 64): {"K": 32, "topk": 2}, (4, 32): {"K": 32, "topk": 2}, (16, 128): {"K": 64, "topk": 4}}
    a = audit(root, shapes=shapes, dtype="fp16", measure=measure)
    by_m = {(e.file, e.M): e.status for e in a.entries}
    assert by_m == {("E=4,N=32,device_name=CPU_interpreter.json", 1): "OK",
                    ("E=4,N=64,device_name=CPU_interpreter.json", 1): "OK",
                    ("E=4,N=64,device_name=CPU_interpreter.json", 4): "SLOWER",
                    ("E=4,N=64,device_name=CPU_interpreter.json", 8): "ERROR"}
    assert a.fallback == [("E=4,N=32,device_name=CPU_interpreter.json", "triton_3_1_0")]
    assert a.missing_files == [("--shape", "E=16,N=128,device_name=CPU_interpreter.json")]
    assert {n for n, _ in a.skipped} == {"E=4,N=64,device_name=CPU_interpreter,dtype=fp8_w8a8.json",
                                         "E=9,N=96,device_name=CPU_interpreter.json"}
    assert all("NVIDIA" not in f for f in {e.file for e in a.entries})
    assert a.missing_sizes["E=4,N=64,device_name=CPU_interpreter.json"][:3] == [2, 16, 24]
    md = to_markdown(a)
    assert "**1 slower than the default**" in md
    assert f"| `E=4,N=64,device_name=CPU_interpreter.json` ({running()}) | 4 |" in md
    assert "E=16,N=128,device_name=CPU_interpreter.json" in md and "only in `triton_3_1_0`" in md
    assert "pass --shape \"E=9 N=96 K=... topk=...\"" in md


def test_a_shipped_file_sglang_cannot_read_is_a_failing_finding(tmp_path, capsys):
    """A malformed file in the audited folder is what a server would fail on: the report names it under its own
    heading and the command exits 1, where a file the audit chose not to time leaves the exit status 0."""
    from flytune_nb.ui.cli import main

    root = tmp_path / "sglang"
    broken = root / "configs" / running() / "E=4,N=64,device_name=CPU_interpreter.json"
    broken.parent.mkdir(parents=True)
    broken.write_text('{"1": {"BLOCK_SIZE_M": 16,}}')
    md = tmp_path / "a.md"
    assert main(["audit-sglang", "--dir", str(root), "--dtype", "fp16", "--shape", "E=4 N=64 K=32 topk=2",
                 "--md", str(md)]) == 1
    report = md.read_text()
    assert "**1 files SGLang cannot read**" in report and "## Files SGLang cannot read" in report
    assert f"- `{broken.name}`: {broken}: not a SGLang MoE config file (JSONDecodeError: " in report
    assert "0 entries of 0 files timed" in report
    broken.write_text("{}")
    (root / "configs" / running() / "E=9,N=96,device_name=CPU_interpreter.json").write_text(
        files.render({1: _entry(1)}))  # no --shape for it: not timed, not failing
    broken.unlink()
    assert main(["audit-sglang", "--dir", str(root), "--dtype", "fp16", "--md", str(md)]) == 0
    assert "cannot read" not in md.read_text() and "1 files not timed" in md.read_text()
    capsys.readouterr()


def test_an_audit_runs_down_entries_with_the_up_block_m_of_the_audited_folder(tmp_path, monkeypatch):
    """A server started with SGLANG_MOE_CONFIG_DIR=<audited dir> pins the down GEMM's BLOCK_SIZE_M to that dir's up
    file. The process's own $SGLANG_MOE_CONFIG_DIR naming another folder (up BLOCK_SIZE_M 64 there, 32 in the
    audited one) must not leak into the audit, in the shipped entry or the default it is timed against."""
    from flytune_nb.artifacts.sglang_audit import audit
    from flytune_nb.measure.trial import Trial

    audited, elsewhere = tmp_path / "audited", tmp_path / "elsewhere"
    up = "E=4,N=64,device_name=CPU_interpreter.json"
    _fake_shipped(audited, running(), up, {1: {**_entry(1), "BLOCK_SIZE_M": 32}})
    _fake_shipped(audited, running(), up.replace(".json", "_down.json"), {1: _entry(1)})
    _fake_shipped(elsewhere, running(), up, {1: {**_entry(1), "BLOCK_SIZE_M": 64}})
    monkeypatch.setenv("SGLANG_MOE_CONFIG_DIR", str(elsewhere))
    timed = []

    def measure(spec, shape, dtype, config):
        timed.append((spec.name, config["BLOCK_SIZE_M"]))
        return Trial(spec.name, shape, dtype, config, "ok", p50=0.1)

    a = audit(audited, shapes={(4, 64): {"K": 32, "topk": 2}}, dtype="fp16", measure=measure)
    down = [e for e in a.entries if e.down]
    assert len(down) == 1 and down[0].status == "OK"
    assert {bm for name, bm in timed if name == "sglang_fused_moe_down"} == {32}
    assert "BLOCK_SIZE_M=32," in down[0].shipped and "BLOCK_SIZE_M=32," in down[0].default
    from flytune_nb.kernels.sglang_fused_moe_down import up_config  # and after the audit, the environment's again
    from flytune_nb.core.device import current_device

    assert up_config({"M": 1, "E": 4, "N": 64, "K": 32, "topk": 2}, "fp16", current_device())["BLOCK_SIZE_M"] == 64


def test_an_audit_of_a_device_sglang_ships_no_file_for_says_so_and_times_nothing(tmp_path):
    """Only another GPU's files: nothing is timed, and the report says there is no file for this device rather than
    describing a timing that never ran."""
    from flytune_nb.artifacts.sglang_audit import audit, to_markdown

    root = tmp_path / "sglang"
    _fake_shipped(root, running(), "E=4,N=64,device_name=NVIDIA_H200.json", {1: _entry(1)})
    timed = []
    a = audit(root, dtype="fp16", measure=lambda *args: timed.append(args))
    md = to_markdown(a)
    assert timed == [] and a.entries == []
    assert "ships no fused-MoE config file for CPU_interpreter" in md and "nothing was timed" in md
    assert "Timed as" not in md and "captured" not in md


def test_audit_of_fp8_times_the_fp8_w8a8_files_only(tmp_path):
    from flytune_nb.artifacts.sglang_audit import audit
    from flytune_nb.measure.trial import Trial

    root = tmp_path / "sglang"
    _fake_shipped(root, running(), "E=4,N=64,device_name=CPU_interpreter.json", {1: _entry(1)})
    _fake_shipped(root, running(), "E=4,N=64,device_name=CPU_interpreter,dtype=fp8_w8a8.json",
                  {1: _entry(1), 4: _entry(4, bn=32)})
    _fake_shipped(root, running(), "E=4,N=64,device_name=CPU_interpreter,dtype=fp8_w8a8,block_shape=[128, 128]"
                  ".json", {1: _entry(1)})
    seen = []

    def measure(spec, shape, dtype, config):
        seen.append(dtype)
        return Trial(spec.name, shape, dtype, config, "ok", p50=0.1)

    shapes = {(4, 64): {"K": 32, "topk": 2}, (4, 32): {"K": 32, "topk": 2}}
    a = audit(root, shapes=shapes, dtype="fp8", measure=measure)
    assert {(e.file, e.M) for e in a.entries} == {("E=4,N=64,device_name=CPU_interpreter,dtype=fp8_w8a8.json", 1),
                                                  ("E=4,N=64,device_name=CPU_interpreter,dtype=fp8_w8a8.json", 4)}
    assert set(seen) == {"fp8"}
    why = dict(a.skipped)
    assert why["E=4,N=64,device_name=CPU_interpreter.json"] == "unquantised weights: audited with --dtype bf16"
    assert "block-wise" in why["E=4,N=64,device_name=CPU_interpreter,dtype=fp8_w8a8,block_shape=[128, 128].json"]
    assert a.missing_files == [("--shape", "E=4,N=32,device_name=CPU_interpreter,dtype=fp8_w8a8.json")]


def test_an_audit_of_exports_reads_hidden_size_and_top_k_from_their_provenance(tmp_path):
    """E=4 N=64 is no model's: without --shape only the provenance.json flytune export wrote beside the file says K
    and top-k. --shape still wins over it."""
    from flytune_nb.artifacts.sglang_audit import audit
    from flytune_nb.measure.trial import Trial

    (path,) = _sweep_and_export("sglang_fused_moe", tmp_path, budget=1)
    seen = []

    def measure(spec, shape, dtype, config):
        seen.append(dict(shape))
        return Trial(spec.name, shape, dtype, config, "ok", p50=0.1)

    a = audit(path.parents[2], dtype="fp16", measure=measure)
    assert a.skipped == [] and [(e.M, e.label) for e in a.entries] == [(1, "provenance"), (5, "provenance")]
    assert {(s["K"], s["topk"]) for s in seen} == {(32, 2)}
    seen.clear()
    a = audit(path.parents[2], dtype="fp16", measure=measure, shapes={(4, 64): {"K": 64, "topk": 1}})
    assert {e.label for e in a.entries} == {"--shape"} and {(s["K"], s["topk"]) for s in seen} == {(64, 1)}


def test_audit_cli_times_real_entries_and_writes_the_report(tmp_path, monkeypatch, capsys, cpu_timer):
    from flytune_nb.artifacts import sglang_audit
    from flytune_nb.ui.cli import main

    # Real entries, each run and checked by evaluate, timed by one call (cpu_timer): the report, the JSON and the exit
    # codes are what is checked here. The audit's own timer, 31 calls an evaluation and up to 6 evaluations an entry
    # (~6 s here), is the one the fresh-process test below runs and reads back.
    monkeypatch.setattr(sglang_audit, "default_measure", lambda device, timing="graph": (
        lambda spec, shape, dtype, config: evaluate(spec, shape, dtype, config, device, cpu_timer)))
    root = tmp_path / "sglang"
    _fake_shipped(root, running(), "E=4,N=64,device_name=CPU_interpreter.json", {1: _entry(1), 5: _entry(5)})
    md = tmp_path / "audit.md"
    rc = main(["audit-sglang", "--dir", str(root), "--shape", "E=4 N=64 K=32 topk=2", "--dtype", "fp16",
               "--md", str(md), "--json", str(tmp_path / "audit.json")])
    assert rc == 0
    report = md.read_text()
    assert "2 entries of 1 files timed" in report and "0 failing" in report
    rows = json.loads((tmp_path / "audit.json").read_text())["entries"]
    assert [r["M"] for r in rows] == [1, 5] and all(r["shipped_us"] > 0 and r["default_us"] > 0 for r in rows)
    assert main(["audit-sglang", "--dir", str(tmp_path / "nothing")]) == 2
    assert main(["audit-sglang", "--dir", str(root), "--shape", "E=4 N=64"]) == 2
    assert "--shape takes" in capsys.readouterr().err


def test_ctrl_c_mid_audit_writes_the_entries_timed_so_far_as_a_partial_report(tmp_path, monkeypatch, capsys):
    """An audit keeps no results store: Ctrl-C after the first entry must leave that entry in the report, marked
    partial, and must not send the user to a store that does not exist."""
    from flytune_nb.artifacts import sglang_audit
    from flytune_nb.measure.trial import Trial
    from flytune_nb.ui.cli import main

    root = tmp_path / "sglang"
    _fake_shipped(root, running(), "E=4,N=64,device_name=CPU_interpreter.json",
                  {1: _entry(1), 4: _entry(4), 8: _entry(8)})
    calls = []

    def measure(spec, shape, dtype, config):  # M=1's shipped and default entries tie; Ctrl-C on M=4's first launch
        calls.append(shape["M"])
        if shape["M"] == 4:
            raise KeyboardInterrupt
        return Trial(spec.name, shape, dtype, config, "ok", p50=0.1)

    monkeypatch.setattr(sglang_audit, "default_measure", lambda device, timing="graph": measure)
    md, js = tmp_path / "audit.md", tmp_path / "audit.json"
    rc = main(["audit-sglang", "--dir", str(root), "--shape", "E=4 N=64 K=32 topk=2", "--dtype", "fp16",
               "--md", str(md), "--json", str(js)])
    err = capsys.readouterr().err
    assert rc == 130 and calls == [1, 1, 4]
    assert "results store" not in err and "1 entries timed before it are in" in err
    report = md.read_text()
    assert "Interrupted (Ctrl-C) after 1 entries: a partial audit" in report
    assert "| `E=4,N=64,device_name=CPU_interpreter.json` | --shape: K=32 topk=2 | 1 | OK | 100.0 | 100.0 |" in report
    data = json.loads(js.read_text())
    assert data["interrupted"] is True and [e["M"] for e in data["entries"]] == [1]


def test_sigterm_mid_audit_says_terminated_in_the_report_and_on_stderr(tmp_path, monkeypatch, capsys):
    """A SIGTERM stops an audit as a Ctrl-C does (the CLI raises a KeyboardInterrupt for it), but the partial report
    and the last line must name what stopped it: a batch scheduler's log reading "Ctrl-C" sends the reader the wrong
    way."""
    from flytune_nb.artifacts import sglang_audit
    from flytune_nb.measure.trial import Trial
    from flytune_nb.ui import cli

    root = tmp_path / "sglang"
    _fake_shipped(root, running(), "E=4,N=64,device_name=CPU_interpreter.json", {1: _entry(1), 4: _entry(4)})

    def measure(spec, shape, dtype, config):
        if shape["M"] == 4:
            cli._TERMINATED.append(15)
            raise cli._Terminated
        return Trial(spec.name, shape, dtype, config, "ok", p50=0.1)

    monkeypatch.setattr(sglang_audit, "default_measure", lambda device, timing="graph": measure)
    monkeypatch.setattr(cli, "_TERMINATED", [])
    md = tmp_path / "audit.md"
    rc = cli.main(["audit-sglang", "--dir", str(root), "--shape", "E=4 N=64 K=32 topk=2", "--dtype", "fp16",
                   "--md", str(md)])
    err = capsys.readouterr().err
    assert rc == 130 and err.startswith("flytune audit-sglang: terminated (SIGTERM); the 1 entries timed before it")
    assert "**Interrupted (SIGTERM) after 1 entries: a partial audit.**" in md.read_text()


@pytest.mark.parametrize("kernel", ["sglang_fused_moe", "sglang_fused_moe_down"])
def test_a_sweep_of_more_experts_per_token_than_experts_is_refused_before_anything_runs(kernel, tmp_path, capsys):
    """top-k 8 of E=4 experts cannot be routed (torch.topk, making the inputs, raised "selected index k out of range"
    in the worker, after the sweep had started): the CLI and the Python API refuse the grid when they read it, naming
    the shape and the kernel's rule, and nothing is written. The tuning key is the folder's as before: the rule comes
    from its shape_rules.json, which the source fingerprint leaves out."""
    from flytune_nb import Sweep
    from flytune_nb.core.key import source_fingerprint
    from flytune_nb.errors import UsageError
    from flytune_nb.ui.cli import main

    spec = get_kernel(kernel)
    db = tmp_path / "moe.db"
    grid = "M=4 E=4,16 N=64 K=64 topk=8"  # E=16 could run: the whole grid is refused, none of it measured
    assert main(["sweep", kernel, "--grid", grid, "--dtype", "fp16", "--db", str(db), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"flytune: error: {kernel}: shape M=4 E=4 N=64 K=64 topk=8 breaks the rule topk <= E: each token is "
                   f"routed to topk distinct experts of the E on this rank")
    assert not db.exists()
    with pytest.raises(UsageError, match=r"shape M=4 E=4 N=64 K=64 topk=8 breaks the rule topk <= E"):
        Sweep(kernel, grid, ["fp16"], db=str(db))
    assert not db.exists()
    Sweep(kernel, "M=4 E=8 N=64 K=64 topk=8", ["fp16"], db=str(db))  # top-k of exactly E is a routing
    assert spec.source_dir == (Path(REPO) / "flytune_nb" / "kernels" / kernel).resolve()
    assert source_fingerprint(spec.source_dir) == source_fingerprint_without(spec.source_dir, "shape_rules.json")


def source_fingerprint_without(folder, name):
    """The folder's source fingerprint computed on a copy that lacks ``name``."""
    import shutil
    import tempfile

    from flytune_nb.core.key import source_fingerprint

    with tempfile.TemporaryDirectory() as d:
        copy = Path(d) / folder.name
        shutil.copytree(folder, copy, ignore=shutil.ignore_patterns(name, "__pycache__"))
        return source_fingerprint(copy)


@pytest.mark.parametrize("shape, said", [
    ("E=4 N=64 K=32 topk=8", "error: --shape E=4 N=64 K=32 topk=8 breaks the rule topk <= E: each token is routed"),
    ("E=4 N=64 K=0 topk=2", "axis K must be a positive integer")])
def test_an_audit_shape_that_cannot_run_is_one_line_before_anything_is_timed(shape, said, tmp_path, capsys):
    """topk=8 of E=4 experts cannot be routed (torch.topk raised "selected index k out of range" out of the CLI as a
    traceback); K=0 is no hidden size. Both are refused before the first entry is timed, the report left unwritten."""
    from flytune_nb.ui.cli import main

    root = tmp_path / "sglang"
    _fake_shipped(root, running(), "E=4,N=32,device_name=CPU_interpreter.json", {1: _entry(1)})  # timed first
    _fake_shipped(root, running(), "E=4,N=64,device_name=CPU_interpreter.json", {1: _entry(1)})
    md = tmp_path / "audit.md"
    rc = main(["audit-sglang", "--dir", str(root), "--shape", "E=4 N=32 K=32 topk=2", "--shape", shape,
               "--dtype", "fp16", "--md", str(md)])
    out = capsys.readouterr()
    assert rc == 2 and said in out.err and not md.exists()
    assert "E=4,N=32" not in out.out  # nothing was timed first


# A CUDA build of torch on a machine without a GPU: importing flytune_nb cannot choose the interpreter early there
# (it would cost every import a driver initialisation), so the audit itself must choose it before importing Triton.
AS_CUDA_BUILD = ("import runpy, sys, torch; torch.version.cuda = torch.version.cuda or '12.8'; "
                 "sys.argv[0] = 'flytune'; runpy.run_module('flytune_nb', run_name='__main__')")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU path: a machine without a GPU")
@pytest.mark.parametrize("python", [["-m", "flytune_nb"], ["-c", AS_CUDA_BUILD]], ids=["installed", "cuda_build"])
def test_audit_cli_on_a_machine_without_a_gpu_chooses_the_interpreter_itself(spec, tmp_path, python):
    """A user's shell: no TRITON_INTERPRET (this test process set it, so the child's environment is built without
    it). The audit must choose the interpreter before Triton is imported, and say how it timed there."""
    root = tmp_path / "sglang"
    # One entry: the wrong choice fails every entry alike ("Cannot call @triton.jit'd outside of the scope of a
    # kernel"), and each costs seconds of interpreted MoE calls on 2 cores.
    _fake_shipped(root, running(), "E=4,N=64,device_name=CPU_interpreter.json", {1: _default_entry(spec, 1)})
    md = tmp_path / "a.md"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = REPO
    p = subprocess.run([sys.executable, *python, "audit-sglang", "--dir", str(root), "--dtype", "fp16",
                        "--shape", "E=4 N=64 K=32 topk=2", "--md", str(md)], env=env, capture_output=True,
                       text=True, timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    report = md.read_text()
    assert "1 entries of 1 files timed" in report and "0 failing" in report and "Cannot call" not in report
    assert "CUDA graph" not in report.replace("no CUDA graph", "")
    assert "on the CPU by Triton's interpreter, wall clock of 10 back-to-back calls per sample" in report


@pytest.mark.parametrize("kernel, gemms", [("sglang_fused_moe", 2), ("sglang_fused_moe_down", 1)])
def test_a_gfx942_census_of_sglangs_kernel_reads_each_gemms_binary(kernel, gemms, tmp_path, monkeypatch):
    """SGLang launches its kernel through its own launcher, not flytune's: the census must still get what Triton
    built for gfx942, every GEMM of each config (gate+up, then down; the down kernel's one, through its sibling's
    compile_only), with their registers and MFMA."""
    import csv

    from flytune_nb.ui.cli import main
    from tests.conftest import CENSUS_CACHE

    monkeypatch.setenv("FLYTUNE_CENSUS_CACHE", os.environ.get("FLYTUNE_CENSUS_CACHE", str(CENSUS_CACHE)))
    out = tmp_path / "census.csv"
    assert main(["census", kernel, "--target", "mi300x", "--grid", "M=16 E=8 N=256 K=128 topk=2",
                 "--limit", "1", "--db", str(tmp_path / "c.db"), "--csv", str(out), "--quiet", "-j", "1"]) == 0
    rows = list(csv.DictReader(out.open()))
    assert rows and any(r["is_default"] == "1" for r in rows)
    for r in rows:
        kernels = json.loads(r["kernels"])
        assert r["status"] == "ok" and r["binary"] and len(kernels) == gemms, r
        assert all(k["vgprs"] > 0 and k["name"] == "fused_moe_kernel" for k in kernels) and int(r["mma_total"]) > 0, r


def _fresh_python(code: str) -> subprocess.CompletedProcess:
    """``code`` in a new interpreter (its own import state), the checkout on its path, on the CPU path."""
    env = dict(os.environ, PYTHONPATH=REPO, TRITON_INTERPRET="1")
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)


def test_sglangs_kernel_imports_where_torchvision_does_not_and_leaves_it_unimportable(km):
    """torchvision fails to import here (missing, or a wheel for a CUDA torch): SGLang's MoE import chain reaches it
    through vision models, so a stand-in answers for the import only. A user's own ``import torchvision`` afterwards
    fails as before, and the stand-in's objects raise when called."""
    with pytest.raises(RuntimeError, match="transforms.Normalize needs torchvision, which does not import here"):
        km._Missing("torchvision.transforms.Normalize")(0.5, 0.5)
    code = (
        "import importlib.abc, importlib.machinery, sys\n"
        "class Broken(importlib.abc.MetaPathFinder, importlib.abc.Loader):\n"  # a wheel for a CUDA torch, here
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'torchvision' or name.startswith('torchvision.'):\n"
        "            return importlib.machinery.ModuleSpec(name, self)\n"
        "    def exec_module(self, module):\n"
        "        raise OSError('libtorch_cuda.so: cannot open shared object file')\n"
        "sys.meta_path.insert(0, Broken())\n"
        "from flytune_nb.core.device import current_device\n"
        "from flytune_nb.core.registry import get_kernel\n"
        "spec = get_kernel('sglang_fused_moe')\n"
        "print('space', len(spec.configs(spec.example(), 'bf16', current_device())))\n"
        "try:\n"
        "    import torchvision\n"
        "    print('torchvision imported')\n"
        "except OSError:\n"
        "    print('torchvision still fails')\n")
    p = _fresh_python(code)
    out = p.stdout.splitlines()
    assert p.returncode == 0 and int(out[0].split()[1]) > 0, p.stdout + p.stderr[-3000:]
    assert out[1] == "torchvision still fails", p.stdout
    assert "Only CUDA" not in p.stderr  # SGLang's import-time platform warnings are not the user's concern


def test_with_a_working_torchvision_an_import_error_passes_through_and_torchvision_stays(km, monkeypatch):
    import types

    mine = types.ModuleType("torchvision")  # the user's, imported and working
    monkeypatch.setitem(sys.modules, "torchvision", mine)
    with pytest.raises(ImportError, match="SGLang's own import error"):
        with km._torchvision_stand_in():
            raise ImportError("SGLang's own import error")
    assert sys.modules["torchvision"] is mine
    assert not any(isinstance(f, km._StubFinder) and f.name == "torchvision" for f in sys.meta_path)


def test_without_sglang_both_kernels_are_listed_unavailable_fast(tmp_path):
    code = (  # a Python where sglang is not installed: find_spec says so, and importing it fails
        "import importlib.abc, importlib.util, sys, time\n"
        "class Hide(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'sglang' or name.startswith('sglang.'):\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Hide())\n"
        "real = importlib.util.find_spec\n"
        "importlib.util.find_spec = lambda n, *a: None if n.split('.')[0] == 'sglang' else real(n, *a)\n"
        "t = time.perf_counter()\n"
        "from flytune_nb.ui.cli import main\n"
        "rc = main(['kernels'])\n"
        "print('rc', rc, 'seconds', round(time.perf_counter() - t, 1), 'sglang' in sys.modules)\n")
    p = _fresh_python(code)
    lines = {line.split()[0]: line for line in p.stdout.splitlines() if line.strip()}
    for name in ("sglang_fused_moe", "sglang_fused_moe_down"):
        assert "unavailable: needs sglang: pip install 'flytune_nb[sglang]'" in lines[name], p.stdout + p.stderr
    assert p.stdout.strip().splitlines()[-1].endswith("False")  # SGLang never imported


def test_benchmark_smoke_compares_searched_shipped_and_default(tmp_path, monkeypatch):
    """benchmarks/sglang_moe.py end to end on tiny shapes (the H200 run is the same code with real ones)."""
    from benchmarks.__main__ import main as bench

    shipped = {1: _entry(1), 8: {**_entry(8), "BLOCK_SIZE_M": 32}}
    _fake_shipped(tmp_path / "pkg", running(), "E=4,N=64,device_name=CPU_interpreter.json", shipped)
    monkeypatch.setattr(files, "package_root", lambda: tmp_path / "pkg")
    assert bench(["sglang_moe", "--smoke", "--budget", "3", "--rounds", "1", "--strategy", "random", "--out",
                  str(tmp_path / "res")]) == 0
    res = json.loads((tmp_path / "res" / "sglang_moe.json").read_text())
    a, b = res["models"]["tiny-a"], res["models"]["tiny-b"]
    assert [r["M"] for r in a["rows"]] == [1, 5] and a["max_evaluations"] <= 3
    assert all(r["shipped_us"] and r["flytune_us"] and r["default_us"] for r in a["rows"]) and not any(
        r["wrong"] for r in a["rows"])
    assert a["geomean_shipped_over_flytune"] > 0 and b["geomean_shipped_over_flytune"] is None  # no file for b
    # the export is the store's selection winner, re-timed beside the others and compared with the shipped entry
    import sqlite3

    from benchmarks.sglang_moe import SMOKE
    from flytune_nb.core.config import Config

    con = sqlite3.connect(tmp_path / "res" / "sglang_moe.db")
    winners = {json.loads(shape)["M"]: str(Config.from_json(w)) for shape, w in con.execute(
        "select shape, winner from selections") if json.loads(shape)["N"] == SMOKE["tiny-a"]["N"]}
    assert res["timing"] == "graph" and a["geomean_shipped_over_export"] > 0
    for r in a["rows"]:
        named = {"default": r["default_config"], "shipped": r["shipped_config"], "flytune": r["flytune_config"]}
        assert r["export_is"] == next((k for k, c in named.items() if c == r["export_config"]), "export")
    # the same comparison rebuilt from the store alone (what a CPU machine does with a GPU run's store)
    assert bench(["sglang_moe", "--smoke", "--from-store", str(tmp_path / "res" / "sglang_moe.db"), "--name",
                  "from_store", "--out", str(tmp_path / "res")]) == 0
    rep = json.loads((tmp_path / "res" / "from_store.json").read_text())["models"]["tiny-a"]
    assert [r["M"] for r in rep["rows"]] == [1, 5]
    for r, swept in zip(rep["rows"], a["rows"]):
        timed = {str(Config.from_json(c)): p * 1e3 for c, p in con.execute(
            "select config, p50 from trials where status='ok' and fidelity='full' and shape=?",
            (json.dumps({"M": r["M"], **SMOKE["tiny-a"]}, separators=(",", ":")),))}
        assert r["shipped_config"] == swept["shipped_config"]  # the same shipped entry, found from files alone
        assert r["shipped_us"] == pytest.approx(timed[swept["shipped_config"]])
        assert r["flytune_us"] == pytest.approx(min(v for c, v in timed.items() if c != swept["shipped_config"]))
        assert r["export_config"] == winners[r["M"]]
    con.close()
    assert {Path(p).name for p in res["exports"]} == {"E=4,N=64,device_name=CPU_interpreter.json",
                                                       "E=8,N=32,device_name=CPU_interpreter.json"}
    assert "shipped / flytune" in (tmp_path / "res" / "sglang_moe.md").read_text()


def test_a_file_sglang_cannot_read_is_failing_even_when_its_hidden_size_is_unknown(tmp_path):
    """Reading a file needs no hidden size: a malformed file of an E and N no model, --shape or provenance covers is
    still one a server fails on, so it is named as unreadable (exit 1), not left out as 'hidden size unknown'."""
    import random

    from flytune_nb.artifacts.sglang_audit import audit, known_shapes

    rng = random.Random()
    E, N = rng.randrange(3, 60), 16 * rng.randrange(3, 40)
    while {(E, N), (E + 1, N), (E, N + 16), (E + 2, N)} & set(known_shapes()):
        E, N = rng.randrange(3, 60), 16 * rng.randrange(3, 40)
    root = tmp_path / "sglang"
    folder = root / "configs" / running()
    folder.mkdir(parents=True)
    bad = {f"E={E},N={N},device_name=CPU_interpreter.json": '{"1": {"BLOCK_SIZE_M": 16,}}',
           f"E={E + 1},N={N},device_name=CPU_interpreter.json": json.dumps({"triton_version": "3.6.0"}),
           f"E={E},N={N + 16},device_name=CPU_interpreter.json": "[]"}
    for name, text in bad.items():
        (folder / name).write_text(text)
    good = f"E={E + 2},N={N},device_name=CPU_interpreter.json"
    (folder / good).write_text(files.render({1: _entry(1)}))
    timed = []
    a = audit(root, dtype="fp16", measure=lambda *args: timed.append(args))
    assert timed == []
    assert sorted(n for n, _ in a.unreadable) == sorted(bad)
    assert [n for n, _ in a.skipped] == [good]  # readable, hidden size unknown: left out, not failing



def test_an_entry_or_a_recorded_shape_the_kernel_refuses_is_reported_and_the_audit_goes_on(tmp_path):
    """A batch size key below 1 (SGLang int()s it and serves it to the batch sizes nearest it) and a provenance.json
    whose top-k exceeds E are findings about those files: the audit names them and times every other entry, rather
    than stopping at them with an error that names no file and writes no report."""
    import random

    from flytune_nb.artifacts.sglang_audit import audit, to_markdown
    from flytune_nb.measure.trial import Trial

    rng = random.Random()
    zero_or_less = rng.choice([0, -1, -rng.randrange(2, 100)])
    root = tmp_path / "sglang"
    keyed = _fake_shipped(root, running(), "E=4,N=64,device_name=CPU_interpreter.json",
                          {1: _entry(1), 4: _entry(4)})
    keyed.write_text(keyed.read_text().replace('"4":', f'"{zero_or_less}":'))
    recorded = _fake_shipped(root, running(), "E=4,N=32,device_name=CPU_interpreter.json", {1: _entry(1)})
    topk = rng.randrange(5, 9)  # more than the E=4 experts of the file's name
    (recorded.parent / "provenance.json").write_text(json.dumps(
        {recorded.name: {"1": {"shape": {"E": 4, "N": 32, "K": 32, "topk": topk}}}}))
    timed = []

    def measure(spec, shape, dtype, config):
        timed.append((shape["N"], shape["M"]))
        return Trial(spec.name, shape, dtype, config, "ok", p50=0.1)

    a = audit(root, shapes={(4, 64): {"K": 32, "topk": 2}}, dtype="fp16", measure=measure)
    assert sorted(set(timed)) == [(64, 1)]
    by_m = {e.M: e for e in a.entries}
    assert by_m[1].status == "OK"
    assert by_m[zero_or_less].status == "ERROR" and by_m[zero_or_less] in a.wrong
    assert f"batch size {zero_or_less}" in by_m[zero_or_less].reason
    (skipped,) = [why for n, why in a.skipped if n == recorded.name]
    assert f"topk={topk}" in skipped and "topk <= E" in skipped
    assert recorded.name in to_markdown(a)


def test_lookup_of_the_down_gemm_answers_as_a_server_pointed_at_the_looked_up_folder(tmp_path, monkeypatch, capsys):
    """``flytune lookup sglang_fused_moe_down ... --dir D`` is what a server started with
    SGLANG_MOE_CONFIG_DIR=D/sglang_fused_moe runs: without a ``_down`` file there, the up entry of D's up file (SGLang
    reuses the up table), not SGLang's get_default_config; with one, its entry with the BLOCK_SIZE_M of D's up entry
    (SGLang overwrites a mismatching one), whatever this shell's SGLANG_MOE_CONFIG_DIR says."""
    import random

    from flytune_nb.serve.lookup import LOOKUP
    from flytune_nb.ui.cli import main

    rng = random.Random()
    (tmp_path / "pkg" / "configs" / running()).mkdir(parents=True)  # SGLang ships nothing for this device
    monkeypatch.setattr(files, "package_root", lambda: tmp_path / "pkg")
    monkeypatch.delenv("SGLANG_MOE_CONFIG_DIR", raising=False)
    out_dir = tmp_path / "exports"
    kdir = out_dir / "sglang_fused_moe"
    up_bm, down_bm = rng.sample([16, 32, 64, 128], 2)
    m_up = rng.choice([1, 2, 4, 8])
    up_entry = {**_entry(m_up, bn=rng.choice([64, 128])), "BLOCK_SIZE_M": up_bm, "GROUP_SIZE_M": 16}
    _fake_shipped(kdir, running(), "E=4,N=64,device_name=CPU_interpreter.json", {m_up: up_entry})
    args = ["lookup", "sglang_fused_moe_down", f"M={rng.randrange(1, 64)} E=4 N=64 K=32 topk=2", "--dtype", "fp16",
            "--dir", str(out_dir)]
    LOOKUP.clear()
    assert main(args) == 0
    assert f"{Config.from_dict(up_entry)}  (source: default," in capsys.readouterr().out

    down_entry = {**_entry(m_up, bn=32), "BLOCK_SIZE_M": down_bm, "num_warps": 8}
    _fake_shipped(kdir, running(), "E=4,N=64,device_name=CPU_interpreter_down.json", {m_up: down_entry})
    elsewhere = tmp_path / "elsewhere"  # this shell's folder pins yet another BLOCK_SIZE_M: not the one looked up
    _fake_shipped(elsewhere, running(), "E=4,N=64,device_name=CPU_interpreter.json",
                  {m_up: {**up_entry, "BLOCK_SIZE_M": 256}})
    monkeypatch.setenv("SGLANG_MOE_CONFIG_DIR", str(elsewhere))
    LOOKUP.clear()
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"{Config.from_dict({**down_entry, 'BLOCK_SIZE_M': up_bm})}  (source: artifact," in out
    assert f"BLOCK_SIZE_M={down_bm}" in out  # the file's value is named where it is overridden
    LOOKUP.clear()


def test_a_folder_sglang_reads_no_version_from_is_named_where_a_server_would_fail_on_it(tmp_path, monkeypatch,
                                                                                       capsys):
    """SGLang int()s every ``triton_*`` name under configs/ once the running Triton's folder lacks the file: a
    ``triton_3_6_0+git1`` folder (a local Triton build's name) or a stray ``triton_notes`` file makes a server raise
    ValueError at its first MoE layer. Read as flytune reads it, the folder served the older folder's entry; lookup
    and the down GEMM's pinned up config say the folder fails instead, and the file in the running folder is read
    as SGLang reads it, first."""
    from flytune_nb.serve.lookup import LOOKUP
    from flytune_nb.ui.cli import main

    (tmp_path / "pkg" / "configs" / running()).mkdir(parents=True)
    monkeypatch.setattr(files, "package_root", lambda: tmp_path / "pkg")
    monkeypatch.delenv("SGLANG_MOE_CONFIG_DIR", raising=False)
    kdir = tmp_path / "exports" / "sglang_fused_moe"
    name = "E=4,N=64,device_name=CPU_interpreter.json"
    older = _fake_shipped(kdir, "triton_1_0_0", name, {1: _entry(1)})
    for stray in ("triton_3_6_0+git1", "triton_notes"):
        path = kdir / "configs" / stray
        path.mkdir() if stray.endswith("git1") else path.write_text("")
        with pytest.raises(files.UnreadableVersionFolder, match=re.escape(stray) + ": SGLang reads a Triton version"):
            files.resolve(kdir, name, "3.6.0")
        LOOKUP.clear()
        assert main(["lookup", "sglang_fused_moe", "M=1 E=4 N=64 K=32 topk=2", "--dtype", "fp16", "--dir",
                     str(tmp_path / "exports")]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"flytune: error: {path}: SGLang reads a Triton version") and "\n" not in err.strip()
        monkeypatch.setenv("SGLANG_MOE_CONFIG_DIR", str(kdir))
        with pytest.raises(files.UnreadableVersionFolder):
            get_kernel("sglang_fused_moe_down").default(TINY, "fp16", current_device())
        monkeypatch.delenv("SGLANG_MOE_CONFIG_DIR")
        (path.rmdir if path.is_dir() else path.unlink)()
    assert files.resolve(kdir, name, "3.6.0") == (older, "triton_1_0_0")
    (kdir / "configs" / "triton_3_6_0+git1").mkdir()
    here = _fake_shipped(kdir, files.version_dir("3.6.0"), name, {1: _entry(1)})
    assert files.resolve(kdir, name, "3.6.0") == (here, "triton_3_6_0")  # found first: nothing else is listed
    LOOKUP.clear()


def test_a_dotted_version_folder_is_read_as_sglang_reads_it(tmp_path):
    """SGLang makes each ``triton_*`` name a version by turning its '_' into '.' before int() of each part, so
    ``triton_3.5.0`` is version 3.5.0 to it (no ValueError), and it then reads ``triton_3_5_0/``, the folder that
    version's name spells, never the dotted one itself."""
    import triton

    name = "E=4,N=64,device_name=CPU_interpreter.json"
    (tmp_path / "configs" / running()).mkdir(parents=True)
    dotted = _fake_shipped(tmp_path, "triton_3.5.0", name, {1: _entry(1)})
    assert files.resolve(tmp_path, name, triton.__version__) == (None, None)  # SGLang reads no file here, and runs
    older = _fake_shipped(tmp_path, "triton_1_0_0", name, {1: _entry(2)})
    assert files.resolve(tmp_path, name, triton.__version__) == (older, "triton_1_0_0")
    spelled = _fake_shipped(tmp_path, "triton_3_5_0", name, {1: _entry(3)})
    assert dotted.is_file() and files.resolve(tmp_path, name, triton.__version__) == (spelled, "triton_3_5_0")
