"""The workbench: picker + grid + Run/Stop + live plot + results + heuristic-vs-best + editor + export, wired to one
sweep at a time. The sweep runs in a thread off the cell; every trial lands in the results store as it finishes, so
Stop keeps everything measured and Run again resumes."""
from __future__ import annotations

import dataclasses
import threading

import ipywidgets as W
from IPython.display import display

from flytune_nb.core.device import current_device
from flytune_nb.engine.store import Store
from flytune_nb.engine.sweep import Sweep
from flytune_nb.errors import UsageError, first_line
from flytune_nb.ui.notebook.controls import GridEditor, KernelPicker, RunControl, error_html, run_in_thread
from flytune_nb.ui.notebook.editor import HeuristicEditor
from flytune_nb.ui.notebook.plot import LivePlot
from flytune_nb.ui.notebook.views import CompareView, ExportPanel, ResultsTable


class Workbench(W.VBox):
    def __init__(self, kernel: str | None = None, grid: dict | None = None, dtypes=("bf16",), *,
                 db: str = "workbench.db", export_dir: str = "exports", strategy: str = "exhaustive",
                 budget: int | None = None, isolate: bool = True, paths=(), timer: dict | None = None,
                 listeners=()) -> None:
        self.db_path, self.strategy, self.budget, self.isolate, self.paths = db, strategy, budget, isolate, paths
        if isolate:
            from flytune_nb.engine.processes import prestart

            prestart()  # the workers' process server imports torch while the user picks a grid
        self.extra_listeners = list(listeners)  # e.g. a logger; called from the sweep thread
        self.timer = timer
        self.picker = KernelPicker(kernel, paths)
        self.grid = GridEditor(self.picker, grid, dtypes)
        self.control = RunControl()
        self.plot = LivePlot(self.picker.spec)
        self.shape_select = W.Dropdown(description="shape", options=[])
        self.metric = W.ToggleButtons(options=[("latency", "latency"), ("% of copy BW", "roofline")],
                                      value="latency", description="y axis")
        self.message = W.HTML()
        # Answers a parameters-cell typo with what the widgets show instead (the closest kernel name, the first
        # supported dtype): choosing the already-selected entry of a list fires no change, so without this button
        # the suggested fallback itself could not be accepted.
        self.accept_button = W.Button(description="use the choices shown", icon="check",
                                      tooltip="run with the kernel, dtypes and axes the widgets show now",
                                      layout=W.Layout(width="auto"))
        self.table = ResultsTable()
        self.compare = CompareView()
        self.results: list = []
        self._lock = threading.Lock()
        self.store: Store | None = None
        self.sweep: Sweep | None = None
        self.editor = HeuristicEditor(lambda: self.picker.spec, lambda: self.results, current_device,
                                      measure=self.measure_configs)
        self.exporter = ExportPanel(lambda: self.store, export_dir, lambda: self.picker.dropdown.value, paths)
        tabs = W.Tab(children=[self.table, self.compare, self.editor, self.exporter])
        for i, title in enumerate(["results", "heuristic vs best", "heuristic editor", "export"]):
            tabs.set_title(i, title)
        super().__init__([W.HTML("<h3>flytune workbench</h3>"), self.picker, self.grid, self.control,
                          W.HBox([self.message, self.accept_button]), W.HBox([self.shape_select, self.metric]),
                          self.plot.fig, tabs])
        self.accept_button.on_click(lambda _: self.accept_choices())
        self.grid.on_change = self._sync_accept  # every preview: hidden once the user's edits answer the problems
        self._sync_accept()
        self.control.run_button.on_click(lambda _: self.run())
        self.control.stop_button.on_click(lambda _: self.stop())
        self._programmatic = False
        self.shape_select.observe(self._shape_picked, "value")
        self.plot.on_new_shape = self._add_shape
        self.metric.observe(lambda c: self.plot.set_metric(c["new"]), "value")
        self.picker.dropdown.observe(lambda _: self._kernel_changed(), "value")

    def _kernel_changed(self) -> None:
        self.plot.spec = self.picker.spec
        with self._lock:
            self.results = []  # another kernel's results must not feed this kernel's views
        self.plot.shapes.clear()
        self._set_shapes([])
        self.editor.load()
        self.refresh_views()

    def _set_shapes(self, labels) -> None:
        self._programmatic = True  # filling the list is not the user picking a shape
        try:
            self.shape_select.options = list(labels)
            self.shape_select.value = None
        finally:
            self._programmatic = False

    def _add_shape(self, label: str) -> None:
        self._set_shapes(list(self.shape_select.options) + [label])

    def _shape_picked(self, change) -> None:
        if not self._programmatic and change["new"]:
            self.plot.select(change["new"], pin=True)

    # -- actions -------------------------------------------------------------------------------------------------
    def run(self):
        """Start (or resume) the sweep in a thread; returns the thread (tests join it)."""
        self.message.value = ""
        try:
            # A typo in the parameters cell is shown with a fallback in its place; running the fallback would be a
            # silent wrong result, so the sweep waits until the user fixes the cell or answers through the widgets.
            problems = self._problems()
            self._sync_accept()
            if problems:
                raise UsageError(f"not run: {problems[0]} (or press 'use the choices shown')")
            shapes = self.grid.shapes()
            if not self.grid.dtypes.value:
                raise UsageError("choose at least one dtype")
            self.sweep = Sweep(self.picker.dropdown.value, shapes, list(self.grid.dtypes.value), db=self._store(),
                               paths=self.paths, strategy=self.strategy, budget=self.budget, isolate=self.isolate,
                               timer=self.timer,
                               listeners=[self.control, self.plot, self._on_event, *self.extra_listeners])
        except Exception as e:  # noqa: BLE001 - bad grid / dtype / kernel: one inline line
            self.message.value = error_html(str(e))
            return None
        self.plot.shapes.clear()
        self.plot.selected, self.plot.pinned = None, False
        self._set_shapes([])
        self.control.start(len(shapes) * len(self.grid.dtypes.value))
        self.editor.measure_button.disabled = True
        return run_in_thread(self.sweep.run, self._finished)

    def _problems(self) -> list[str]:
        return [p for p in (self.picker.problem, *self.grid.problems()) if p]

    def _sync_accept(self) -> None:
        self.accept_button.layout.display = "" if self._problems() else "none"

    def accept_choices(self) -> None:
        """Take the kernel, dtypes and axes the widgets show in place of the parameters cell's unknown ones."""
        self.picker.problem, self.picker.warning.value = "", ""
        self.grid.grid_problem = self.grid.dtype_problem = ""
        self.message.value = ""
        self.grid.update_preview()  # and hides the button

    def stop(self) -> None:
        if self.sweep is not None:
            self.sweep.stop()
            self.control.bar.description = "stopping"

    def _store(self) -> Store:
        if self.store is None:
            self.store = Store(self.db_path)
        return self.store

    def _on_event(self, event) -> None:
        from flytune_nb.engine.events import ShapeDone

        if isinstance(event, ShapeDone):
            self._merge_result(event.result)
            self.refresh_views()

    def _merge_result(self, result) -> None:
        with self._lock:  # the sweep thread and the measure thread both add results
            key = (tuple(result.shape.items()), result.dtype)
            old = next((r for r in self.results if (tuple(r.shape.items()), r.dtype) == key), None)
            if old is not None and old is not result:
                seen = {(t.config, t.fidelity) for t in result.trials}
                result = dataclasses.replace(result, trials=result.trials + [
                    t for t in old.trials if (t.config, t.fidelity) not in seen])
            self.results = [r for r in self.results if (tuple(r.shape.items()), r.dtype) != key] + [result]

    def _finished(self, results, error) -> None:
        self.plot.flush()
        if error is not None:
            self.control.finish(error_html(f"sweep failed: {first_line(error)}"))
            return
        stopped = self.sweep is not None and self.sweep.stopped
        n = sum(len(r.trials) for r in self.results)
        self.control.finish(f"{'stopped' if stopped else 'finished'}: {len(self.results)} shapes, {n} trials in "
                            f"<code>{self.db_path}</code>{'; Run resumes' if stopped else ''}")
        self.refresh_views()

    def refresh_views(self) -> None:
        self.table.update(self.results)
        self.compare.update(self.results)
        self.editor.score()

    def measure_configs(self, items) -> None:
        """Time the configs an edited heuristic picks but nobody measured: one small sweep per shape through the same
        isolated workers (a pick that crashes costs a worker, not this kernel), off the cell; results join the
        stored ones and the editor re-scores."""
        if self.sweep is not None and self.control.run_button.disabled:
            self.editor.result.value = error_html("a sweep is running; measure after it finishes")
            return None
        jobs = {}
        for shape, dtype, config in items:
            jobs.setdefault((tuple(shape.items()), dtype), []).append(config)

        def work():
            out = []
            for (shape, dtype), configs in jobs.items():
                sw = Sweep(self.picker.dropdown.value, [dict(shape)], [dtype], db=self._store(), paths=self.paths,
                           isolate=self.isolate, timer=self.timer, configs=configs, baselines=())
                out += sw.run()
            return out

        def done(results, error):
            if error is not None:
                self.editor.result.value = error_html(f"measuring failed: {first_line(error)}")
                return
            for r in results:
                self._merge_result(r)
            self.refresh_views()

        self.editor.result.value = f"<i>measuring {len(items)} config(s)...</i>"
        return run_in_thread(work, done)

    def show(self):
        display(self)
        return self
