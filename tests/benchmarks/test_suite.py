"""The benchmark suite without a GPU: `python -m benchmarks` lists every script with its question, every script's
--help works, and the scripts that need no GPU (stored-sweep replay, heuristic regret, lookup cost) run on tiny
arguments and write their result files where --out says."""
import ast
import functools
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import common
from benchmarks.__main__ import discover, main as bench
from flytune_nb.core.config import Config
from flytune_nb.core.device import DESCRIBED, current_device
from flytune_nb.core.registry import get_kernel
from flytune_nb.engine.store import Store
from flytune_nb.measure.trial import Trial
from tests.conftest import FIXTURES, REPO

BENCH = Path(REPO) / "benchmarks"


@functools.cache  # read once: parsing every script costs ~0.09 s, and each of ~40 parametrised tests asks
def _scripts() -> dict[str, str]:
    """Every benchmarks/*.py but the package's own modules, common.py and helpers: {name: docstring's first line}."""
    out = {}
    for path in sorted(BENCH.glob("*.py")):
        text = path.read_text()
        if path.stem.startswith("_") or path.stem == "common" or "\nHELPER = True" in text:
            continue
        doc = ast.get_docstring(ast.parse(text)) or ""  # a script without one is a failure of the listing test
        out[path.stem] = (doc.splitlines() or [""])[0]
    return out


def test_the_listing_names_every_script_with_its_question():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-m", "benchmarks"], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    listed = {line.split()[0]: line.split(None, 1)[1] for line in out.stdout.splitlines() if line.startswith("  ")}
    scripts = _scripts()
    assert listed == scripts
    assert {"kernels_grid", "heuristic_regret", "surrogate_gemm", "lookup_cost"} <= set(listed)
    assert all("?" in question for question in listed.values()), listed  # each names the question it answers


def test_a_listing_whose_reader_left_ends_quietly():
    """`python -m benchmarks | head -3` from a user's shell (no PYTHONUNBUFFERED): the listing, shorter than stdout's
    buffer, is written after the reader left; the shell's status for that (141) and nothing on stderr, not Python's
    "Exception ignored ... BrokenPipeError" and 120."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))
    p = subprocess.Popen([sys.executable, "-m", "benchmarks"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    p.stdout.close()
    err = p.stderr.read()
    assert p.wait(timeout=60) == 141 and not err.strip(), err


def test_the_readme_table_has_a_row_per_script_with_a_result_that_exists():
    readme = (BENCH / "README.md").read_text()
    rows = {line.split("`")[1]: line for line in readme.splitlines() if line.startswith("| `")
            and not line.startswith("| `NVIDIA")}
    assert set(_scripts()) <= set(rows), sorted(set(_scripts()) - set(rows))
    for name in _scripts():
        for link in re.findall(r"\]\((results/[^)]+)\)", rows[name]):
            assert (BENCH / link).is_file(), link


def test_a_helper_module_is_not_a_benchmark(tmp_path):
    (tmp_path / "real.py").write_text('"""Is it real?"""\n\ndef main():\n    pass\n')
    (tmp_path / "shared.py").write_text('"""Shared code."""\nHELPER = True\n\ndef main():\n    pass\n')
    (tmp_path / "nodoc.py").write_text("def main():\n    pass\n")
    (tmp_path / "nomain.py").write_text('"""A module."""\n')
    assert discover(tmp_path) == {"real": "Is it real?"}


@pytest.mark.parametrize("name", sorted(_scripts()))
def test_every_script_explains_itself_without_a_gpu(name, capsys):
    with pytest.raises(SystemExit) as stop:
        bench([name, "--help"])
    assert stop.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith(f"usage: python -m benchmarks {name}")
    assert _scripts()[name] in text  # the description starts with the question
    assert "--out DIR" in text


def test_an_unknown_name_gets_one_line_and_a_suggestion(capsys):
    assert bench(["kernels_grd"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "did you mean kernels_grid" in err


GPU_ONLY = sorted(n for n in _scripts() if "need_gpu(" in (BENCH / f"{n}.py").read_text())


@pytest.mark.skipif(current_device().is_gpu, reason="asks what happens without a GPU")
@pytest.mark.parametrize("name", GPU_ONLY)
def test_a_gpu_benchmark_on_a_cpu_says_so_in_one_line(name, tmp_path, capsys):
    """Its options parse with their defaults, then it stops in one line and writes nothing."""
    assert bench([name, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "GPU" in err, err
    assert list(tmp_path.iterdir()) == []


def test_write_files_a_result_under_its_device_with_date_and_versions(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    common.write("probe", {"value": 1.5}, "# probe")  # the signature other scripts call
    here = tmp_path / common.device_name() / "probe.json"
    payload = json.loads(here.read_text())
    assert payload["value"] == 1.5
    assert payload["env"]["date"] and payload["env"]["torch"] and payload["env"]["triton"]
    assert (tmp_path / common.device_name() / "probe.md").read_text() == "# probe\n"
    common.write("probe", {"env": {"device": "NVIDIA_H200"}, "value": 2}, "# again", device="NVIDIA_H200")
    assert json.loads((tmp_path / "NVIDIA_H200" / "probe.json").read_text())["value"] == 2


def _tiny_store(path: Path) -> dict:
    """A store of two rmsnorm shapes measured "on the H200", with known regrets; returns the expected numbers."""
    store = Store(path)
    run = store.start_run("rmsnorm", {}, ["bf16"], "exhaustive", None, "NVIDIA_H200")
    spec = get_kernel("rmsnorm")
    old = Config({"BLOCK_N": 8192}, num_warps=2, num_stages=1)  # the "swept" default: not what the heuristic picks
    best = Config({"BLOCK_N": 4096}, num_warps=32, num_stages=1)  # never the heuristic's pick at M=1 or 256
    # p50 (ms) per shape: old default, best, the heuristic's pick now (None: never timed)
    times = {1: (2.0, 1.0, 1.25), 256: (3.0, 1.0, None)}
    for m, (old_ms, best_ms, now_ms) in times.items():
        shape = {"M": m, "N": 4096}
        now = spec.default(shape, "bf16", DESCRIBED["NVIDIA_H200"])
        assert now not in (old, best)
        picks = [(old, old_ms, True), (best, best_ms, False)] + ([(now, now_ms, False)] if now_ms else [])
        for config, ms, is_default in picks:
            store.add(Trial("rmsnorm", shape, "bf16", config, "ok", p20=ms, p50=ms, p80=ms, device="NVIDIA_H200"),
                      key=f"key-{m}", run_id=run, is_default=is_default)
    store.close()
    return {"swept": math.sqrt(2.0 * 3.0), "swept_small": 2.0, "swept_large": 3.0, "now": 1.25, "unmeasured": 1}


def test_heuristic_regret_on_a_store(tmp_path):
    want = _tiny_store(tmp_path / "tiny.db")
    assert bench(["heuristic_regret", "--store", str(tmp_path / "tiny.db"), "--out", str(tmp_path / "out")]) == 0
    payload = json.loads((tmp_path / "out" / "heuristic_regret.json").read_text())
    (section,) = payload["stores"]
    (swept,), (now,) = section["swept_default"], section["default_now"]
    assert swept["geomean"] == pytest.approx(want["swept"])
    assert swept["geomean_M_le_128"] == pytest.approx(want["swept_small"])
    assert swept["geomean_M_gt_128"] == pytest.approx(want["swept_large"])
    assert swept["worst"] == pytest.approx(3.0) and swept["worst_shape"] == {"M": 256, "N": 4096}
    assert now["shapes"] == 1 and now["geomean"] == pytest.approx(want["now"])
    assert section["unmeasured_now"] == want["unmeasured"]
    assert "## `tiny.db`" in (tmp_path / "out" / "heuristic_regret.md").read_text()


def test_heuristic_regret_scores_the_heuristic_now_on_a_store_swept_on_the_cpu(tmp_path):
    """A store swept here (no GPU): the current heuristic is asked about the device the store records (the
    interpreter), so its default, which the sweep timed, is scored, not counted as never timed."""
    from flytune_nb import Sweep

    Sweep("rmsnorm", "M=1,4 N=256", ["fp32"], db=tmp_path / "cpu.db", isolate=False, baselines=(), budget=2).run()
    assert bench(["heuristic_regret", "--store", str(tmp_path / "cpu.db"), "--out", str(tmp_path / "out")]) == 0
    (section,) = json.loads((tmp_path / "out" / "heuristic_regret.json").read_text())["stores"]
    assert section["unmeasured_now"] == 0 and section["default_now"][0]["shapes"] == 2


def test_heuristic_regret_on_a_missing_store_is_one_line(tmp_path, capsys):
    assert bench(["heuristic_regret", "--store", str(tmp_path / "none.db"), "--out", str(tmp_path)]) == 2
    assert "none.db" in capsys.readouterr().err


def test_the_surrogate_replay_on_the_h200_fixture(tmp_path):
    fixture = FIXTURES / "h200_gemm_sweeps.json"
    assert bench(["surrogate_gemm", "--replay", str(fixture), "--seeds", "1", "--budget-fraction", "0.02",
                  "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "surrogate_gemm.json").read_text())
    sweeps = json.loads(fixture.read_text())["sweeps"]
    assert [s["configs"] for s in result["shapes"]] == [len(s["p50_ms"]) for s in sweeps]
    for row, sweep in zip(result["shapes"], sweeps):
        assert row["shape"] == sweep["shape"]
        assert row["best_ms"] == min(p for p in sweep["p50_ms"].values() if p is not None)
        assert row["budget"] == max(1, round(0.02 * len(sweep["p50_ms"])))
        assert row["surrogate"] >= 1.0 and row["random"] >= 1.0  # nothing beats the exhaustive best
    assert result["env"]["date"] and result["measured_on"].startswith("sweeps measured on NVIDIA_H200")
    assert (tmp_path / "surrogate_gemm.md").read_text().startswith("# Surrogate (Optuna TPE) vs random at 2%")


def test_lookup_cost_runs_on_the_cpu(tmp_path):
    assert bench(["lookup_cost", "--calls", "1000", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "lookup_cost.json").read_text())
    assert result["calls"] == 1000 and 0 < result["lookup_hit_us"] < 1e4
    assert 0 < result["tuned_config_for_memory_hit_us"] < 1e4
    assert result["env"]["python"] and result["env"]["triton"]
    assert "| artifact lookup hit" in (tmp_path / "lookup_cost.md").read_text()


def test_the_rescore_of_the_committed_ab_run(tmp_path):
    run = BENCH / "results" / "NVIDIA_H200" / "heuristic_ab.json"
    assert bench(["heuristic_ab_rescore", "--run", str(run), "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "heuristic_ab_rescore.json").read_text())
    shapes = len(json.loads(run.read_text())["rows"])
    assert sum(r["shapes"] for r in result["rows"]) + len(result["unmeasured"]) == shapes
    assert all(r["geomean"] >= 1.0 and r["worst"] >= 1.0 for r in result["rows"])


def test_gemm_balance_times_every_mid_m_tile_on_both_paths_and_each_launches():
    """Above M = 128 gemm_balance times row and column tiles of 64-256 on the pointer and the TMA path; every one fits
    the H200's shared memory, splits only where the tiles leave SMs idle, and the pointer ones compute correctly."""
    from benchmarks.gemm_balance import family
    from flytune_nb.core.device import from_properties
    from flytune_nb.measure.correctness import compare
    from tests.conftest import H200_PROPS

    h200 = from_properties(H200_PROPS, hip=False)
    configs = family({"M": 256, "N": 6144, "K": 4096}, h200)
    tiles = {(c["BLOCK_SIZE_M"], c["BLOCK_SIZE_N"], c.to_dict().get("TMA", 0)) for c in configs}
    # 256x256 is the one tile that fits no BK/warps/stages choice (its fp32 accumulator alone is 256 KiB)
    assert tiles == {(bm, bn, tma) for bm in (64, 128, 256) for bn in (64, 128, 256) for tma in (0, 2)
                     if (bm, bn) != (256, 256)}
    # 96 tiles of 128x128 on 132 SMs: split 2 offered for them on the pointer path only; 384 of 64x64 fill them
    split = {(c["BLOCK_SIZE_M"], c["BLOCK_SIZE_N"]) for c in configs if c.to_dict().get("SPLIT_K", 1) == 2}
    assert (128, 128) in split and (64, 64) not in split
    assert not any(c.to_dict().get("SPLIT_K", 1) > 1 and c.to_dict().get("TMA") for c in configs)
    # the decode family at M <= 128: one row tile on the pointer path, 64- and 128-row tiles on TMA
    decode = family({"M": 96, "N": 6144, "K": 4096}, h200)
    assert {c["BLOCK_SIZE_M"] for c in decode if not c.to_dict().get("TMA")} == {128}
    assert {c["BLOCK_SIZE_M"] for c in decode if c.to_dict().get("TMA")} == {64, 128}
    spec, dev, shape = get_kernel("matmul"), current_device(), {"M": 24, "N": 64, "K": 256}
    small = family({"M": 256, "N": 64, "K": 256}, h200)
    pointer = [c for c in small if not c.to_dict().get("TMA")][:: max(1, len(small) // 6)]
    for cfg in pointer:
        inputs = spec.make_inputs(shape, "fp16", dev)
        v = compare(spec.run(inputs, cfg), spec.reference(inputs), spec.tol("fp16"), spec.element_tol("fp16"))
        assert v.ok, (str(cfg), v.reason)


def test_the_matmul_wrapper_host_cost_runs_on_the_cpu_through_each_load_path(tmp_path):
    """Without a GPU the wrapper is shown a stand-in H200, so its TMA paths run (descriptors built, no launch), and the
    result says whose wrapper decisions it timed; every path and piece gets a time."""
    assert bench(["matmul_wrapper_host", "--calls", "20", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "matmul_wrapper_host.json").read_text())
    assert [r["shape"]["M"] for r in result["rows"]] == [1, 64] and result["calls"] == 20
    for row in result["rows"]:
        assert all(0 < row[k] < 1e4 for k in row if k != "shape")
    assert ("stand-in" in result["env"]["wrapper_device"]) != current_device().is_gpu
    assert "| swapped-operand TMA |" in (tmp_path / "matmul_wrapper_host.md").read_text()


def test_gemm_direct_store_candidates_are_correct_and_its_report_shows_what_failed():
    """Every config gemm_direct_store times computes a @ w.T in the interpreter (a ragged shape: edge tiles both
    ways), and its table renders a shape whose timing broke, a config that did not compile and one that was wrong,
    so no GPU run is lost to the report after its timings."""
    from benchmarks.gemm_direct_store import CANDIDATES, _config, report
    from flytune_nb.measure.timer import CpuTimer
    from flytune_nb.measure.trial import evaluate

    spec, dev = get_kernel("matmul"), current_device()
    # M=130, N=200: 4 tiles of 128x128 and 6 of 64x128, more than the interpreter's 2 programs (4 with two a SM):
    # the persistent ones step over tiles; edge tiles both ways. evaluate poisons the output first.
    for name, *tile in CANDIDATES:
        t = evaluate(spec, {"M": 130, "N": 200, "K": 128}, "fp16", _config(*tile), dev, CpuTimer(reps=1, warmup=0))
        assert t.ok, (name, t.status, t.reason)
    env = {"device": "NVIDIA_H200", "arch": "sm_90", "date": "now", "torch": "t", "triton": "3.6.0",
           "flytune_nb": "0.1.0"}
    bad, wrong = CANDIDATES[0][0], CANDIDATES[1][0]
    rows = [{"M": 256, "N": 11008, "K": 4096, "default": "d", "errors": {}, "rel_error": {},
             "timing_error": "RuntimeError: capture failed"},
            {"M": 512, "N": 4096, "K": 4096, "default": "d", "errors": {bad: "CompilationError: out of resources"},
             "rel_error": {"default": 1e-3, wrong: math.nan},
             "graph_us": {"cuBLAS": 20.0, "default": 25.0}, "flushed_us": {"cuBLAS": 30.0, "default": 24.0}}]
    text = report(rows, env, 1.0)
    assert "| 256 | 11008 | 4096 | - | timing failed: RuntimeError: capture failed |" in text
    assert "| 512 | 4096 | 4096 | graph | 20.0 | **25.0 (0.80x)** | failed | wrong |" in text
    assert "| 512 | 4096 | 4096 | flushed | 30.0 | **24.0 (1.25x)** | failed | wrong |" in text
    assert "Outputs off by 1e-2 or more: 1; configs that failed to compile or launch: 1" in text


def test_timing_order_report_shows_each_protocols_ratio_and_the_order_effect():
    from benchmarks.timing_order import PROTOCOLS, report

    row = {"M": 256, "N": 11008, "K": 4096, "config": "c", "rel_error": 1e-3}
    for p, (ours, theirs) in zip(PROTOCOLS, [(50.0, 40.0), (46.0, 40.0), (48.0, 40.0), (48.0, 40.0)]):
        row[p] = {"graph": (ours * 1e-3, theirs * 1e-3), "flushed": (ours * 2e-3, theirs * 2e-3)}
    text = report([row], {"device": "NVIDIA_H200", "arch": "sm_90", "date": "now", "torch": "t",
                          "triton": "3.6.0", "flytune_nb": "0.1.0"}, 1.0)
    assert ("| 256 | 11008 | 4096 | graph | 0.800x (50.0 / 40.0) | 0.870x (46.0 / 40.0) | 0.833x (48.0 / 40.0) | "
            "0.833x (48.0 / 40.0) | -0.070 |") in text


@pytest.mark.parametrize("n", [1, 2, 3, 5, 11])
def test_side_by_side_order_gives_every_side_every_place_alike(n):
    """Over 2n rounds each of n sides takes every place in the round equally often (two sides: ABBA), so no side is
    always timed right after the same other one's work."""
    from benchmarks.serving_vs_torch import side_order

    names = [chr(65 + i) for i in range(n)]
    rounds = [side_order(names, i) for i in range(2 * n)]
    assert all(sorted(r) == names for r in rounds)
    for place in range(n):
        assert sorted(r[place] for r in rounds) == sorted(names * 2)
    if n == 2:
        assert ["".join(r) for r in rounds] == ["AB", "BA", "BA", "AB"]


def test_cublas_tiles_reads_the_tile_from_either_kernel_family_and_reports_fill_and_both_ratios():
    from flytune_nb.kit.spaces import wave_use as fill
    from benchmarks.gemm_cublas_tiles import cublas_tile, report

    assert cublas_tile("nvjet_sm90_tst_168x128_64x5_1x2_h_bz_TNN") == (168, 128)
    assert cublas_tile("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_kernel") == (
        128, 256)
    assert cublas_tile("void at::native::vectorized_elementwise_kernel<4>") is None
    assert fill(132, 132) == 1.0 and fill(96, 132) == pytest.approx(96 / 132) and fill(133, 132) == pytest.approx(
        133 / 264)
    row = {"shape": {"M": 256, "N": 11008, "K": 4096}, "cublas_kernels": ["nvjet_sm90_tst_168x128_64x5_1x2_h_bz_TNN"],
           "cublas_tile_nm": (168, 128), "cublas_tiles": 132, "cublas_fill": 1.0, "ours_tile_nm": (128, 128),
           "ours_split_k": 1, "ours_tiles": 172, "ours_fill": round(fill(172, 132), 3),
           "graph_us": {"ours": 50.0, "cublas": 40.0}, "flushed_us": {"ours": 52.0, "cublas": 39.0}}
    text = report([row], 132, {"device": "NVIDIA_H200", "arch": "sm_90", "date": "now", "torch": "t",
                               "triton": "3.6.0", "flytune_nb": "0.1.0"})
    # 0.80x = 0.65 (our fill over cuBLAS's) x 1.23 (the rest)
    assert ("| 256 | 11008 | 4096 | 168x128 | 132 | 1.0 | 128x128 | 172 | 0.652 | 40.0 us | 50.0 us | 0.80x | 0.65 | "
            "1.23 | 0.75x |" in text), text


def test_cublas_tiles_rewrites_its_markdown_from_a_stored_result_without_a_gpu(tmp_path):
    from benchmarks.gemm_cublas_tiles import main

    env = {"device": "NVIDIA_H200", "arch": "sm_90", "date": "now", "torch": "t", "triton": "3.6.0",
           "flytune_nb": "0.1.0"}
    row = {"shape": {"M": 512, "N": 6144, "K": 4096}, "cublas_kernels": ["nvjet_sm90_tst_192x128_64x5_1x2_h_bz_TNT"],
           "cublas_tile_nm": [192, 128], "cublas_tiles": 128, "cublas_fill": 0.97, "ours_tile_nm": [128, 64],
           "ours_split_k": 1, "ours_tiles": 384, "ours_fill": 0.97, "graph_us": {"ours": 47.5, "cublas": 40.0},
           "flushed_us": {"ours": 48.0, "cublas": 40.0}}
    stored = tmp_path / "stored.json"
    stored.write_text(json.dumps({"env": env, "sm_count": 132, "rows": [row]}))
    main(["--report", str(stored), "--out", str(tmp_path / "out")])
    text = (tmp_path / "out" / "gemm_cublas_tiles.md").read_text()
    # the same fill on both sides: the whole 0.84x is per-SM speed
    assert ("| 512 | 6144 | 4096 | 192x128 | 128 | 0.97 | 128x64 | 384 | 0.97 | 40.0 us | 47.5 us | 0.84x | 1.00 | "
            "0.84 |" in text), text
    assert json.loads((tmp_path / "out" / "gemm_cublas_tiles.json").read_text())["rows"][0]["ours_tiles"] == 384


@pytest.mark.parametrize("persistent", [False, True])
def test_panel_tiles_compute_the_product_on_every_panel_and_schedule(persistent):
    """Three panels (32 + 16 + 16 columns), an M and N that leave partial tiles, a K of two steps and a half: every
    output element is written once, by the panel that owns its column."""
    import torch

    from flytune_nb.kit.spaces import wave_use as fill
    from benchmarks.gemm_panel_tiles import candidates, panel_matmul

    a = torch.randn(70, 80, dtype=torch.float16)
    w = torch.randn(150, 80, dtype=torch.float16)
    for bm, widths in ((32, (32, 16, 16)), (16, (32,)), (32, (16, 16))):
        out = torch.full((70, 150), float("nan"), dtype=torch.float16)
        panel_matmul(a, w, out, bm, widths, 32, persistent=persistent, sms=3, num_stages=2)()
        ref = a.float() @ w.float().T
        assert (out.float() - ref).abs().max().item() < 2e-2 * ref.abs().max().item(), (bm, widths)
    # M=256, N=11008 on 132 SMs: 128 x (128+32+16) makes 2 x 63 = 126 tiles, the largest that fills the wave to 90%;
    # the plain 128 x 128 tile (172 tiles, 65%) comes last, for comparison
    got = candidates(256, 11008, 132)
    assert got[0] == (128, (128, 32, 16)) and got[-1] == (128, (128,))
    assert all(fill(-(-256 // bm) * -(-11008 // sum(p)), 132) >= 0.9 for bm, p in got[:-1])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_tail_split_kernel_runs_whole_rounds_whole_and_sums_the_cut_tail(dtype):
    """gemm_tail_split's kernel on the interpreter, described as 4 SMs: 5 x 7 tiles of 16x16 run 32 whole and cut
    the last 3 in 2 or 3 K ranges (K ragged at its last step: zero-filled TMA edges); a grid under one round is
    cut whole. Against an fp64 product; a second call gives the same bits (the counters were left at zero)."""
    import torch

    from benchmarks.gemm_tail_split import tail_split_matmul, whole_tiles

    assert whole_tiles(172, 132) == 132 and whole_tiles(96, 132) == 0 and whole_tiles(264, 132) == 264
    dt = getattr(torch, dtype)
    for (M, N, K), split in (((70, 104, 72), 2), ((70, 104, 160), 3), ((10, 40, 96), 2)):
        a, w = torch.randn(M, K, dtype=dt), torch.randn(N, K, dtype=dt)
        out = torch.full((M, N), float("nan"), dtype=dt)
        call = tail_split_matmul(a, w, out, (16, 16, 16, 4, 2), split, sms=4)
        first = call().clone()
        ref = a.double() @ w.double().T
        assert (first.double() - ref).abs().max().item() < 1e-2 * ref.abs().max().item(), (M, N, K, split)
        assert torch.equal(call(), first)


def test_tail_split_timings_cover_the_splits_the_schedule_model_ranks_first():
    """Which K splits gemm_tail_split times for a grid's last round, and the tile-times its schedule model
    predicts: M=256, N=11008 in 128x128 tiles on 132 SMs (172 tiles: 132 whole, then 40 to cut) runs 2 tile-times
    unsplit and 1.33 cut in 3; a grid under one round is all tail (96 tiles cut in 4: three rounds of quarter
    tiles); a grid filling its last round has nothing to cut."""
    from benchmarks.gemm_tail_split import rounds, tail_splits

    assert rounds(172, 132, 1) == 2 and abs(rounds(172, 132, 3) - 4 / 3) < 1e-9
    assert 3 in tail_splits(172, 132, 64) and 2 in tail_splits(172, 132, 64)
    assert tail_splits(96, 132, 64) == [4] and rounds(96, 132, 4) == 0.75
    assert tail_splits(264, 132, 64) == [] and tail_splits(112, 132, 64) == []  # 112 x 2 makes 2 rounds: no gain
    assert all(64 // s >= 2 for s in tail_splits(172, 132, 64))
    assert tail_splits(172, 132, 4) == [2]  # 4 K steps: a split keeps at least two


def test_tail_split_report_puts_each_variant_beside_cublas():
    from benchmarks.gemm_tail_split import report

    tried = [{"tile": [128, 128, 64, 4, 4], "kind": "persistent", "split": 1, "config": "p", "tiles": 172,
              "model_rounds": 1.3, "graph_us": 45.0, "rel_err": 0.0, "same_bits": True},
             {"tile": [128, 128, 64, 4, 4], "kind": "tail split", "split": 3, "config": "128x128x64 split 3 tail",
              "tiles": 172, "model_rounds": 4 / 3, "graph_us": 36.0, "rel_err": 0.0, "same_bits": True},
             {"tile": [128, 256, 64, 8, 3], "kind": "one per tile", "split": 1, "config": "o", "tiles": 86,
              "model_rounds": 1.0, "error": "OutOfResources: shared memory"}]
    rows = [{"shape": {"M": 256, "N": 11008, "K": 4096}, "tried": tried, "wrong": [], "best_tail_split": tried[1],
             "graph_us": {"cublas": 36.0, "tuned": 45.0, "persistent": 45.0, "tail split": 40.0},
             "flushed_us": {"cublas": 40.0, "tuned": 50.0, "persistent": 50.0, "tail split": 40.0}}]
    env = {"device": "GPU", "arch": "sm_90", "date": "d", "torch": "t", "triton": "3.6", "flytune_nb": "0"}
    text = report(rows, env, 132)
    assert ("| 256 | 11008 | 4096 | `128x128x64 split 3 tail` (172 tiles) | 36.0 | 45.0 | 45.0 | 40.0 | 0.80x, "
            "0.80x, 0.90x | 0.80x, 0.80x, 1.00x |" in text), text
    assert "| 128x128x64 w4 s4 | 172 | 45.0 | " in text and "3: 36.0 (1.33)" in text
    assert "| 128x256x64 w8 s3 | 86 | " in text and "failed (1.00)" in text
    assert "did not compile or launch: 1." in text


def _ncu_raw(kernels: list[dict], units: dict, ids=None) -> str:
    """A page as `ncu --import R --csv --page raw` prints it: ncu's own line, the names, the units, one row a kernel
    (numbers with thousands grouped, as ncu writes them; ``ids`` numbers the rows, which the page need not list in
    launch order)."""
    from benchmarks.gemm_profile import METRICS

    head = ["ID", "Kernel Name"] + METRICS
    rows = [head, ["", ""] + [units.get(m, "") for m in METRICS]]
    for i, k in zip(ids or range(len(kernels)), kernels):
        rows.append([str(i), k["name"]] + [f"{k.get(m, 1.0):,}" for m in METRICS])
    return "==PROF== Disconnected\n" + "\n".join(",".join(f'"{c}"' for c in r) for r in rows) + "\n"


def test_gemm_profile_reads_ncu_counters_and_splits_the_ratio_into_fill_and_per_sm_speed():
    from benchmarks.gemm_profile import _TENSOR, assign, parse_raw_csv, report, summary

    def kernel(name, us, busy, tensor, grid):
        return {"name": name, "gpu__time_duration.sum": us * 1e3, "sm__cycles_active.avg": busy * 1e5,
                "sm__cycles_elapsed.max": 1e5, f"{_TENSOR}.avg.pct_of_peak_sustained_active": tensor,
                "launch__grid_size": grid, "smsp__warp_issue_stalled_wait_per_warp_active.pct": 3.0,
                "smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct": 9.0}

    # ours at 256x11008: two rounds of 172 tiles leave SMs idle (busy 0.65) at the tensor pipe's pace of cuBLAS's.
    # The page lists the rows out of launch order (IDs 3, 0, 4, 1, 2).
    launched = [kernel("matmul_tma_kernel", 52.8, 0.65, 80.0, 172), kernel("nvjet_168x128", 41.0, 0.97, 82.0, 132),
                kernel("matmul_tma_kernel", 30.0, 0.95, 60.0, 132), kernel("nvjet_a", 24.0, 0.96, 80.0, 132),
                kernel("void reduce<float>(float*)", 1.0, 0.1, 0.0, 8)]
    order = [3, 0, 4, 1, 2]
    raw = _ncu_raw([launched[i] for i in order], {"gpu__time_duration.sum": "nsecond"}, ids=order)
    kernels = parse_raw_csv(raw)
    assert [k["Kernel Name"] for k in kernels] == ["matmul_tma_kernel", "nvjet_168x128", "matmul_tma_kernel",
                                                   "nvjet_a", "void reduce<float>(float*)"]
    assert kernels[0]["gpu__time_duration.sum"] == 52800.0  # "52,800.0" read as a number
    windows = [{"shape": [256, 11008, 4096], "side": "ours", "config": "c1", "source": "artifact", "rel_err": 0.0,
                "names": ["matmul_tma_kernel"]},
               {"shape": [256, 11008, 4096], "side": "cublas", "names": ["nvjet_168x128"]},
               {"shape": [512, 6144, 4096], "side": "ours", "config": "c2", "source": "default", "rel_err": 0.0,
                "names": ["matmul_tma_kernel"]},
               {"shape": [512, 6144, 4096], "side": "cublas", "names": ["nvjet_a", "reduce"]}]
    placed = assign(kernels, windows)
    assert [[k["Kernel Name"] for k in w["kernels"]] for w in placed][3] == ["nvjet_a", "void reduce<float>(float*)"]
    with pytest.raises(ValueError, match="profiled 5 kernels where torch.profiler counted 4"):
        assign(kernels, windows[:3] + [{**windows[3], "names": ["nvjet_a"]}])
    # the same total, but counted with a helper kernel in our call instead of cuBLAS's: the names catch it
    shifted = windows[:2] + [{**windows[2], "names": ["matmul_tma_kernel", "reduce"]}, {**windows[3],
                                                                                        "names": ["nvjet_a"]}]
    with pytest.raises(ValueError, match=r"at \[512, 6144, 4096\] \(ours\) ncu saw"):
        assign(kernels, shifted)
    s = summary(kernels[0])
    assert s["us"] == pytest.approx(52.8) and s["sm_busy"] == pytest.approx(0.65) and s["grid"] == 172
    assert s["top_stalls"][0] == ("long_scoreboard", 9.0)
    for w in placed:
        w["kernels"] = [summary(k) for k in w["kernels"]]
    env = {"device": "GPU", "arch": "sm_90", "date": "d", "torch": "t", "triton": "3.6", "flytune_nb": "0"}
    text = report({"env": env, "calls": placed, "dropped": ["lts__t_sector_hit_rate.pct"]})
    assert ("| 256 | 11008 | 4096 | 0.78x | 0.67 | 0.98 | fill (0.67): our SMs idle more of the time |" in text), text
    # cuBLAS's two kernels count in its time (25 us against 30): per-SM speed is what ours lacks there
    assert "| 512 | 6144 | 4096 | 0.83x | 0.99 | 0.75 | per-SM speed (0.75): our busy SMs" in text, text
    assert "`c1` (artifact)" in text and "`nvjet_a` (+1 more)" in text
    assert "left out: lts__t_sector_hit_rate.pct" in text and "all within 2e-2" in text
    # a counter ncu did not give, or a cuBLAS tensor pipe at 0: no reading, no division by zero
    placed[1]["kernels"][0] = {**placed[1]["kernels"][0], "tensor_active_pct": 0.0}
    placed[2]["kernels"][0] = {**placed[2]["kernels"][0], "sm_busy": math.nan}
    placed[2]["rel_err"] = 0.5
    text = report({"env": env, "calls": placed})
    assert text.count("a counter is missing: no reading") == 2 and "1 WRONG" in text, text
    # ncu scales units unless told not to: a time in us and shared memory in KB are read back in ns and bytes
    scaled = parse_raw_csv(_ncu_raw([{"name": "k", "gpu__time_duration.sum": 52.8,
                                      "launch__shared_mem_per_block_dynamic": 200.0}],
                                    {"gpu__time_duration.sum": "usecond",
                                     "launch__shared_mem_per_block_dynamic": "Kbyte"}))
    assert scaled[0]["gpu__time_duration.sum"] == pytest.approx(52800.0)
    assert summary(scaled[0])["smem_kb"] == pytest.approx(200e3 / 1024)


def test_gemm_profile_report_is_rewritten_from_the_stored_counters(tmp_path):
    """--report reads the stored result's raw counters again (no GPU) and writes the same markdown as the run."""
    stored = BENCH / "results" / "NVIDIA_H100_80GB_HBM3" / "gemm_profile.json"
    (tmp_path / "gemm_profile.json").write_text(stored.read_text())
    assert bench(["gemm_profile", "--report", str(tmp_path / "gemm_profile.json")]) in (0, None)
    again = (tmp_path / "gemm_profile.md").read_text()
    assert "| 256 | 6144 | 4096 | 0.91x | 0.75 | 1.21 | fill (0.75)" in again, again
    assert bench(["gemm_profile", "--report", str(tmp_path / "none.json")]) == 2


_FAKE_NCU = r'''#!{python}
"""Stands in for ncu: rejects the metrics in `reject` as older ncu versions do, records the metrics of each profiling
run, and prints a raw page for the last run's metrics with "n/a" for those in `unknown`, as ncu 2025.3 does."""
import csv, io, json, os, sys
from pathlib import Path
argv, log = sys.argv[1:], Path({log!r})
if "--import" in argv:
    metrics = json.loads(log.read_text().splitlines()[-1])
    head = ["ID", "Kernel Name"] + metrics
    rows = [head, ["", ""] + [""] * len(metrics)]
    for i, name in enumerate(["matmul_tma_kernel", "nvjet_tst_128x128"]):
        rows.append([str(i), name] + ["n/a" if m in {unknown!r} else "1,000.0" for m in metrics])
    out = io.StringIO()
    csv.writer(out, quoting=csv.QUOTE_ALL).writerows(rows)
    print("==PROF== Connected to process\n" + out.getvalue())
    sys.exit(0)
metrics = argv[argv.index("--metrics") + 1].split(",")
with log.open("a") as f:
    f.write(json.dumps(metrics) + "\n")
rejected = [m for m in {reject!r} if m in metrics]
if rejected:
    print("==ERROR== Failed to find metric " + rejected[0])
    sys.exit(1)
if {fail!r}:
    print("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters")
    sys.exit(1)
Path(argv[argv.index("--export") + 1] + ".ncu-rep").write_text("report")
'''


def _fake_ncu(tmp_path, reject=(), unknown=(), fail=False) -> tuple[str, Path]:
    log = tmp_path / "ncu_runs.jsonl"
    exe = tmp_path / "ncu"
    exe.write_text(_FAKE_NCU.format(python=sys.executable, log=str(log), reject=list(reject), unknown=list(unknown),
                                   fail=fail))
    exe.chmod(0o755)
    return str(exe), log


def test_gemm_profile_drops_the_metrics_this_ncu_does_not_know_and_reports_the_rest(tmp_path, monkeypatch):
    """An older ncu that lacks a counter fails the whole run naming one metric at a time: each is left out and the run
    repeated. ncu 2025.3 instead reads it back as "n/a". Either way what was left out is reported and the rest kept.
    An ncu that fails for any other reason (no permission for the counters) is one clear error in ncu's own words."""
    import benchmarks.gemm_profile as gp
    import flytune_nb.core.device as device
    from flytune_nb.errors import RunError

    monkeypatch.setattr(device, "current_device", lambda: "cuda")
    monkeypatch.setattr(gp, "_calls", lambda shape, dev: ("ours", "theirs", "cfg", "default", 0.0))
    monkeypatch.setattr(gp, "kernels_launched", lambda fn: ["matmul_tma_kernel"] if fn == "ours"
                        else ["nvjet_tst_128x128"])
    gone = ["lts__t_sector_hit_rate.pct", "smsp__warp_issue_stalled_membar_per_warp_active.pct"]
    blank = "sm__cycles_active.min"
    ncu, log = _fake_ncu(tmp_path, reject=gone, unknown=[blank])
    work = tmp_path / "work"
    work.mkdir()
    calls, dropped = gp.profile([(256, 6144, 4096)], ncu, work)
    runs = [json.loads(ln) for ln in log.read_text().splitlines()]
    assert len(runs) == 3 and runs[0] == gp.METRICS  # the full set, then one fewer each time ncu named one
    assert sorted(dropped) == sorted(gone + [blank]) and not set(gone) & set(runs[-1])
    assert [c["side"] for c in calls] == ["ours", "cublas"]
    kept = calls[0]["kernels"][0]
    assert set(kept["raw"]) == set(gp.METRICS) - set(gone) and kept["us"] == pytest.approx(1.0)
    assert kept["raw"][blank] == "n/a" and kept["sm_busy"] == pytest.approx(1.0)
    assert kept["l2_hit_pct"] != kept["l2_hit_pct"]  # the dropped counter reads as NaN, not as a number
    env = {"device": "GPU", "arch": "sm_90", "date": "d", "torch": "t", "triton": "3.6", "flytune_nb": "0"}
    assert f"left out: {', '.join(dropped)}." in gp.report({"env": env, "calls": calls, "dropped": dropped})

    (tmp_path / "denied").mkdir()
    ncu, _ = _fake_ncu(tmp_path / "denied", fail=True)
    with pytest.raises(RunError, match=r"ncu failed \(rc 1\): ==ERROR== ERR_NVGPUCTRPERM"):
        gp.profile([(256, 6144, 4096)], ncu, work)
