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
             (dict(progress=2), 'progress must be True, False or "lines", got 2'),
             # an export folder that cannot be written is refused before the sweep, not after it
             (dict(export_dir=str(db.parent / "file" / "exp")),
              "export_dir: cannot write to .*exp: .*file exists and is not a folder"),
             (dict(grid=None, kernel="softmax"), "grid: name the shapes to sweep for softmax"),
             (dict(budget=2.5), "budget must be a whole number of configs, got 2.5"),
             (dict(budget=True), "budget must be a whole number of configs, got True"),
             # an output named as the store would overwrite every stored trial
             (dict(results_json=str(db)), "results_json .*b.db is the results store"),
             (dict(results_csv=str(tmp_path)), "results_csv .* is a folder; name a file in it"),
             # one file for both: the JSON would be written over the CSV
             (dict(results_csv=str(tmp_path / "r.txt"), results_json=str(tmp_path / "." / "r.txt")),
              "results_csv and results_json name one file"),
             # one kernel's folder of a config dir: the export would land in <kernel>/<kernel>/, read by no lookup
             (dict(export_dir=str(tmp_path / "ex" / "rmsnorm")), "export_dir: .* give the config dir .*ex$")]
    from flytune_nb.artifacts.files import BUILTIN_DIR
    from flytune_nb.core.device import current_device

    if not current_device().is_gpu:  # interpreter timings never go into the committed exports/
        cases.append((dict(export_dir=str(BUILTIN_DIR)), "CPU_interpreter timings"))
    (db.parent / "file").write_text("x")
    (tmp_path / "ex" / "rmsnorm" / "triton_3_6_0").mkdir(parents=True)
    for kw, message in cases:
        with pytest.raises(ValueError, match=message):
            run_batch(**{"kernel": "rmsnorm", "grid": "M=1 N=256", "dtypes": "fp32", "isolate": False,
                         "progress": False, **kw}, db=str(db))
    assert not db.exists()  # nothing was swept or written
    for kw, message in [(dict(kernel=5), "kernel must be a kernel's name"), (dict(db=""), "db must be the path")]:
        with pytest.raises(ValueError, match=message):
            run_batch(**{"kernel": "rmsnorm", "grid": "M=1 N=256", "dtypes": "fp32", "isolate": False,
                         "progress": False, "db": str(db), **kw})
    assert not db.exists()
    # a store in a folder not made yet: made with it (as `flytune sweep --db` does), its results files beside it
    fresh = tmp_path / "new" / "b.db"
    run_batch("rmsnorm", "M=1 N=256", "fp32", db=str(fresh), budget=1, export_dir=None, isolate=False, progress=False)
    assert fresh.exists() and (tmp_path / "new" / "b.results.csv").exists()
    # the store the batch would overwrite keeps every trial: it is refused before anything opens it
    from flytune_nb import Sweep
    from flytune_nb.engine.store import Store

    Sweep("rmsnorm", "M=1 N=256", ["fp32"], db=db, isolate=False, baselines=(), budget=2).run()
    before = Store(db).count()
    with pytest.raises(ValueError, match="is the results store"):
        run_batch("rmsnorm", "M=1 N=256", "fp32", db=str(db), results_csv=str(db), isolate=False, progress=False)
    assert Store(db).count() == before > 0


def test_a_sweep_refuses_a_budget_that_is_not_a_whole_number():
    from flytune_nb import Sweep

    for budget in (2.5, True, "three", 0):
        with pytest.raises(ValueError, match="budget must be a whole number of configs >= 1"):
            Sweep("rmsnorm", "M=1 N=256", ["fp32"], isolate=False, budget=budget)
    assert Sweep("rmsnorm", "M=1 N=256", ["fp32"], isolate=False, budget="3").budget == 3




def test_batch_flags_take_papermill_and_shell_spellings():
    from flytune_nb.ui.batch import _flag

    assert [_flag("isolate", v) for v in (True, "true", "Yes", "on", 1, "1")] == [True] * 6
    assert [_flag("isolate", v) for v in (False, "false", "No", "off", 0, "0")] == [False] * 6


def test_batch_refuses_an_export_folder_it_cannot_write_before_sweeping(tmp_path, monkeypatch):
    import os

    from flytune_nb.artifacts import files
    from flytune_nb.ui.batch import run_batch

    locked = tmp_path / "locked"
    locked.mkdir()
    real = os.access
    # root writes anywhere os.access is asked about: stand in for a folder this user may not write
    monkeypatch.setattr(files.os, "access", lambda p, mode: False if os.fspath(p) == str(locked) else real(p, mode))
    db = tmp_path / "b.db"
    with pytest.raises(ValueError, match="export_dir: cannot write to .*locked.* is not writable for this user"):
        run_batch("rmsnorm", "M=1 N=256", "fp32", db=str(db), export_dir=str(locked / "exp"), isolate=False,
                  progress=False)
    assert not db.exists()


def test_batch_without_a_grid_sweeps_the_demo_grid_of_this_machine(tmp_path, capsys):
    from flytune_nb.core.device import current_device
    from flytune_nb.ui.batch import demo_job, run_batch

    kernel, grid, _ = demo_job(current_device().is_gpu)
    results = run_batch(kernel, None, "fp32", db=str(tmp_path / "d.db"), budget=1, export_dir=None, isolate=False,
                        progress="lines")
    from flytune_nb import get_kernel
    from flytune_nb.core.shapes import grid_shapes

    spec = get_kernel(kernel)
    want = grid_shapes(grid, spec.axes, spec.batch_axis)
    assert len(want) > 1 and sorted(tuple(sorted(r.shape.items())) for r in results) == sorted(
        tuple(sorted(s.items())) for s in want)
    out = capsys.readouterr().out
    assert f"grid: {grid} (the default on this machine)" in out
    # progress as lines: one per finished shape, with its pick
    assert sum(line.startswith(f"{kernel} ") and "; pick " in line for line in out.splitlines()) == len(results)


def test_an_interrupted_batch_says_what_was_kept_and_how_to_resume(tmp_path, monkeypatch):
    from flytune_nb.engine.sweep import Sweep
    from flytune_nb.errors import RunError
    from flytune_nb.ui.batch import run_batch

    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(Sweep, "run", interrupted)
    db = tmp_path / "i.db"
    with pytest.raises(RunError, match=f"interrupted: every trial measured so far is in {db}; run the same batch "
                                       f"again to resume"):
        run_batch("rmsnorm", "M=1 N=256", "fp32", db=str(db), export_dir=None, isolate=False, progress=False)


def test_a_tilde_in_the_batchs_paths_is_the_home_folder(tmp_path, monkeypatch):
    """papermill parameters reach run_batch as text no shell expanded: db="~/b.db" names the home folder's store, as
    --db '~/b.db' does on the command line, and its results and exports land there too, not under a folder called ~
    in the current one (nor is the batch refused for that folder not being there)."""
    from flytune_nb.ui.batch import run_batch

    home, here = tmp_path / "home", tmp_path / "here"
    home.mkdir(), here.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(here)
    run_batch("rmsnorm", "M=2 N=256", "fp32", db="~/b.db", budget=1, export_dir="~/ex", isolate=False,
              progress=False)
    made = sorted(p.name for p in home.iterdir() if not p.name.endswith(("-wal", "-shm")))  # the store is open
    assert made == ["b.db", "b.results.csv", "b.results.json", "ex"] and list((home / "ex").rglob("*.json"))
    assert list(here.iterdir()) == []
