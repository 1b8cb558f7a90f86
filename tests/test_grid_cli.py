import pytest

from flytune_nb.cli import main
from flytune_nb.grid import SGLANG_BATCH_SIZES, GridError, parse_grid
from tests.conftest import PLUGINS


def test_grid_is_the_cartesian_product_in_axis_order():
    assert parse_grid("N=4096,8192 M=1,64", ("M", "N")) == [
        {"M": 1, "N": 4096}, {"M": 1, "N": 8192}, {"M": 64, "N": 4096}, {"M": 64, "N": 8192}]
    assert parse_grid({"M": [1, 2], "N": 8}, ("M", "N")) == [{"M": 1, "N": 8}, {"M": 2, "N": 8}]
    assert [s["M"] for s in parse_grid("M=sglang N=4096", ("M", "N"))] == list(SGLANG_BATCH_SIZES)


@pytest.mark.parametrize("text, msg", [
    ("M=1,x N=4", "'x' is not a positive integer"),
    ("M=0 N=4", "'0'|>= 1"),
    ("M=1", "missing \\['N'\\]"),
    ("M=1 N=2 K=3", "unknown \\['K'\\]"),
    ("M1 N=2", "is not AXIS=v1,v2"),
    ("M= N=2", "no values"),
    ("M=1 M=2 N=2", "given twice"),
    ("M=-4 N=2", "not a positive integer"),
])
def test_bad_grids_say_what_is_wrong(text, msg):
    with pytest.raises(GridError, match=msg):
        parse_grid(text, ("M", "N"))


@pytest.mark.parametrize("argv, msg", [
    (["sweep", "rmsnrom", "--grid", "M=1 N=8"], "Did you mean 'rmsnorm'"),
    (["sweep", "rmsnorm", "--grid", "M=1,a N=8"], "not a positive integer"),
    (["sweep", "rmsnorm", "--grid", "M=1 N=8", "--dtype", "fp8"], "unknown dtype 'fp8'"),
    (["sweep", "rmsnorm", "--grid", "M=1 N=8", "--strategy", "magic"], "unknown strategy"),
    (["sweep", "rmsnorm", "--grid", "M=100000000 N=100000000"], "needs ~.* GiB"),
])
def test_cli_user_errors_are_one_line_and_exit_2(argv, msg, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("flytune: error:")
    assert __import__("re").search(msg, err), err


def test_cli_kernels_lists_axes_dtypes_and_space(capsys):
    assert main(["kernels", "--path", PLUGINS]) == 0
    out = capsys.readouterr().out
    line = next(l for l in out.splitlines() if l.startswith("rmsnorm "))
    assert "M,N" in line and "bf16,fp16,fp32" in line and "@ M=4096 N=4096" in line
    assert any(l.startswith("toy ") for l in out.splitlines())


def test_cli_sweep_prints_trials_and_summary(capsys):
    rc = main(["sweep", "toy", "--path", PLUGINS, "--grid", "N=64,100", "--dtype", "fp32"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "N=64 fp32 on CPU_interpreter" in out
    assert out.count("wrong") >= 4 and "launch_error" in out  # failures listed with their status
    summary = out[out.index("shape "):]
    assert summary.count("2/8") == 2  # two shapes, 2 of 8 configs passed each


def test_budget_must_be_positive(capsys):
    with pytest.raises(SystemExit) as e:
        main(["sweep", "rmsnorm", "--grid", "M=1 N=8", "--budget", "0"])
    assert e.value.code == 2 and "must be an integer >= 1" in capsys.readouterr().err


def test_a_broken_plugin_does_not_hide_the_others(tmp_path, capsys):
    import shutil

    shutil.copytree(f"{PLUGINS}/toy", tmp_path / "broken")
    (tmp_path / "broken" / "kernel.py").write_text("def oops(:\n")
    assert main(["kernels", "--path", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "ERROR: kernel folder" in out and "SyntaxError" in out and any(l.startswith("rmsnorm ") for l in
                                                                         out.splitlines())


def test_progress_keeps_one_bar_per_shape_in_flight():
    import io

    from flytune_nb.config import Config
    from flytune_nb.events import ShapeDone, TrialDone, TrialStarted
    from flytune_nb.progress import TqdmListener
    from flytune_nb.trial import SearchResult, Trial

    out = io.StringIO()
    bar = TqdmListener(file=out, disable=False)
    cfg = Config({"BLOCK": 64})
    a, b = {"N": 8}, {"N": 16}
    bar(TrialStarted("toy", a, "fp32", cfg, 0, 2))
    bar(TrialStarted("toy", b, "fp32", cfg, 0, 3))  # another GPU's shape, interleaved
    ta = Trial("toy", a, "fp32", cfg, "ok", p20=0.01, p50=0.01, p80=0.01)
    bar(TrialDone("toy", ta, 0, 2, ta))
    assert bar.bars[((("N", 8),), "fp32")].n == 1 and bar.bars[((("N", 16),), "fp32")].n == 0
    bar(ShapeDone("toy", SearchResult("toy", a, "fp32", None, cfg, [ta])))
    assert list(bar.bars) == [((("N", 16),), "fp32")] and "toy N=8 fp32" in out.getvalue()


def test_grid_refuses_an_empty_value_and_other_scripts_digits():
    from flytune_nb.grid import GridError, parse_values

    assert parse_values("M", "1,64,") == [1, 64]  # one trailing comma is harmless
    for bad in ("1,,4", "١,2"):  # a lost value; an Arabic-Indic digit
        with pytest.raises(GridError, match="axis M"):
            parse_values("M", bad)


def test_batch_checks_its_parameters_and_outputs_before_sweeping(tmp_path):
    from flytune_nb.batch import run_batch

    db = tmp_path / "b.db"
    cases = [(dict(dtypes=None), "no dtype given"), (dict(budget="ten"), "budget must be a whole number"),
             (dict(results_csv=str(tmp_path / "nope" / "r.csv")), "does not exist"),
             (dict(export_dir=str(db.parent / "file")), "not a folder")]
    from flytune_nb.device import current_device
    from flytune_nb.lookup import BUILTIN_DIR

    if not current_device().is_gpu:  # interpreter timings never go into the committed exports/
        cases.append((dict(export_dir=str(BUILTIN_DIR)), "CPU_interpreter timings"))
    (db.parent / "file").write_text("x")
    for kw, message in cases:
        with pytest.raises(ValueError, match=message):
            run_batch("rmsnorm", "M=1 N=256", **{"dtypes": "fp32", **kw}, db=str(db), isolate=False, progress=False)
    assert not db.exists()  # nothing was swept or written
