import pytest


def test_batch_checks_its_parameters_and_outputs_before_sweeping(tmp_path):
    from flytune_nb.ui.batch import run_batch

    db = tmp_path / "b.db"
    cases = [(dict(dtypes=""), "no dtype given"), (dict(budget="ten"), "budget must be a whole number"),
             (dict(results_csv=str(tmp_path / "nope" / "r.csv")), "does not exist"),
             (dict(export_dir=str(db.parent / "file")), "not a folder"),
             # papermill passes -p values as Python literals: a number where text was meant, a word for a flag
             (dict(dtypes=3), "dtypes must be text like 'bf16,fp16' or a list of names; got int 3"),
             (dict(grid=5), "grid must be text like 'M=1,64 N=4096'.*got int 5"),
             (dict(grid=["M=1", "N=256"]), "grid must be .* a list of shape dicts; got list"),
             (dict(isolate="maybe"), "isolate must be True or False, got 'maybe'"),
             (dict(progress=2), "progress must be True or False, got 2")]
    from flytune_nb.artifacts.files import BUILTIN_DIR
    from flytune_nb.core.device import current_device

    if not current_device().is_gpu:  # interpreter timings never go into the committed exports/
        cases.append((dict(export_dir=str(BUILTIN_DIR)), "CPU_interpreter timings"))
    (db.parent / "file").write_text("x")
    for kw, message in cases:
        with pytest.raises(ValueError, match=message):
            run_batch("rmsnorm", **{"grid": "M=1 N=256", "dtypes": "fp32", "isolate": False, "progress": False,
                                    **kw}, db=str(db))
    assert not db.exists()  # nothing was swept or written




def test_batch_flags_take_papermill_and_shell_spellings():
    from flytune_nb.ui.batch import _flag

    assert [_flag("isolate", v) for v in (True, "true", "Yes", "on", 1, "1")] == [True] * 6
    assert [_flag("isolate", v) for v in (False, "false", "No", "off", 0, "0")] == [False] * 6
