import pytest


def test_batch_checks_its_parameters_and_outputs_before_sweeping(tmp_path):
    from flytune_nb.ui.batch import run_batch

    db = tmp_path / "b.db"
    cases = [(dict(dtypes=""), "no dtype given"), (dict(budget="ten"), "budget must be a whole number"),
             (dict(results_csv=str(tmp_path / "nope" / "r.csv")), "does not exist"),
             (dict(export_dir=str(db.parent / "file")), "not a folder")]
    from flytune_nb.artifacts.files import BUILTIN_DIR
    from flytune_nb.core.device import current_device

    if not current_device().is_gpu:  # interpreter timings never go into the committed exports/
        cases.append((dict(export_dir=str(BUILTIN_DIR)), "CPU_interpreter timings"))
    (db.parent / "file").write_text("x")
    for kw, message in cases:
        with pytest.raises(ValueError, match=message):
            run_batch("rmsnorm", "M=1 N=256", **{"dtypes": "fp32", **kw}, db=str(db), isolate=False, progress=False)
    assert not db.exists()  # nothing was swept or written


