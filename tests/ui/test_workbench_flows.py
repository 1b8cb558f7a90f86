"""Workbench flows where what the views show must stay what the store holds: Stop cutting off a trial, and the grid preview racing its own estimate."""
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
