"""The workbench's census tab and what it gives the explorer: a real compile for an MI300X on this CPU machine, its
rows stored beside the trials, filtered in the tab, and joined onto the explorer's points (colour and hover)."""
import threading

import pytest

pytest.importorskip("ipywidgets")
pytest.importorskip("plotly")

from flytune_nb.analysis import resources  # noqa: E402
from flytune_nb.core.events import TrialStarted  # noqa: E402
from flytune_nb.engine.store import Store  # noqa: E402
from flytune_nb.errors import UsageError  # noqa: E402
from flytune_nb.ui.notebook import Workbench  # noqa: E402
from flytune_nb.ui.notebook.slots import load_plotly  # noqa: E402
from tests.conftest import PLUGINS  # noqa: E402

load_plotly(background=False)


def _points(fig) -> int:
    """Markers of the passing configs (the per-colour traces; not failures, default star or best ring)."""
    skip = ("failed", "wrong result", "heuristic default", "best")
    return sum(len(t.x) for t in fig.data if t.mode == "markers" and not any(t.name.startswith(s) for s in skip))


def test_a_census_for_a_named_gpu_lands_beside_the_trials_and_colours_the_explorer(tmp_path):
    """rmsnorm M=4 N=256 fp32: 15 configs timed through the interpreter, 12 in the MI300X's space (its warps are 64
    lanes wide): the three only the interpreter's space has read "not censused" and stay on the plot."""
    wb = Workbench("rmsnorm", "M=4 N=256", ["fp32"], db=str(tmp_path / "wb.db"), isolate=False)
    assert wb.wait_ready(60)
    wb.run().join(300)
    trials = [t for r in wb.live.finished_results() for t in r.trials]
    passed = sum(t.ok for t in trials)
    assert passed >= 2
    tab = wb.census
    tab.refresh()
    assert [label for label, _ in tab.shape.options] == ["M=4 N=256 fp32"]
    assert tab.target.options[0][1] == "mi300x" or tab.target.options[0][1] is None  # the GPU here first, if any
    tab.target.value = "mi300x"
    tab.run().join(300)
    assert tab.bar.description == "done", tab.message.value
    store = Store(tmp_path / "wb.db", readonly=True)
    census = store.frame("rmsnorm", table="census")
    store.close()
    n = len(census)
    assert n >= 4 and set(census["device"]) == {"AMD_Instinct_MI300X"} and (census["status"] == "ok").all()
    assert f"AMD_Instinct_MI300X (gfx942): {n} configs: {n} ok" in tab.summary.value
    assert tab.html.value.count("<tr class=") == n and "VGPR+AGPR" in tab.html.value
    # the timed configs' p50 beside their census rows: one time per censused config that passed here
    from flytune_nb.analysis.units import fmt_time

    shown = resources.table(tab.shown_rows(), wb._trials_of({"M": 4, "N": 256}, "fp32"))
    both = {str(t.config): t.p50 for t in trials if t.ok and str(t.config) in set(shown["config"])}
    timed = shown.dropna(subset=["measured p50"])
    assert both and dict(zip(timed["config"], timed["measured p50"])) == both
    assert all(f"<td>{fmt_time(p50)}</td>" in tab.html.value for p50 in both.values())
    tab.show.value = "heuristic default"
    assert tab.html.value.count("<tr class=") == 1 and "(default)" in tab.html.value
    tab.show.value = "every config"
    # the explorer now offers the target, colours by its resources and keeps every passing point doing so
    ex = wb.explorer
    assert ex.census.value == "AMD_Instinct_MI300X"
    assert resources.OCCUPANCY in [v for _, v in ex.colour.options]
    ex.colour.value = resources.SPILLS
    fig = ex.slot.figure
    assert _points(fig) == passed
    names = {t.name for t in fig.data if t.name.startswith("census")}
    assert "census spills=no spills" in names and names <= {"census spills=no spills", "census spills=spills",
                                                            "census spills=not censused"}
    hover = " ".join(h for t in fig.data for h in (t.hovertext or ()))
    assert "AMD_Instinct_MI300X:" in hover and "occupancy" in hover and "waves/SIMD" in hover
    ex.census.value = None  # "none": the census colours are gone again
    assert resources.OCCUPANCY not in [v for _, v in ex.colour.options]
    wb.close()


def test_a_census_waits_for_the_sweep_and_a_missing_grid_is_one_line(tmp_path):
    """Compiling on every core beside a timing worker would perturb what it measures: refused while a sweep runs,
    with the reason; an empty grid is one line, not a traceback."""
    gate, started = threading.Event(), threading.Event()

    def hold(event):
        if isinstance(event, TrialStarted):
            started.set()
            gate.wait(60)

    wb = Workbench("toy", "N=64", ["fp32"], db=str(tmp_path / "wb.db"), isolate=False, paths=[PLUGINS],
                   listeners=[hold])
    assert wb.wait_ready(60)
    th = wb.run()
    assert th is not None, wb.message.value
    assert started.wait(60) and wb.running, (wb.control.label.value, wb.message.value)
    wb.census.refresh()
    wb.census.target.value = "mi300x"
    assert wb.census.run() is None and "a sweep is running" in wb.census.message.value
    gate.set()
    th.join(120)
    wb.census.shape.options = []
    assert wb.census.run() is None and "no shape" in wb.census.message.value
    wb.close()


def test_the_join_keeps_uncensused_configs_visible_and_names_shared_binaries():
    """A config the census has no row for reads "not censused" (a colour must not drop it); two configs with one
    binary: the second names the first, the default first."""
    import pandas as pd

    from flytune_nb.core.config import Config
    from flytune_nb.measure.census import CensusRow

    a, b, c = (Config({"BLOCK": n}, num_warps=1) for n in (64, 128, 256))
    kern = {"vgpr_alloc": 40, "occupancy": 8, "occupancy_limiter": "waves", "shared": 0, "scratch_bytes": 0,
            "insn": {"load_bytes": {"16": 2}}}
    rows = [CensusRow("toy", {"N": 64}, "fp32", "AMD_Instinct_MI300X", "gfx942", "hip", cfg, "ok", "", 0.1, "same",
                      (kern,), cfg == b, "waves/SIMD") for cfg in (a, b)]
    frame = pd.DataFrame([{"N": 64, "dtype": "fp32", "config": str(x), "ok": True} for x in (a, b, c)])
    out = resources.annotate(frame, rows, "AMD_Instinct_MI300X")
    assert list(out[resources.OCCUPANCY]) == [8, 8, "not censused"]
    assert list(out[resources.SPILLS]) == ["no spills", "no spills", "not censused"]
    assert f"same binary as {b}" in out[resources.RESOURCES][0] and "same binary" not in out[resources.RESOURCES][1]
    assert out[resources.RESOURCES][2] == ""
    other = resources.annotate(frame, rows, "NVIDIA_H200")  # another target's rows never leak in
    assert set(other[resources.SPILLS]) == {"not censused"}
    t = resources.table(rows, show="same binary as another")
    assert list(t["config"]) == [str(a)] and list(t["same binary as"]) == [str(b)]
    with pytest.raises(UsageError, match="unknown census filter"):
        resources.table(rows, show="fast ones")


def test_a_sweep_waits_for_a_census_and_a_new_kernel_stops_it(tmp_path):
    """The other way round too: Run is refused while the census tab compiles (one line, nothing written); switching
    kernel stops the census and clears what it showed."""
    wb = Workbench("rmsnorm", "M=4 N=256", ["fp32"], db=str(tmp_path / "wb.db"), isolate=False)
    assert wb.wait_ready(60)
    wb.census.refresh()
    wb.census.target.value = "mi300x"
    th = wb.census.run()
    assert th is not None and wb.census.running  # its processes take seconds to start
    assert wb.run() is None and "a census is compiling" in wb.message.value
    wb.picker.dropdown.value = "softmax"
    th.join(120)
    assert not wb.census.running and wb.census.census.stopped
    assert wb.census.summary.value == "" and wb.census.rows == []
    store = Store(tmp_path / "wb.db", readonly=True)
    assert store.count("trials") == 0
    store.close()
    wb.close()


def test_the_store_is_opened_once_when_run_and_the_views_ask_at_the_same_time(tmp_path):
    """Run (the cell's thread) and the views' builder (the census tab's refresh) may both ask for the results store
    first: one Store is opened, never two racing for SQLite's lock on a new file ("database is locked")."""
    wb = Workbench("toy", "N=64", ["fp32"], db=str(tmp_path / "new.db"), isolate=False, paths=[PLUGINS])
    assert wb.wait_ready(60)
    start, got, errors = threading.Barrier(8), [], []

    def ask():
        start.wait()
        try:
            got.append(wb._store())
        except Exception as e:  # noqa: BLE001 - the assertion below names it
            errors.append(e)

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and len(got) == 8 and len({id(s) for s in got}) == 1
    wb.close()
