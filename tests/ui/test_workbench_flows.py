"""Workbench flows where what the views show must stay what the store holds: the grid preview racing its own estimate."""
import html
import threading

import pytest

pytest.importorskip("ipywidgets")
pytest.importorskip("plotly")

from flytune_nb.ui.notebook.controls import GridEditor, KernelPicker  # noqa: E402
from flytune_nb.ui.notebook.slots import load_plotly  # noqa: E402
from tests.conftest import PLUGINS  # noqa: E402

load_plotly(background=False)


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
