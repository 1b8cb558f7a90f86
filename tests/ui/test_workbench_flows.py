"""Workbench flows where what the views show must stay what the store holds: a kernel switched mid-sweep, the
heuristic editor's Measure missing, Stop cutting off a trial, the cell re-run mid-sweep, and the grid preview racing
its own estimate."""
import html
import json
import math
import sqlite3
import textwrap
import threading
import time

import pytest

pytest.importorskip("ipywidgets")
pytest.importorskip("plotly")

from flytune_nb.artifacts.export import export  # noqa: E402
from flytune_nb.core.config import Config  # noqa: E402
from flytune_nb.core.events import ShapeDone, TrialStarted  # noqa: E402
from flytune_nb.ui.notebook import Workbench  # noqa: E402
from flytune_nb.ui.notebook.controls import GridEditor, KernelPicker  # noqa: E402
from flytune_nb.ui.notebook.slots import load_plotly  # noqa: E402
from tests.conftest import PLUGINS, DeleteAfterFirstTrial  # noqa: E402

load_plotly(background=False)


def _rows(db, table):
    with sqlite3.connect(db) as c:
        c.row_factory = sqlite3.Row
        return [dict(r) for r in c.execute(f"SELECT * FROM {table} ORDER BY id")]


def test_a_kernel_switched_mid_sweep_leaves_none_of_the_old_kernels_results_in_the_views(tmp_path, monkeypatch):
    """toy and evil share the shape label "N=64 fp32": the stopped toy sweep's last events (its trial in flight, its
    cut-off shape) must not appear as evil's results, nor be merged into evil's shape of that label when it runs."""
    monkeypatch.setenv("FLYTUNE_EVIL_MODES", "0")  # evil's working configs only
    started, switched = threading.Event(), threading.Event()
    seen = []

    def watch(event):  # holds the toy sweep at its third trial until the switch is done, so what follows comes after
        if isinstance(event, TrialStarted) and event.kernel == "toy":
            seen.append(event)
            if len(seen) == 3:
                started.set()
                switched.wait(60)

    wb = Workbench("toy", {"N": "64,96,128"}, ["fp32"], db=str(tmp_path / "k.db"), isolate=False, paths=[PLUGINS],
                   listeners=[watch])
    assert wb.wait_ready(60)
    th = wb.run()
    assert started.wait(60)
    wb.picker.dropdown.value = "evil"  # mid-shape: the toy sweep is stopped
    switched.set()
    th.join(60)
    assert not th.is_alive()
    assert wb.live.entries == {} and wb.live.finished_results() == []
    assert "no finished shapes yet" in wb.overview.summary.value
    assert "no trials yet" in wb.table.html.value
    assert list(wb.explorer.shape.options) == []
    label = html.unescape(wb.control.label.value)
    assert "the toy sweep stopped when the kernel was switched" in label and "Run resumes" not in label
    assert not wb.control.run_button.disabled and wb.control.stop_button.disabled
    assert wb.store.count() >= 3  # what toy measured is kept in the store

    wb.grid.axis_boxes["N"].value = "64"
    wb.run().join(120)
    [r] = wb.live.finished_results()
    assert r.kernel == "evil" and {t.kernel for t in r.trials} == {"evil"}
    assert all("SLEEP_MS" in t.config.to_dict() for t in r.trials)  # no toy config among evil's trials


def _write_kernel(root, name="pickme", named=False, sleeps=(10, 20, 40)):
    """A kernel whose configs sleep SLEEP_MS (``sleeps``, in space order): the 10 ms config beats the 20 ms default
    beyond any tie band. A config named in $PICKME_SLOW takes 30 ms more, as a pick timed once during other load
    would. ``named``: a named reference config ("shipped": 40 ms) beside them. A launch of the 2 ms config, when
    $NAMED_GATE is set, touches $NAMED_GATE.reached and waits for $NAMED_GATE.open: a test looks at the workbench
    while that trial runs."""
    folder = root / name
    folder.mkdir(parents=True)
    extra = ', named_configs=named_configs, baseline=lambda i: i["x"] * 2' if named else ""
    (folder / "__init__.py").write_text(textwrap.dedent("""
        import torch

        from flytune_nb.core.config import Config
        from flytune_nb.core.dtypes import to_torch
        from flytune_nb.core.spec import KernelSpec

        from .configs import configs
        from .heuristic import default
        from .kernel import launch


        def make_inputs(shape, dtype, device):
            n = shape["N"]
            return {"x": torch.randn(n, dtype=to_torch(dtype)), "out": torch.empty(n, dtype=to_torch(dtype))}


        def named_configs(shape, dtype, device):
            return {"shipped": Config({"SLEEP_MS": 40}, num_warps=1)}


        SPEC = KernelSpec(name=NAME, axes=("N",), batch_axis="N", dtypes=("fp32",), make_inputs=make_inputs,
                          run=lambda i, c: launch(i["x"], i["out"], c), reference=lambda i: i["x"].double() * 2,
                          configs=configs, default=default, shape_of=lambda i: {"N": i["x"].numel()},
                          outputs=("out",)EXTRA)
    """).replace("NAME", repr(name)).replace("EXTRA", extra))
    (folder / "configs.py").write_text(textwrap.dedent("""
        from flytune_nb.core.config import Config


        def configs(shape, dtype, device):
            return [Config({"SLEEP_MS": s}, num_warps=1) for s in SLEEPS]
    """).replace("SLEEPS", repr(tuple(sleeps))))
    (folder / "heuristic.py").write_text(textwrap.dedent("""
        from flytune_nb.core.config import Config


        def default(shape, dtype, device):
            return Config({"SLEEP_MS": 20}, num_warps=1)
    """))
    (folder / "kernel.py").write_text(textwrap.dedent("""
        import os
        import time
        from pathlib import Path


        def launch(x, out, config):
            gate = os.environ.get("NAMED_GATE")
            if gate and config["SLEEP_MS"] == 2:
                Path(gate + ".reached").touch()
                deadline = time.monotonic() + 120
                while not Path(gate + ".open").exists() and time.monotonic() < deadline:
                    time.sleep(0.01)
            slow = 30 if str(config["SLEEP_MS"]) == os.environ.get("PICKME_SLOW") else 0
            time.sleep((config["SLEEP_MS"] + slow) / 1000)
            out.copy_(x * 2)
            return out
    """))
    (folder / "reference.py").write_text("")
    return root


def test_measure_missing_scores_the_edit_without_replacing_the_shapes_decision(tmp_path, monkeypatch):
    """Measure missing times an edited rule's picks to score the edit. The shape's winner, decided by re-timing its
    shortlist against the default, stays the store's decision: the few configs measured for the editor run no
    selection of their own, which would replace the stored one, and one slow timing of the pick would hand the shape
    (and the exported file) to the default without any re-timing."""
    kernels = _write_kernel(tmp_path / "kernels")
    db = tmp_path / "m.db"
    wb = Workbench("pickme", {"N": "16"}, ["fp32"], db=str(db), isolate=False, paths=[str(kernels)])
    assert wb.wait_ready(60)
    wb.run().join(120)
    fast, default = Config({"SLEEP_MS": 10}, num_warps=1), Config({"SLEEP_MS": 20}, num_warps=1)
    [r] = wb.live.finished_results()
    assert r.default == default and r.pick.config == fast and not r.selection.chose_default
    decided = _rows(db, "selections")
    assert len(decided) == 1 and json.loads(decided[0]["winner"])["SLEEP_MS"] == 10

    wb.editor.code.value = ("from flytune_nb.core.config import Config\n"
                            "def default(shape, dtype, device):\n    return Config({'SLEEP_MS': 30}, num_warps=1)\n")
    assert [c for _, _, c in wb.editor.last.unmeasured] == [Config({"SLEEP_MS": 30}, num_warps=1)]
    monkeypatch.setenv("PICKME_SLOW", "10")  # the pick is timed 30 ms slow this once
    wb.editor._measure_missing().join(120)
    monkeypatch.delenv("PICKME_SLOW")

    assert _rows(db, "selections") == decided  # the decision and its evidence, untouched
    [r] = wb.live.finished_results()
    assert r.pick.config == fast and r.selection.winner == fast
    row = wb.editor.last.rows[0]
    assert row.new == Config({"SLEEP_MS": 30}, num_warps=1) and math.isfinite(row.new_ms)
    assert row.verdict == "loses"  # 30 ms against the 20 ms default
    [path] = export(wb.store, tmp_path / "ex", paths=[str(kernels)])
    assert json.loads(path.read_text())["16"]["SLEEP_MS"] == 10


def test_a_pick_the_budgeted_search_never_timed_reads_the_same_in_a_view_rebuilt_from_the_store(tmp_path, monkeypatch):
    """A new pick the search never timed (its budget of 2 took the default and the 10 ms config) is timed by Measure
    missing beside a default that read 50 ms this once (20 ms in the search) and stored as a trial. Every view puts
    it on the search's clock by that run's default timing: the live one, and one rebuilt from the store (a reopened
    notebook's Run), so the explorer and the editor's verdict read the same numbers in both."""
    from flytune_nb.analysis.explore import trials_frame

    kernels = _write_kernel(tmp_path / "kernels", sleeps=(10, 20, 80))
    db = tmp_path / "b.db"
    new = Config({"SLEEP_MS": 80}, num_warps=1)
    edit = ("from flytune_nb.core.config import Config\n"
            "def default(shape, dtype, device):\n    return Config({'SLEEP_MS': 80}, num_warps=1)\n")
    wb = Workbench("pickme", {"N": "16"}, ["fp32"], db=str(db), isolate=False, paths=[str(kernels)], budget=2)
    assert wb.wait_ready(60)
    wb.run().join(120)
    [searched] = wb.live.finished_results()
    assert new not in {t.config for t in searched.trials} and searched.selection is not None
    wb.editor.code.value = edit
    assert [c for _, _, c in wb.editor.last.unmeasured] == [new]
    monkeypatch.setenv("PICKME_SLOW", "20")  # the default timed 30 ms slow this once, as on a busy machine
    wb.editor._measure_missing().join(120)
    monkeypatch.delenv("PICKME_SLOW")
    [live] = wb.live.finished_results()
    seen = wb.editor.last.rows[0]
    [again] = [r for r in _rows(db, "retimes") if r["round"] == -1 and json.loads(r["config"])["SLEEP_MS"] == 20]
    [stored] = [r for r in _rows(db, "trials") if json.loads(r["config"])["SLEEP_MS"] == 80]
    assert again["p50"] > 1.5 * searched.default_trial.p50  # the load the test fakes
    footing = searched.default_trial.p50 / again["p50"]
    assert math.isclose(next(t for t in live.trials if t.config == new).p50, stored["p50"] * footing)

    reopened = Workbench("pickme", {"N": "16"}, ["fp32"], db=str(db), isolate=False, paths=[str(kernels)])
    assert reopened.wait_ready(60)
    reopened.run().join(120)
    assert reopened.control.measured == 0  # every config replayed from the store, the decision reused
    [rebuilt] = reopened.live.finished_results()
    assert rebuilt.selection.contenders == searched.selection.contenders
    # the rebuilt view read the stored timing as it was taken: 80 ms against the search's 20 ms default, not 32 ms
    assert math.isclose(next(t for t in rebuilt.trials if t.config == new).p50,
                        next(t for t in live.trials if t.config == new).p50)
    assert math.isclose(rebuilt.time_of(new), live.time_of(new))
    shown = trials_frame([rebuilt]).set_index("config")["p50"]
    assert math.isclose(shown[str(new)], trials_frame([live]).set_index("config")["p50"][str(new)])
    reopened.editor.code.value = edit
    row = reopened.editor.last.rows[0]
    assert math.isclose(row.new_ms, seen.new_ms) and row.verdict == seen.verdict

    # reopened with the search's budget, the view has no trial of it; Measure missing replays the stored one beside
    # a default timed again without the load, and puts it on the search's clock by the load it was timed under
    budgeted = Workbench("pickme", {"N": "16"}, ["fp32"], db=str(db), isolate=False, paths=[str(kernels)], budget=2)
    assert budgeted.wait_ready(60)
    budgeted.run().join(120)
    budgeted.editor.code.value = edit
    assert [c for _, _, c in budgeted.editor.last.unmeasured] == [new]
    budgeted.editor._measure_missing().join(120)
    assert budgeted.control.measured == 2  # the default and the pick; the new pick is stored
    [replayed] = budgeted.live.finished_results()
    assert math.isclose(next(t for t in replayed.trials if t.config == new).p50,
                        next(t for t in live.trials if t.config == new).p50)


def test_measure_missing_keeps_the_shapes_named_configs_and_decision_while_it_runs_and_when_it_fails(
        tmp_path, monkeypatch):
    """The configs Measure missing times are added to a finished shape, they do not start a new search of it: while
    they are timed, and after a measuring that ends without finishing (its store moved away mid-shape), the shape
    stays among the finished ones with its default, its named reference configs and its decision, so the default
    against the best, and against the shipped config, reads as before."""
    from flytune_nb.analysis.explore import trials_frame
    from flytune_nb.analysis.overview import overview_frame

    kernels = _write_kernel(tmp_path / "kernels", "reffed", named=True)
    db = tmp_path / "n.db"
    wb = Workbench("reffed", {"N": "16"}, ["fp32"], db=str(db), isolate=False, paths=[str(kernels)])
    assert wb.wait_ready(60)
    wb.run().join(120)
    label, shipped = "N=16 fp32", Config({"SLEEP_MS": 40}, num_warps=1)
    [before] = wb.live.finished_results()
    assert before.named == {"shipped": shipped} and before.selection is not None
    assert before.default == Config({"SLEEP_MS": 20}, num_warps=1)
    assert before.pick.config == Config({"SLEEP_MS": 10}, num_warps=1)
    was = overview_frame([before], "N").iloc[0]
    assert was["speedup"] > 1.2 and math.isfinite(was["named:shipped_ms"])

    gate = str(tmp_path / "gate")
    monkeypatch.setenv("NAMED_GATE", gate)
    wb.editor.code.value = ("from flytune_nb.core.config import Config\n"
                            "def default(shape, dtype, device):\n    return Config({'SLEEP_MS': 2}, num_warps=1)\n")
    assert [c for _, _, c in wb.editor.last.unmeasured] == [Config({"SLEEP_MS": 2}, num_warps=1)]
    th = wb.editor._measure_missing()
    deadline = time.monotonic() + 120
    while not (tmp_path / "gate.reached").exists():  # the default and the pick timed again, the new pick next
        assert th.is_alive() and time.monotonic() < deadline
        time.sleep(0.02)

    def same_shape(r):
        assert r.named == {"shipped": shipped} and r.default == before.default
        assert r.selection is before.selection and r.pick.config == before.pick.config and not r.stopped
        assert r.default_trial == before.default_trial  # the search's: the clock its other configs are on
        frame = trials_frame([r])
        assert list(frame.loc[frame["named"] != "", "config"]) == [str(shipped)]
        row = overview_frame([r], "N").iloc[0]
        assert row["default"] == was["default"] and row["best"] == was["best"]
        assert row["speedup"] == pytest.approx(was["speedup"]) and math.isfinite(row["named:shipped_ms"])

    assert label in wb.live.finished  # timed while the trial of the new pick runs
    [mid] = wb.live.finished_results()
    same_shape(mid)

    db.unlink()  # the store goes away: the pick's trial cannot be stored, and the measuring ends there
    (tmp_path / "gate.open").touch()
    th.join(120)
    assert not th.is_alive()
    said = html.unescape(wb.control.label.value)
    assert f"⚠ measuring stopped: results store {db} was deleted or moved" in said, said
    [after] = wb.live.finished_results()
    same_shape(after)
    assert "SLEEP_MS=2" not in str([t.config for t in after.trials])  # never stored, never shown


def test_stop_cutting_off_a_trial_counts_only_what_it_stored(tmp_path, monkeypatch):
    """A trial that Stop kills is started but never stored: the finish line does not count it as measured (which
    would read "2 measured now, -1 from the store" for a store that held nothing before)."""
    monkeypatch.setenv("FLYTUNE_EVIL_MODES", "0,3")  # the default, then a config that hangs
    monkeypatch.setenv("FLYTUNE_EVIL_SLEEPS", "0")
    hanging = threading.Event()

    def watch(event):
        if isinstance(event, TrialStarted) and event.config["MODE"] == 3:
            hanging.set()

    wb = Workbench("evil", {"N": "16"}, ["fp32"], db=str(tmp_path / "s.db"), paths=[PLUGINS], timeout=120,
                   listeners=[watch])
    assert wb.wait_ready(60)
    th = wb.run()
    assert hanging.wait(240)
    wb.stop()
    th.join(60)
    assert not th.is_alive() and wb.store.count() == 1  # the default; the hung trial is not stored
    label = html.unescape(wb.control.label.value)
    assert "1 trials (1 measured now, 0 from the store)" in label, label


def test_a_grid_typo_stays_shown_when_the_previous_grids_estimate_arrives_late(tmp_path):
    """The preview's time estimate reads the store off the cell; a typo entered meanwhile must not be drawn over by
    the previous grid's counts when that estimate lands (Run refuses the typo, the preview said all was well)."""
    picker = KernelPicker("toy", [PLUGINS])
    store_read = threading.Event()

    def slow_store():
        store_read.wait(30)
        return None

    grid = GridEditor(picker, {"N": "64"}, ["fp32"], store_getter=slow_store)
    estimating = grid.fits_thread
    grid.axis_boxes["N"].value = "6x4"
    assert "is not a positive integer" in html.unescape(grid.preview.value)
    store_read.set()
    estimating.join(30)
    shown = html.unescape(grid.preview.value)
    assert "axis N: '6x4' is not a positive integer" in shown and "trials after pruning" not in shown


def test_re_running_the_cell_mid_sweep_leaves_the_store_free_for_the_new_workbench(tmp_path, monkeypatch):
    """Re-running the workbench cell closes the previous workbench, which stops its sweep and waits for it to end:
    the new workbench's Run on the same store is not refused as "being written by another sweep" by a sweep the user
    can no longer see or stop."""
    monkeypatch.setenv("FLYTUNE_EVIL_MODES", "0,3")  # the default, then a config that hangs until it is killed
    monkeypatch.setenv("FLYTUNE_EVIL_SLEEPS", "0")
    hanging = threading.Event()

    def watch(event):
        if isinstance(event, TrialStarted) and event.config["MODE"] == 3:
            hanging.set()

    db = str(tmp_path / "r.db")
    old = Workbench("evil", {"N": "16"}, ["fp32"], db=db, paths=[PLUGINS], timeout=120, listeners=[watch])
    assert old.wait_ready(60)
    old_thread = old.run()
    assert hanging.wait(240)
    monkeypatch.setenv("FLYTUNE_EVIL_MODES", "0")
    new = Workbench("evil", {"N": "16"}, ["fp32"], db=db, paths=[PLUGINS], timeout=120)  # the cell run again
    new.run().join(240)  # Run pressed at once
    label = html.unescape(new.control.label.value)
    assert "another sweep" not in label and label.startswith("finished: 1 shape(s), 1 trials"), label
    assert not old_thread.is_alive()


def test_a_store_deleted_or_moved_while_open_is_refused_and_nothing_measured_is_lost(tmp_path):
    """SQLite keeps writing to the file it opened after it is deleted or moved, into a file no one can open again.
    Run refuses instead and lets go of the store, so a moved store gets its last rows and Run again starts a new
    store at the path."""
    db = tmp_path / "mid.db"
    wb = Workbench("toy", {"N": "64"}, ["fp32"], db=str(db), isolate=False, paths=[PLUGINS])
    assert wb.wait_ready(60)
    wb.run().join(120)
    stored = wb.store.count()
    assert stored > 0

    moved = tmp_path / "kept.db"
    db.rename(moved)
    assert wb.run() is None
    said = html.unescape(wb.message.value)
    assert f"not run: results store {db} was deleted or moved after it was opened" in said, said
    assert "re-run the cell with db= naming where it is now" in said and f"Run again starts a new store at {db}" in said
    assert not wb.running and wb.control.stop_button.disabled
    assert len(_rows(moved, "trials")) == stored  # its last rows reached the moved file
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("mid.db")) == []  # no -wal, -shm left

    wb.run().join(120)  # a new store at the path, measured again from nothing
    assert len(_rows(db, "trials")) == stored and len(_rows(moved, "trials")) == stored
    assert html.unescape(wb.control.label.value).startswith(f"finished: 1 shape(s), {stored} trials "
                                                            f"({stored} measured now, 0 from the store)")

    db.unlink()  # deleted: refused the same way, and the next Run writes a file that is there
    assert wb.run() is None and "was deleted or moved after it was opened" in html.unescape(wb.message.value)
    wb.run().join(120)
    assert len(_rows(db, "trials")) == stored


def test_a_store_deleted_mid_sweep_stops_it_with_what_happened(tmp_path):
    db = tmp_path / "mid.db"
    delete_after_the_first = DeleteAfterFirstTrial(db)
    wb = Workbench("toy", {"N": "64"}, ["fp32"], db=str(db), isolate=False, paths=[PLUGINS],
                   listeners=[delete_after_the_first])
    assert wb.wait_ready(60)
    wb.run().join(120)
    label = html.unescape(wb.control.label.value)
    assert f"⚠ sweep stopped: results store {db} was deleted or moved after it was opened" in label, label
    assert f"Run again starts a new store at {db}" in label and len(delete_after_the_first.done) == 1
    assert wb.store is None and not wb.control.run_button.disabled
    wb.run().join(120)
    assert html.unescape(wb.control.label.value).startswith("finished: 1 shape(s)") and len(_rows(db, "trials")) > 1


def test_stop_ends_measure_missing_and_run_says_why_it_waits(tmp_path, monkeypatch):
    """Measure missing runs in the workbench's thread like a sweep: while it runs Run says why it waits and Stop
    stops it, so a pick that hangs can be stopped from the page."""
    monkeypatch.setenv("FLYTUNE_EVIL_MODES", "0")  # the sweep: the default alone
    monkeypatch.setenv("FLYTUNE_EVIL_SLEEPS", "0")
    hangs = Config({"MODE": 3, "SLEEP_MS": 0}, num_warps=1)
    hanging = threading.Event()

    def watch(event):
        if isinstance(event, TrialStarted) and event.config == hangs:
            hanging.set()

    wb = Workbench("evil", {"N": "16"}, ["fp32"], db=str(tmp_path / "e.db"), paths=[PLUGINS], timeout=120,
                   listeners=[watch])
    assert wb.wait_ready(60)
    wb.run().join(240)
    [before] = wb.live.finished_results()
    wb.editor.code.value = ("from flytune_nb.core.config import Config\n"
                            "def default(shape, dtype, device):\n    return Config({'MODE': 3, 'SLEEP_MS': 0}, "
                            "num_warps=1)\n")
    assert [c for _, _, c in wb.editor.last.unmeasured] == [hangs]
    th = wb.editor._measure_missing()
    assert hanging.wait(240) and th.is_alive()
    assert wb.control.run_button.disabled and not wb.control.stop_button.disabled
    assert wb.run() is None
    assert "not run: the heuristic editor is measuring its picks; Stop it" in html.unescape(wb.message.value)

    wb.stop()
    th.join(60)
    assert not th.is_alive()
    label = html.unescape(wb.control.label.value)
    assert label.startswith("measuring stopped for the heuristic editor: 1 trial(s) measured now") and \
        label.endswith("; Measure missing measures the rest"), label
    assert not wb.control.run_button.disabled and wb.control.stop_button.disabled
    assert wb.store.count() == 1  # the default measured again; the hung pick is not stored
    [after] = wb.live.finished_results()  # the shape is still whole, with its decision
    assert not after.stopped and after.selection is before.selection and after.pick.config == before.pick.config
    assert [c for _, _, c in wb.editor.last.unmeasured] == [hangs] and not wb.editor.measure_button.disabled
    assert "measuring stopped for the heuristic editor" in html.unescape(wb.editor.result.value)

    wb.run().join(240)  # Run works again, on the same store
    assert html.unescape(wb.control.label.value).startswith("finished: 1 shape(s), 1 trials (0 measured now, "
                                                            "1 from the store)")


def _switch_as_the_sweep_ends(tmp_path, monkeypatch, hold_in_finish: bool):
    """A toy sweep that measures all it planned, and a kernel switch that lands as it ends: while its last shape's
    ShapeDone is handed out (the sweep still running, so the switch stops it), or while the workbench writes its
    finish line."""
    monkeypatch.setenv("FLYTUNE_EVIL_MODES", "0")
    ended, switched = threading.Event(), threading.Event()

    def hold():
        ended.set()
        switched.wait(60)

    if hold_in_finish:
        import flytune_nb.ui.notebook.workbench as workbench

        real = workbench.summarize
        monkeypatch.setattr(workbench, "summarize", lambda trials: (hold(), real(trials))[1])
        listeners = []
    else:
        listeners = [lambda event: hold() if isinstance(event, ShapeDone) else None]
    db = tmp_path / "k.db"
    wb = Workbench("toy", {"N": "64"}, ["fp32"], db=str(db), isolate=False, paths=[PLUGINS], listeners=listeners)
    assert wb.wait_ready(60)
    th = wb.run()
    assert ended.wait(120)
    wb.picker.dropdown.value = "evil"
    switched.set()
    th.join(60)
    assert not th.is_alive()
    return wb, db


@pytest.mark.parametrize("hold_in_finish", [False, True], ids=["last-event", "finish-line"])
def test_a_kernel_switched_as_the_sweep_ends_leaves_a_finish_line_that_says_it_finished(tmp_path, monkeypatch,
                                                                                        hold_in_finish):
    """The switch stops a sweep whose thread is still alive: one that had measured everything was then reported
    "stopped" (and its run left unfinished in the store), or its own finish line landed after the switch had
    cleared it, showing the previous kernel's "finished: ..." (or "stopped: ... Run resumes") under the new one."""
    wb, db = _switch_as_the_sweep_ends(tmp_path, monkeypatch, hold_in_finish)
    label = html.unescape(wb.control.label.value)
    assert label == f"the toy sweep finished before the kernel was switched; what it measured is in <code>{db}</code>"
    assert wb.live.entries == {} and not wb.control.run_button.disabled and wb.control.stop_button.disabled
    with sqlite3.connect(db) as c:
        finished = c.execute("SELECT finished FROM runs").fetchall()
    assert len(finished) == 1 and finished[0][0] is not None  # all it planned was measured: export takes it all


def test_a_reopened_notebook_says_that_run_shows_the_stored_results_without_measuring_them(tmp_path):
    """A new workbench on a store that holds this grid's results shows no shape until Run; the views must not read
    as if nothing was measured ("sweep first"): they say Run shows the stored results, and Run measures nothing."""
    db = str(tmp_path / "w.db")
    first = Workbench("toy", {"N": "64,96"}, ["fp32"], db=db, isolate=False, paths=[PLUGINS])
    assert first.wait_ready(60)
    first.run().join(120)
    stored = first.store.count()

    reopened = Workbench("toy", {"N": "64,96"}, ["fp32"], db=db, isolate=False, paths=[PLUGINS])
    assert reopened.wait_ready(60)
    line = f"the store holds {stored} trials of 2 of this grid's 2 shapes"
    for shown in (reopened.message, reopened.overview.summary, reopened.editor.result):
        said = html.unescape(shown.value)
        assert line in said and "press Run to show them" in said and "not measured again" in said, said
    assert "sweep first" not in reopened.editor.result.value
    reopened.run().join(120)
    assert reopened.control.measured == 0 and len(reopened.live.finished_results()) == 2
    assert "press Run" not in reopened.overview.summary.value and "heuristic regret" in reopened.overview.summary.value
    assert "press Run" not in reopened.editor.result.value

    other = Workbench("toy", {"N": "128"}, ["fp32"], db=db, isolate=False, paths=[PLUGINS])  # nothing stored of it
    assert other.wait_ready(60)
    assert "press Run" not in other.message.value and "sweep first" in other.editor.result.value


def test_a_sweep_that_ends_on_a_shape_it_cannot_prepare_says_failed_not_stopped(tmp_path):
    """The kernel's own code refuses N=32: the sweep measures N=16, then ends on that error. Nobody pressed Stop, so
    the bar, left at what was measured, says failed."""
    from flytune_nb.ui.notebook.workbench import Workbench

    kernels = _write_kernel(tmp_path / "kernels")
    init = kernels / "pickme" / "__init__.py"
    init.write_text(init.read_text().replace('    n = shape["N"]\n', '    n = shape["N"]\n    if n == 32:\n'
                                             '        raise RuntimeError("my wrapper does not take N=32")\n'))
    wb = Workbench("pickme", {"N": "16,32"}, ["fp32"], db=str(tmp_path / "f.db"), isolate=False,
                   paths=[str(kernels)])
    assert wb.wait_ready(60)
    wb.run().join(120)
    assert "my wrapper does not take N=32" in wb.control.label.value
    assert wb.control.bar.description == "failed"


def test_a_sweep_stopped_while_it_prepares_its_shape_says_stopped_not_failed(tmp_path):
    """Stop pressed while the kernel's code prepares the only shape, which then fails as the stop cuts it: the sweep
    ends on "stopped before the first trial", which the finish line reads as a stop. The bar says stopped too."""
    from flytune_nb.ui.notebook.workbench import Workbench

    kernels = _write_kernel(tmp_path / "kernels")
    init = kernels / "pickme" / "__init__.py"
    gate = tmp_path / "gate"
    init.write_text(init.read_text().replace('    n = shape["N"]\n', textwrap.indent(textwrap.dedent(f"""\
        n = shape["N"]
        import pathlib, time
        pathlib.Path({str(gate)!r} + ".reached").touch()
        while not pathlib.Path({str(gate)!r} + ".open").exists():
            time.sleep(0.05)
        raise RuntimeError("cut by the stop")
    """), "    ")))
    wb = Workbench("pickme", {"N": "16"}, ["fp32"], db=str(tmp_path / "s.db"), isolate=False, paths=[str(kernels)])
    assert wb.wait_ready(60)
    th = wb.run()
    deadline = time.monotonic() + 120
    while not (tmp_path / "gate.reached").exists():
        assert time.monotonic() < deadline and th.is_alive(), wb.control.label.value
        time.sleep(0.05)
    wb.stop()
    (tmp_path / "gate.open").touch()
    th.join(120)
    assert not th.is_alive()
    assert html.unescape(wb.control.label.value).startswith("stopped:"), wb.control.label.value
    assert wb.control.bar.description == "stopped"


def test_the_stored_results_line_follows_the_grid_as_its_boxes_are_edited_before_run(tmp_path):
    """The line saying the store holds this grid's results is the grid's: edited in the boxes before Run (an axis,
    the dtypes), it is recomputed at once, appearing for a grid the store holds and going for one it does not, in
    the message, the overview and the heuristic editor alike."""
    import random

    db = str(tmp_path / "w.db")
    swept = sorted(random.sample((48, 64, 80, 96), 2))
    first = Workbench("toy", {"N": ",".join(map(str, swept))}, ["fp32"], db=db, isolate=False, paths=[PLUGINS])
    assert first.wait_ready(60)
    first.run().join(120)
    per_shape = first.store.count() // 2

    wb = Workbench("toy", {"N": "128"}, ["fp32"], db=db, isolate=False, paths=[PLUGINS])
    assert wb.wait_ready(60)

    def said():
        shown = [html.unescape(w.value) for w in (wb.message, wb.overview.summary, wb.editor.result)]
        return shown, [("press Run to show them" in s) for s in shown]

    assert said()[1] == [False] * 3  # nothing stored of N=128
    wb.grid.axis_boxes["N"].value = f"{swept[0]},128"  # one of the two stored, one not
    shown, hints = said()
    assert hints == [True] * 3, shown
    assert f"the store holds {per_shape} trials of 1 of this grid's 2 shapes" in shown[0]
    assert "the grid's other shapes are measured" in shown[0]
    wb.grid.axis_boxes["N"].value = ",".join(map(str, swept))
    assert f"the store holds {2 * per_shape} trials of 2 of this grid's 2 shapes" in said()[0][0]
    wb.grid.dtypes.value = ("bf16",)  # stored in fp32 only
    assert said()[1] == [False] * 3, said()[0]
    wb.grid.dtypes.value = ("fp32", "bf16")
    assert f"of 2 of this grid's 4 shapes" in said()[0][0]
    wb.grid.axis_boxes["N"].value = "N=x"  # a typo: the preview says it, and no stale line stays
    assert said()[1] == [False] * 3


def test_a_grid_edited_while_a_sweep_starts_gets_no_press_run_line(tmp_path):
    """Between Run and the sweep's first trial nothing is on screen yet, but a sweep is running: a grid edited then
    must not bring back the line telling the user to press Run to show the store's results of it."""
    db = str(tmp_path / "w.db")
    first = Workbench("toy", {"N": "64"}, ["fp32"], db=db, isolate=False, paths=[PLUGINS])
    assert first.wait_ready(60)
    first.run().join(120)

    wb = Workbench("toy", {"N": "128"}, ["fp32"], db=db, isolate=False, paths=[PLUGINS])
    assert wb.wait_ready(60)
    wb.grid.axis_boxes["N"].value = "64"
    assert "press Run to show them" in html.unescape(wb.message.value)  # idle: the line follows the grid
    wb.grid.axis_boxes["N"].value = "128"
    assert "press Run" not in html.unescape(wb.message.value)
    starting = threading.Event()
    wb._thread = threading.Thread(target=starting.wait)  # a sweep started, its worker not yet timing anything
    wb._thread.start()
    try:
        wb.grid.axis_boxes["N"].value = "64"
        shown = [html.unescape(w.value) for w in (wb.message, wb.overview.summary, wb.editor.result)]
        assert not any("press Run to show them" in s for s in shown), shown
    finally:
        starting.set()
        wb._thread.join()
