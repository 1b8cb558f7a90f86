"""Widgets, headless: feed them events / results and check the values they show (no front-end needed)."""
import math
import time

import pytest

pytest.importorskip("ipywidgets")
pytest.importorskip("plotly")

from flytune_nb.core.config import Config  # noqa: E402
from flytune_nb.core.device import current_device  # noqa: E402
from flytune_nb.core.registry import get_kernel  # noqa: E402
from flytune_nb.engine.events import ShapeDone, TrialDone, TrialFailed, TrialStarted  # noqa: E402
from flytune_nb.engine.sweep import Sweep  # noqa: E402
from flytune_nb.measure.trial import Trial  # noqa: E402
from flytune_nb.strategies.loop import SearchResult
from flytune_nb.ui.notebook import LivePlot, Workbench  # noqa: E402
from flytune_nb.ui.notebook.controls import GridEditor, KernelPicker, RunControl  # noqa: E402
from flytune_nb.ui.notebook.editor import HeuristicEditor  # noqa: E402
from tests.conftest import PLUGINS  # noqa: E402

SHAPE = {"M": 4, "N": 256}


def _trial(cfg, status="ok", p50=0.01, **kw):
    return Trial("rmsnorm", SHAPE, "fp32", cfg, status, kw.pop("reason", ""), p20=p50, p50=p50, p80=p50,
                 device="NVIDIA_H200", **kw)


def test_live_plot_draws_points_by_status_marks_default_best_and_baselines(dev):
    plot = LivePlot(get_kernel("rmsnorm"), interval=0.0)
    c = [Config({"BLOCK_N": b}, num_warps=w) for b, w in ((256, 1), (256, 2), (128, 1), (512, 4))]
    trials = [_trial(c[0], p50=0.010), _trial(c[1], p50=0.004), _trial(c[2], "wrong", math.inf, reason="bad"),
              _trial(c[3], "compile_error", math.inf, reason="boom")]
    for i, t in enumerate(trials):
        plot((TrialDone if t.ok else TrialFailed)("rmsnorm", t, i, 4))
    ok, wrong, failed, dflt, best = plot.fig.data
    assert list(ok.x) == [0, 1] and [round(y, 3) for y in ok.y] == [10.0, 4.0]  # microseconds
    assert list(wrong.x) == [2] and list(failed.x) == [3]
    assert list(dflt.y) == [pytest.approx(10.0)] and list(best.y) == [pytest.approx(4.0)]
    assert "of copy bandwidth" in ok.hovertext[1]  # roofline % on hover (H200's measured 4.27 TB/s)
    result = SearchResult("rmsnorm", SHAPE, "fp32", dev, c[0], trials,
                          baselines={"torch_eager": {"status": "ok", "p50": 0.02}})
    plot(ShapeDone("rmsnorm", result))
    assert [s.y0 for s in plot.fig.layout.shapes] == [pytest.approx(20.0)]
    assert "best 4.00 us" in plot.fig.layout.title.text
    plot.set_metric("roofline")  # % of the H200's measured 4.27 TB/s copy bandwidth
    nbytes = get_kernel("rmsnorm").bytes(SHAPE, "fp32")
    assert list(plot.fig.data[0].y) == [pytest.approx(nbytes / 10e-6 / 4.27e12 * 100),
                                        pytest.approx(nbytes / 4e-6 / 4.27e12 * 100)]
    assert list(plot.fig.data[4].y) == [pytest.approx(nbytes / 4e-6 / 4.27e12 * 100)]  # best = highest %
    assert "copy bandwidth" in plot.fig.layout.yaxis.title.text


def test_live_plot_batches_redraws_and_always_draws_the_last_points(dev):
    plot = LivePlot(None, interval=0.3)
    for i in range(50):
        plot(TrialDone("rmsnorm", _trial(Config({"BLOCK_N": 256 + i})), i, 50))
    assert plot.redraws == 1  # the first event drew; the other 49 were buffered...
    time.sleep(0.8)
    assert plot.redraws == 2 and len(plot.fig.data[0].x) == 50  # ...and drawn by the timer, with no new event


def test_progress_label_counts_and_shows_best_so_far():
    rc = RunControl()
    rc.start(total_shapes=1)
    cfg = Config({"BLOCK_N": 256})
    rc(TrialStarted("rmsnorm", SHAPE, "fp32", cfg, 0, 4))
    best = _trial(cfg, p50=0.005)
    rc(TrialDone("rmsnorm", best, 0, 4, best))
    assert (rc.bar.value, rc.bar.max) == (1, 4)
    assert "1 of 4" in rc.label.value and "best so far 5.00 us" in rc.label.value and "ETA" in rc.label.value


def test_a_flydsl_kernel_is_in_the_picker_and_says_where_it_runs():
    """The workbench lists FlyDSL kernels like any other (their space size from the spec alone: FlyDSL is not
    imported); off an AMD GPU the picker says before Run that they launch on AMD GPUs only."""
    from flytune_nb.backends import flydsl

    if not flydsl.available():
        pytest.skip("flydsl is not installed")
    picker = KernelPicker("flydsl_rmsnorm")
    assert "flydsl_rmsnorm" in picker.dropdown.options and picker.dropdown.value == "flydsl_rmsnorm"
    assert "32 configs at M=4096 N=4096" in picker.info.value
    if current_device().backend != "hip":
        assert "launches on AMD GPUs (ROCm) only" in picker.info.value
    picker.dropdown.value = "rmsnorm"
    assert "launches on" not in picker.info.value


def test_grid_editor_previews_work_and_explains_bad_input():
    picker = KernelPicker("rmsnorm")
    grid = GridEditor(picker, {"M": "1,64", "N": "4096"}, ["bf16"])
    assert "<b>2</b> shapes" in grid.preview.value and "<b>98</b> trials" in grid.preview.value  # 47 + 51
    grid.axis_boxes["M"].value = "1,x"
    assert "not a positive integer" in grid.preview.value and "&#9888;" in grid.preview.value
    grid.axis_boxes["M"].value = ""
    assert "no values" in grid.preview.value
    grid.axis_boxes["M"].value = "4"
    grid.dtypes.value = ()
    assert "at least one dtype" in grid.preview.value
    grid.preset.value = "SGLang batch sizes (1 ... 4096)"
    assert grid.axis_boxes["M"].value.startswith("1,2,4,8,16,24")
    moe = GridEditor(KernelPicker("fused_moe"), None, ["bf16"])  # pre-filled from the kernel's example shape
    assert {a: b.value for a, b in moe.axis_boxes.items()} == {"M": "1,64", "E": "8", "N": "14336", "K": "4096",
                                                                "topk": "2"}


def test_heuristic_editor_rescores_on_stored_data_and_rejects_bad_edits(tmp_path, dev):
    results = Sweep("rmsnorm", "M=2,4 N=1000", ["fp32"], isolate=False, baselines=()).run()
    spec = get_kernel("rmsnorm")
    ed = HeuristicEditor(lambda: spec, lambda: results, lambda: dev, measure=None)
    assert "def default" in ed.code.value
    best = {r.shape["M"]: r.best.config for r in results}
    ed.code.value = ("from flytune_nb.core.config import Config\n"
                     f"BEST = {{2: Config.parse('{best[2]}'), 4: Config.parse('{best[4]}')}}\n"
                     "def default(shape, dtype, device):\n    return BEST[shape['M']]\n")
    s = ed.last.summary()
    assert s["new_regret"] == pytest.approx(1.0) and s["unmeasured"] == 0 and s["loses"] == 0
    ed.code.value = "def default(shape, dtype, device):\n    return Config({'BLOCK_N': 999999})\n"
    assert "NameError" in ed.result.value and "&#9888;" in ed.result.value
    ed.code.value = "def default(shape, dtype, device):\n    return 42\n"
    assert "not a Config" in ed.result.value
    ed.code.value = "def default(shape, dtype, device)\n    return 1\n"
    assert "syntax error on line 1" in ed.result.value
    ed.code.value = ("from flytune_nb.core.config import Config\n"
                     "def default(shape, dtype, device):\n    return Config({'BLOCK_N': 256}, num_warps=8, num_stages=3)\n")
    assert ed.last.unmeasured and "never measured" in ed.result.value
    target = tmp_path / "heuristic.py"
    target.write_text("old")
    ed.save_path.value = str(target)
    ed.save()
    assert target.read_text() == ed.code.value and (tmp_path / "heuristic.py.bak").read_text() == "old"


def test_workbench_runs_off_the_cell_stops_and_resumes(tmp_path):
    import threading

    started = threading.Event()
    measured = []

    def watch(event):
        if isinstance(event, TrialStarted):
            measured.append(event.config)
            if len(measured) == 3:
                started.set()

    wb = Workbench("toy", {"N": "64,96,128"}, ["fp32"], db=str(tmp_path / "wb.db"), isolate=False, paths=[PLUGINS],
                   listeners=[watch])
    th = wb.run()
    assert started.wait(60)
    wb.stop()  # pressed from the notebook's thread while the sweep thread runs
    th.join(60)
    assert wb.sweep.stopped and "stopped" in wb.control.label.value and not wb.control.run_button.disabled
    first = len(measured)
    assert 3 <= first <= 4  # Stop is honoured after the trial in flight
    th = wb.run()  # Run again resumes: only what was not stored is measured
    th.join(120)
    assert len(measured) == 24 and wb.store.count() == 24
    assert "finished: 3 shapes" in wb.control.label.value
    assert "<table" in wb.table.html.value and "launch_error" in wb.table.html.value
    assert "heuristic regret" in wb.compare.summary.value
    assert list(wb.compare.heat.data[0].y) == ["N=64", "N=96", "N=128"]  # the heat map holds the grid
    assert list(wb.shape_select.options) == ["N=64 fp32", "N=96 fp32", "N=128 fp32"]
    assert wb.plot.selected == "N=128 fp32"  # it followed the running shape
    files = wb.exporter.refresh()
    assert len(files) == 1 and "new file" in wb.exporter.html.value
    from flytune_nb.artifacts.files import BUILTIN_DIR
    from flytune_nb.core.device import current_device

    if not current_device().is_gpu:  # on a GPU these would be GPU timings, which the committed folder takes
        wb.exporter.out.value = str(BUILTIN_DIR)  # the committed GPU configs: interpreter timings are refused
        wb.exporter.write()
        assert "not written: these are CPU_interpreter timings" in wb.exporter.html.value
        assert not (BUILTIN_DIR / "toy").exists()
    wb.exporter.out.value = str(tmp_path / "scratch")
    wb.exporter.write()
    assert "wrote:" in wb.exporter.html.value and list((tmp_path / "scratch" / "toy").rglob("*.json"))


def test_editor_measures_unmeasured_picks_and_scores_wins_and_failures(tmp_path):
    wb = Workbench("toy", {"N": "64"}, ["fp32"], db=str(tmp_path / "m.db"), isolate=False, paths=[PLUGINS])
    wb.run().join(60)
    code = ("from flytune_nb.core.config import Config\n"
            "def default(shape, dtype, device):\n    return Config({'BLOCK': 64, 'MODE': %d}, num_warps=%d)\n")
    wb.editor.code.value = code % (1, 1)  # a pick that gives wrong results
    assert wb.editor.last.rows[0].verdict == "fails" and wb.editor.last.summary()["new_regret"] == math.inf
    wb.editor.code.value = code % (0, 2)  # a valid pick nobody measured (num_warps=2 is not in the toy space)
    assert wb.editor.last.unmeasured and not wb.editor.measure_button.disabled
    th = wb.measure_configs(wb.editor.last.unmeasured)
    th.join(60)
    row = wb.editor.last.rows[0]
    assert row.verdict in ("wins", "loses", "ties") and math.isfinite(row.new_ms)
    assert wb.store.count() == 9  # the 8 swept configs + the one measured for the editor


def test_workbench_reports_bad_parameters_inline(tmp_path):
    wb = Workbench("rmsnrom", "M=1,64 N=4096", ["fp8", "bf16"], db=str(tmp_path / "x.db"), isolate=False)
    assert "unknown kernel &#x27;rmsnrom&#x27;" in wb.picker.warning.value
    assert "Did you mean &#x27;rmsnorm&#x27;?" in wb.picker.warning.value
    wb.picker.dropdown.value = "rmsnorm"
    wb.grid.rebuild("M=1,64 N=4096", ["fp8", "bf16"])
    assert wb.grid.axis_boxes["M"].value == "1,64" and wb.grid.dtypes.value == ("bf16",)
    assert "unknown dtype &#x27;fp8&#x27;" in wb.grid.preview.value


def test_workbench_bad_grid_is_one_inline_message(tmp_path):
    wb = Workbench("rmsnorm", {"M": "1", "N": "4096"}, ["bf16"], db=str(tmp_path / "x.db"), isolate=False)
    wb.grid.axis_boxes["N"].value = "4096,abc"
    assert wb.run() is None and "not a positive integer" in wb.message.value


def test_heuristic_editor_loads_unedited_heuristics_with_relative_imports(dev):
    """softmax, matmul and fused_moe heuristics import from their own folder (from .configs import ...): the editor
    must score the file as it is, not reject it."""
    for kernel, grid in (("softmax", "M=2 N=300"), ("matmul", "M=5 N=40 K=64")):
        results = Sweep(kernel, grid, ["fp16"], isolate=False, baselines=(), strategy="random", budget=2).run()
        spec = get_kernel(kernel)
        ed = HeuristicEditor(lambda: spec, lambda: results, lambda: dev, measure=None)
        ed.score()
        assert ed.last is not None, ed.result.value
        assert ed.last.summary()["same"] == len(results)  # the unedited rule picks what the stored default was


def test_grid_editor_never_drops_a_typo_and_takes_the_batch_notebooks_forms():
    """A misspelled axis or a malformed term is shown, not ignored; dict-of-lists grids and "fp16" dtype strings
    (what batch_sweep.ipynb documents) work; a dtype problem clears once the user picks from the list; a shape that
    cannot fit is refused in the preview."""
    picker = KernelPicker("rmsnorm")
    import html

    typo = GridEditor(picker, {"M": "1,16", "n": "1024"}, ["bf16"])
    assert "unknown ['n']" in html.unescape(typo.preview.value)
    bad = GridEditor(picker, "M=1,64 N4096", ["bf16"])
    assert "is not AXIS=v1,v2" in html.unescape(bad.preview.value)
    ok = GridEditor(picker, {"M": [1, 16], "N": [1024]}, "fp16")
    assert ok.axis_boxes["M"].value == "1,16" and ok.dtypes.value == ("fp16",) and "<b>2</b> shapes" in ok.preview.value
    wrong = GridEditor(picker, {"M": "1", "N": "64"}, "bf61")
    assert "unknown dtype 'bf61'" in html.unescape(wrong.preview.value)
    wrong.dtypes.value = ("fp32",)
    assert "bf61" not in wrong.preview.value and "&#9888;" not in wrong.preview.value
    wrong.axis_boxes["M"].value = "100000000000"
    assert "needs ~" in wrong.preview.value and "GiB" in wrong.preview.value


def test_compare_view_shows_a_failing_default_as_infinite_regret(dev):
    """A heuristic that is wrong on some shapes must not show a clean regret."""
    from flytune_nb.ui.notebook.views import CompareView

    good, bad = Config({"BLOCK_N": 256}, num_warps=2), Config({"BLOCK_N": 256}, num_warps=1)
    ok = SearchResult("rmsnorm", {"M": 1, "N": 256}, "fp32", dev, bad,
                      [Trial("rmsnorm", {"M": 1, "N": 256}, "fp32", bad, "ok", p20=2.0, p50=2.0, p80=2.0),
                       Trial("rmsnorm", {"M": 1, "N": 256}, "fp32", good, "ok", p20=1.0, p50=1.0, p80=1.0)])
    failing = SearchResult("rmsnorm", {"M": 2, "N": 256}, "fp32", dev, bad,
                           [Trial("rmsnorm", {"M": 2, "N": 256}, "fp32", bad, "wrong", "rel error 0.5"),
                            Trial("rmsnorm", {"M": 2, "N": 256}, "fp32", good, "ok", p20=1.0, p50=1.0, p80=1.0)])
    view = CompareView()
    view.update([ok])
    assert "2.000x" in view.summary.value
    view.update([ok, failing])
    assert "inf: the heuristic default fails on 1 shape" in view.summary.value


def test_workbench_refuses_to_run_a_fallback_for_a_parameters_cell_typo(tmp_path):
    """A typo'd kernel, dtype or axis is shown with a fallback in the widgets; Run must not sweep that fallback (a
    silent wrong result) until the user fixes the cell or answers through the widgets."""
    wb = Workbench("rmsnrom", "M=1 N=256", ["fp32"], db=str(tmp_path / "x.db"), isolate=False)
    assert wb.picker.dropdown.value == "rmsnorm"  # the closest name is shown ...
    assert wb.run() is None and "not run: unknown kernel &#x27;rmsnrom&#x27;" in wb.message.value  # ... not run
    wb.picker.dropdown.value = "softmax"  # picking from the list answers it
    assert wb.picker.problem == "" and wb.picker.warning.value == ""

    wb = Workbench("rmsnorm", "M=1 N=256", ["bf17"], db=str(tmp_path / "y.db"), isolate=False)
    assert wb.run() is None and "unknown dtype &#x27;bf17&#x27;" in wb.message.value
    wb.grid.dtypes.value = ("fp32",)
    assert wb.grid.problems() == []

    wb = Workbench("rmsnorm", "M=1 X=4", ["fp32"], db=str(tmp_path / "z.db"), isolate=False)
    assert wb.run() is None and "unknown [&#x27;X&#x27;]" in wb.message.value
    wb.grid.axis_boxes["M"].value = "2"
    assert wb.grid.problems() == [] and "unknown" not in wb.grid.preview.value


def test_the_suggested_fallback_can_be_accepted_as_it_is(tmp_path):
    """A typo's fallback is already selected (the closest kernel, the first supported dtype); selecting it again
    fires no change, so the workbench offers a button that accepts what the widgets show, and then runs it."""
    wb = Workbench("rmsnrm", "M=2 N=64", ["bf61"], db=str(tmp_path / "a.db"), isolate=False)
    assert wb.accept_button.layout.display == ""
    assert wb.run() is None and "use the choices shown" in wb.message.value
    wb.picker.dropdown.value = "rmsnorm"  # already selected: no event, the typo stays unanswered
    assert wb.run() is None and "not run" in wb.message.value
    wb.accept_button.click()
    assert wb.accept_button.layout.display == "none" and wb.message.value == ""
    t = wb.run()
    assert t is not None
    t.join(300)
    assert wb.sweep.results and wb.sweep.results[0].dtype == wb.grid.dtypes.value[0]
    assert all(tr.ok for tr in wb.sweep.results[0].trials)


def test_a_bad_grid_term_keeps_the_good_axes_and_answering_it_hides_the_accept_button(tmp_path):
    """One typo'd term must not reset the axes typed right (accepting the fallback would then sweep shapes the user
    never asked for), and fixing it in the boxes answers the problem: the accept button goes away by itself."""
    wb = Workbench("rmsnorm", "M=3,5 N=384 n=8", ["fp32"], db=str(tmp_path / "g.db"), isolate=False)
    assert (wb.grid.axis_boxes["M"].value, wb.grid.axis_boxes["N"].value) == ("3,5", "384")
    assert "did you mean N?" in wb.grid.preview.value and wb.accept_button.layout.display == ""
    wb.grid.axis_boxes["N"].value = "512"
    assert wb.grid.problems() == [] and wb.accept_button.layout.display == "none"
    wb = Workbench("rmsnorm", {"Q": "1", "N": "1024"}, ["fp32"], db=str(tmp_path / "h.db"), isolate=False)
    assert wb.grid.axis_boxes["N"].value == "1024" and "unknown [&#x27;Q&#x27;]" in wb.grid.preview.value
