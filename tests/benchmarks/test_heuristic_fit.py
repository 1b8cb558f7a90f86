"""heuristic_fit on a store swept here (CPU interpreter): it fits, cross-validates, writes the result pair and the
suggested rule under the device the stored timings came from, and refuses half its options in one line."""
import json

from benchmarks.__main__ import main as bench
from flytune_nb.core.config import Config
from flytune_nb.engine.sweep import Sweep


def test_heuristic_fit_on_a_store(tmp_path):
    db = tmp_path / "s.db"
    configs = [Config({"BLOCK_N": 256}, num_warps=1, num_stages=1), Config({"BLOCK_N": 256}, num_warps=2, num_stages=1)]
    Sweep("rmsnorm", "M=1,4 N=200,256", ["fp32"], configs=configs, db=db, isolate=False, baselines=()).run()
    out = tmp_path / "out"
    assert bench(["heuristic_fit", "--store", str(db), "--kernel", "rmsnorm", "--dtype", "fp32", "--out",
                  str(out)]) == 0
    (row,) = json.loads((out / "heuristic_fit.json").read_text())["rows"]
    assert row["kernel"] == "rmsnorm" and row["shapes"] == 4 and row["fitted_regret"] >= 1.0
    rule = (out / "heuristic_fit_rmsnorm_fp32.py.txt").read_text()
    assert "def default(shape, dtype, device)" in rule
    md = (out / "heuristic_fit.md").read_text()
    assert "| rmsnorm | fp32 | s.db | 4 |" in md
    assert md.startswith("# Fitted heuristics on the CPU_interpreter store s.db")  # the store's device, not the H200's


def test_results_are_filed_under_the_stores_device(tmp_path, monkeypatch):
    import benchmarks.common as common

    db = tmp_path / "s.db"
    configs = [Config({"BLOCK_N": 256}, num_warps=1, num_stages=1), Config({"BLOCK_N": 256}, num_warps=2, num_stages=1)]
    Sweep("rmsnorm", "M=1,4 N=200,256", ["fp32"], configs=configs, db=db, isolate=False, baselines=()).run()
    monkeypatch.setattr(common, "RESULTS", tmp_path / "results")  # where results go without --out
    assert bench(["heuristic_fit", "--store", str(db), "--kernel", "rmsnorm", "--dtype", "fp32"]) == 0
    assert (tmp_path / "results" / "CPU_interpreter" / "heuristic_fit.json").exists()
    assert not (tmp_path / "results" / "NVIDIA_H200").exists()


def test_a_store_without_its_kernel_is_one_line(tmp_path, capsys):
    assert bench(["heuristic_fit", "--store", str(tmp_path / "none.db"), "--out", str(tmp_path)]) == 2
    assert "--store and --kernel go together" in capsys.readouterr().err
    assert bench(["heuristic_fit", "--store", str(tmp_path / "none.db"), "--kernel", "rmsnorm", "--out",
                  str(tmp_path)]) == 2
    assert "none.db" in capsys.readouterr().err
    for argv, says in ((["--dtype", "fp61"], "unknown dtype 'fp61'; rmsnorm supports"),
                       (["--max-depth", "0"], "--max-depth must be >= 1")):
        assert bench(["heuristic_fit", "--store", str(tmp_path / "none.db"), "--kernel", "rmsnorm", "--out",
                      str(tmp_path), *argv]) == 2
        assert says in capsys.readouterr().err


def test_a_store_of_one_model_shape_says_nothing_was_held_out(tmp_path):
    """Cross-validation holds out one model shape (every batch size of one N) at a time: a store that swept a single
    N leaves nothing to fit on for its only fold. The result says so and writes no regret, rather than a bare NaN
    in the table and in a JSON file that strict parsers refuse; the suggested rule is still written."""
    import random

    def strict(text):
        def refuse(name):
            raise ValueError(f"{name} in the JSON")
        return json.loads(text, parse_constant=refuse)

    db = tmp_path / "s.db"
    n = random.choice((128, 200, 256))
    configs = [Config({"BLOCK_N": 256}, num_warps=1, num_stages=1), Config({"BLOCK_N": 256}, num_warps=2, num_stages=1)]
    Sweep("rmsnorm", f"M=1,4 N={n}", ["fp32"], configs=configs, db=db, isolate=False, baselines=()).run()
    out = tmp_path / "out"
    assert bench(["heuristic_fit", "--store", str(db), "--kernel", "rmsnorm", "--dtype", "fp32", "--out",
                  str(out)]) == 0
    (row,) = strict((out / "heuristic_fit.json").read_text())["rows"]
    assert row["shapes"] == 2 and row["held_out"] == row["compared"] == 0
    assert row["fitted_regret"] is None and row["hand_regret"] is None and row["fitted_worst"] is None
    md = (out / "heuristic_fit.md").read_text()
    assert "nan" not in md.lower()
    assert f"| rmsnorm | fp32 | s.db | 2 | 0 | - | - | - | - |" in md
    assert "rmsnorm fp32: no held-out score: the store holds one model shape (N=" + str(n) + ")" in md
    assert "def default(shape, dtype, device)" in (out / "heuristic_fit_rmsnorm_fp32.py.txt").read_text()
