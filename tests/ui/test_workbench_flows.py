"""Workbench flows where what the views show must stay what the store holds: a kernel switched mid-sweep, Stop cutting
off a trial, and the grid preview racing its own estimate."""
import html
import threading

import pytest

pytest.importorskip("ipywidgets")
pytest.importorskip("plotly")

from flytune_nb.engine.events import TrialStarted  # noqa: E402
from flytune_nb.ui.notebook import Workbench  # noqa: E402
from flytune_nb.ui.notebook.controls import GridEditor, KernelPicker  # noqa: E402
from flytune_nb.ui.notebook.slots import load_plotly  # noqa: E402
from tests.conftest import PLUGINS  # noqa: E402

load_plotly(background=False)


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


def test_stop_cutting_off_a_trial_counts_only_what_it_stored(tmp_path, monkeypatch):
    """A trial that Stop kills is started but never stored: the finish line counted it as measured, which made
    "2 measured now, -1 from the store" for a store that held nothing before."""
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
