"""heuristic_fit on a store swept here (CPU interpreter): it fits, cross-validates, writes the result pair and the
suggested rule under the device the stored timings came from, and refuses half its options in one line."""
import json
from pathlib import Path

import pytest

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


ADOPTED = f"{Path(__file__).resolve().parent.parent / 'kit' / 'adopted.py'}:AXPY"


def test_a_rule_fitted_for_an_adopted_kernel_loads_and_scores_in_the_heuristic_editor(tmp_path, dev, capsys):
    """An adopted kernel has no folder, so no configs module beside its heuristic: heuristic_fit finds it through
    --path, as the CLI's commands do, and the rule it writes reaches the kernel's pruned space without one. Opened in
    the editor it loads and re-scores every swept shape, each pick one of the space's configs."""
    import html
    import random

    from flytune_nb.core.registry import get_kernel
    from flytune_nb.ui.notebook.editor import HeuristicEditor

    spec = get_kernel(ADOPTED)
    ns = sorted(random.sample((48, 64, 80, 96, 100, 128), 3))
    db = tmp_path / "a.db"
    results = Sweep(spec, f"N={','.join(map(str, ns))}", ["fp32"], db=db, isolate=False, baselines=()).run()
    out = tmp_path / "out"
    assert bench(["heuristic_fit", "--store", str(db), "--kernel", spec.name, "--path", ADOPTED, "--dtype", "fp32",
                  "--out", str(out)]) == 0
    rule = (out / f"heuristic_fit_{spec.name}_fp32.py.txt").read_text()
    capsys.readouterr()
    (tmp_path / "afile").write_text("")  # --out naming a file: one line, not mkdir's traceback
    assert bench(["heuristic_fit", "--store", str(db), "--kernel", spec.name, "--path", ADOPTED, "--dtype", "fp32",
                  "--out", str(tmp_path / "afile")]) == 2
    err = capsys.readouterr().err
    assert "afile is a file" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    ed = HeuristicEditor(lambda: spec, lambda: results, lambda: dev, measure=None)
    ed.code.value = rule
    assert ed.last is not None, html.unescape(ed.result.value)
    assert [r.shape["N"] for r in ed.last.rows] == ns
    for r in ed.last.rows:
        assert r.new in spec.configs(r.shape, "fp32", dev) and r.verdict != "unmeasured"
    # a leaf that keeps the hand rule writes adopt's own rule out (the first config the decorator keeps), where a
    # folder kernel's fit copies its heuristic.py
    from flytune_nb.analysis.fit import HAND, Node, Rule, has_configs_module

    assert not has_configs_module(spec) and has_configs_module(get_kernel("rmsnorm"))
    kept = Rule(Node(template=HAND, n=len(ns)), spec.name, hand=spec.default, folder=False)
    ed.code.value = kept.source
    assert ed.last is not None, html.unescape(ed.result.value)
    assert [r.new for r in ed.last.rows] == [spec.default(r.shape, "fp32", dev) for r in ed.last.rows]
    assert all(r.verdict == "same" for r in ed.last.rows)


def test_heuristic_fit_without_path_names_the_option_for_an_adopted_kernel(tmp_path, capsys):
    """A kernel the registry cannot find (an adopted one, not given by --path) is one line naming the kernel, not a
    traceback; a --path that does not load is one line too."""
    db = tmp_path / "none.db"
    assert bench(["heuristic_fit", "--store", str(db), "--kernel", "axpy_acc", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "axpy_acc" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    for bad in (f"{tmp_path / 'adoptd.py'}:AXPY", ADOPTED + "Y", str(tmp_path / "no_such_folder")):
        assert bench(["heuristic_fit", "--store", str(db), "--kernel", "axpy_acc", "--path", bad, "--out",
                      str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("python -m benchmarks heuristic_fit: ") and len(err.strip().splitlines()) == 1, err
    # argparse's own refusal: one line saying what was wrong, not its usage block
    with pytest.raises(SystemExit) as stop:
        bench(["heuristic_fit", "--max-depth", "two"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "invalid int value: 'two'" in err and len(err.strip().splitlines()) == 1, err
