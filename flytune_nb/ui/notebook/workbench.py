"""The workbench: picker + grid + sweep settings + Run/Stop + tabs (overview, explorer, results, census, heuristic vs
best, heuristic editor, compare runs, export), wired to one sweep at a time. The sweep runs in a thread off the cell;
every trial lands in the results store as it finishes, so Stop keeps everything measured and Run again resumes.

Start-up is paid for in order of need: the controls first (Run is usable as soon as the cell returns), then plotly in
a thread (the FigureSlots fill in), then the exact memory check (GridEditor). Re-running the cell closes the previous
workbench: two FigureWidgets carry plotly.js each, and twenty re-runs that each keep their workbench leave 2754 widget
models (~205 MB of widget state), enough to crash the browser.
"""
from __future__ import annotations

import html
import threading
import weakref

import ipywidgets as W
from IPython.display import display

from flytune_nb.analysis.explore import shape_label
from flytune_nb.analysis.failures import summarize
from flytune_nb.core.device import current_device
from flytune_nb.core.paths import beside
from flytune_nb.core.registry import drop_unusable_env_paths, kernel_paths, search_path
from flytune_nb.core.events import Emitter, ShapeDone, TrialDone, TrialFailed, TrialStarted
from flytune_nb.engine.store import StoreGone
from flytune_nb.errors import RunError, UsageError, first_line
from flytune_nb.ui.notebook.controls import (GridEditor, KernelPicker, RunControl, SweepSettings, error_html,
                                             run_in_thread)
from flytune_nb.ui.notebook.editor import HeuristicEditor
from flytune_nb.ui.notebook.live import LiveResults
from flytune_nb.ui.notebook.slots import load_plotly

CLOSE_WAIT_S = 10.0  # how long closing waits for a stopped sweep to end
TABS = ("overview", "explorer", "results", "census", "heuristic vs best", "heuristic editor", "compare runs", "export")
_CURRENT: list = []  # a weak reference to the workbench shown last (closed when the cell runs again)


class Workbench(W.VBox):
    def __init__(self, kernel: str | None = None, grid: dict | None = None, dtypes=("bf16",), *,
                 db: str = "workbench.db", export_dir: str = "exports", strategy: str = "exhaustive",
                 budget: int | None = None, isolate: bool = True, paths=(), timer: dict | None = None,
                 timeout: float = 120.0, gpus=None, retry_failed: bool = False, listeners=(),
                 heuristic_time_limit: float | None = None) -> None:
        _close_previous()
        self.db_path, self.isolate, self.paths = db, isolate, kernel_paths(paths)
        paths_problem, cell_paths_bad = "", False
        env_problems = drop_unusable_env_paths()
        if env_problems:  # set in the shell that started Jupyter: a parameters cell cannot fix it
            paths_problem = (f"{'; '.join(env_problems)}. Left out of FLYTUNE_KERNEL_PATH in this notebook; fix the "
                             f"variable where Jupyter was started and restart it")
        try:
            search_path(self.paths)
        except UsageError as e:  # a parameters-cell mistake like a kernel typo: shown above the widgets, not raised
            paths_problem = "; ".join(filter(None, [paths_problem, (
                f"{e}. Fix paths in the parameters cell; until then only the built-in kernels are listed")]))
            self.paths, cell_paths_bad = [], True
        if isolate:
            from flytune_nb.engine.processes import prestart

            prestart()  # the workers' process server imports torch while the user picks a grid
        self.extra_listeners = list(listeners)  # e.g. a logger; called from the sweep thread
        self.store = None
        self.sweep = None
        self._thread: threading.Thread | None = None
        self._run_lock = threading.Lock()  # one sweep at a time: a double click must not start two
        self._measuring = False  # what runs in _thread: the editor's Measure missing, not a sweep
        self._stop_asked = threading.Event()  # Stop: measuring runs one sweep per shape, and starts no more after it
        self._finish_lock = threading.Lock()  # a run's finish line against a kernel switch clearing it
        self._relay: _Relay | None = None  # the running sweep's events to the progress bar and the views
        self._store_lock = threading.Lock()
        self._stored_shown = ""  # the stored-results line the message shows, replaced as the grid's results come
        self.live = LiveResults()
        self.picker = KernelPicker(kernel, self.paths)
        if paths_problem:  # it comes first: a kernel of those folders reads as unknown because of it
            if self.picker.problem or cell_paths_bad:  # else a built-in kernel runs as asked
                self.picker.problem = paths_problem
            self.picker.warning.value = error_html(paths_problem)
        self.settings = SweepSettings(strategy, budget, timeout, (timer or {}).get("rep_ms"), gpus, retry_failed)
        self._timer_extra = {k: v for k, v in (timer or {}).items() if k != "rep_ms"}
        self.grid = GridEditor(self.picker, grid, dtypes, store_getter=self._store_if_exists,
                               budget=self.settings.budget.value or None)
        self.control = RunControl()
        self.message = W.HTML()
        # Answers a parameters-cell typo with what the widgets show instead (the closest kernel name, the first
        # supported dtype): choosing the already-selected entry of a list fires no change, so without this button
        # the suggested fallback itself could not be accepted.
        self.accept_button = W.Button(description="use the choices shown", icon="check",
                                      tooltip="run with the kernel, dtypes and axes the widgets show now",
                                      layout=W.Layout(width="auto"))
        # The tabs' pages are built off the cell, after it has returned (the Run button is usable before them):
        # each page is a placeholder until then, and the attributes below wait for it (views_ready).
        self.tabs = None  # built with its pages (a Tab's selected page set after its pages change is not shown)
        self.tabs_box = W.Box([W.HTML("<i style='color:#888'>loading the views…</i>")],
                              layout=W.Layout(width="100%", min_height="500px"))
        self._export_dir, self._time_limit = export_dir, heuristic_time_limit
        self.views_ready = threading.Event()
        self.first_drawn = threading.Event()  # the views have drawn what there is to show at the start
        self._views: dict = {}
        super().__init__([W.HTML("<h3 style='margin:4px 0'>flytune workbench</h3>"), self.picker, self.grid,
                          W.HTML("<small><b>sweep settings</b></small>"), self.settings, self.control,
                          W.HBox([self.message, self.accept_button]), self.tabs_box])
        self.accept_button.on_click(lambda _: self.accept_choices())
        self.grid.on_change = self._sync_accept  # every preview: hidden once the user's edits answer the problems
        self.grid.on_edit = self._grid_edited
        self.settings.budget.observe(lambda c: self.grid.update_preview(budget=c["new"] or 0), "value")
        # after SweepSettings.answered, each knob's own observer
        for knob in (self.settings.strategy, self.settings.budget, self.settings.timeout):
            knob.observe(lambda _: self._sync_accept(), "value")
        self._sync_accept()
        self.control.run_button.on_click(lambda _: self.run())
        self.control.stop_button.on_click(lambda _: self.stop())
        self.live.on_change = self._live_changed
        self.picker.dropdown.observe(lambda _: self._kernel_changed(), "value")
        _CURRENT[:] = [weakref.ref(self)]
        threading.Thread(target=self._build_views, daemon=True, name="flytune-views").start()

    def _build_views(self) -> None:
        """The tab pages, then plotly (the FigureSlots fill in when it has loaded)."""
        try:
            from flytune_nb.ui.notebook.census_tab import CensusView
            from flytune_nb.ui.notebook.views import (CompareView, ExplorerView, ExportPanel, OverviewView,
                                                      ResultsTable, RunsView)

            v = self._views
            v["overview"] = OverviewView()
            v["explorer"] = ExplorerView(self.picker.spec)
            v["explorer"].source = self.live.get
            # beside the store, where the batch notebook writes its results (a store in memory has no folder)
            v["table"] = ResultsTable(csv_path=beside(self.db_path, ".trials.csv") if self.db_path != ":memory:"
                                      else "workbench.trials.csv")
            v["compare"] = CompareView()
            v["editor"] = HeuristicEditor(lambda: self.picker.spec, self.finished_results, current_device,
                                          measure=self.measure_configs, time_limit=self._time_limit)
            v["runs"] = RunsView(lambda: self.store, lambda: self.picker.dropdown.value)
            v["exporter"] = ExportPanel(lambda: self.store, self._export_dir, lambda: self.picker.dropdown.value,
                                        self.paths)
            v["census"] = CensusView(self._census_store, lambda: self.picker.dropdown.value, self._grid_shapes,
                                     paths=self.paths, trials_getter=self._trials_of, busy=self._census_busy,
                                     here=current_device())
            v["census"].on_rows = v["explorer"].set_census
            v["overview"].on_open = self.open_shape
            self.live.on_new_shape = v["explorer"].add_shape
            for label in list(self.live.entries):
                v["explorer"].add_shape(label)
            pages = [v[k] for k in ("overview", "explorer", "table", "census", "compare", "editor", "runs",
                                    "exporter")]
            self.tabs = W.Tab(children=pages, titles=TABS, selected_index=TABS.index("explorer"),
                              layout=W.Layout(width="100%"))  # the live view of the running shape first
            self.tabs.observe(self._tab_selected, "selected_index")
            placeholders = list(self.tabs_box.children)
            self.tabs_box.children = [self.tabs]
            for w in placeholders:
                _close_tree(w)
        finally:
            self.views_ready.set()
        try:
            self.refresh_views()
        finally:
            self.first_drawn.set()
        load_plotly(on_ready=self._plotly_ready)

    def _view(self, name: str):
        if not self.views_ready.wait(120):
            raise RunError("the workbench's views did not build within 120 s")
        return self._views[name]

    overview = property(lambda self: self._view("overview"))
    explorer = property(lambda self: self._view("explorer"))
    table = property(lambda self: self._view("table"))
    census = property(lambda self: self._view("census"))
    compare = property(lambda self: self._view("compare"))
    editor = property(lambda self: self._view("editor"))
    runs = property(lambda self: self._view("runs"))
    exporter = property(lambda self: self._view("exporter"))

    # -- wiring ----------------------------------------------------------------------------------------------------
    def _plotly_ready(self) -> None:
        self.refresh_views()
        self.explorer.redraw()

    def wait_ready(self, timeout: float = 120) -> bool:
        """Until the tab pages are built and have drawn what there is to show, and plotly is loaded (tests; a script
        that reads figures)."""
        from flytune_nb.ui.notebook.slots import wait_plotly

        return self.views_ready.wait(timeout) and self.first_drawn.wait(timeout) and wait_plotly(timeout)

    def _store_if_exists(self):
        if self.store is not None:
            return self.store
        from pathlib import Path

        if self.db_path != ":memory:" and Path(self.db_path).is_file():
            try:
                return self._store()
            except Exception:  # noqa: BLE001 - a foreign file is refused at Run with its message
                return None
        return None

    def _tab_selected(self, change) -> None:
        if change["new"] == TABS.index("census"):
            try:
                self.census.refresh()  # the grid's shapes as they are now
            except Exception as e:  # noqa: BLE001 - an unreadable store: one line in the tab, not a traceback
                self.census.message.value = error_html(f"cannot read the census rows: {first_line(e)}")

    def _census_store(self, create: bool = False):
        return self._store() if create else self._store_if_exists()

    def _grid_shapes(self) -> list:
        """[(shape, dtype)] the grid shows now (the census tab's choices)."""
        return [(s, d) for d in self.grid.dtypes.value for s in self.grid.shapes()]

    def _trials_of(self, shape: dict, dtype: str):
        """That shape's trials frame, as the explorer reads it (None: not measured here)."""
        from flytune_nb.analysis.explore import trials_frame

        r = self.live.get(shape_label(shape, dtype))
        return trials_frame([r]) if r is not None else None

    def _census_busy(self) -> str:
        # compiling on every core beside a timing worker would perturb what it measures
        return "a sweep is running; compile after it finishes (the compilers would compete with the timing)" \
            if self.running else ""

    def _live_changed(self, label) -> None:
        if not self.views_ready.is_set():
            return  # the views draw everything measured so far when they are built
        self.explorer.follow(label)
        if label is not None and label in self.live.finished:
            self.refresh_views()

    def open_shape(self, label: str) -> None:
        """Show ``label`` in the explorer (a click on the overview)."""
        self.explorer.select(label, pin=True)
        if self.tabs is not None:
            self.tabs.selected_index = TABS.index("explorer")

    def finished_results(self) -> list:
        return self.live.finished_results()

    def _grid_edited(self) -> None:
        """The grid's boxes edited before Run: the line saying the store holds its results is this grid's, so the
        views that show it (no results on screen yet) are redrawn with the new grid's line, or without one."""
        if self.running or self.live.entries or not self.views_ready.is_set():
            # a sweep running (its first trial not in yet) or results on screen: no line to show, the sweep's
            # trials redraw the views; views not built yet: they draw the grid as it is then
            return
        self.refresh_views()

    def _kernel_changed(self) -> None:
        """Another kernel: nothing of the previous one's plot, finish line or export message stays."""
        if self.running:
            self.stop()
        with self._finish_lock:  # a sweep ending now writes its finish line before this clears it, or not at all
            if self._relay is not None:
                # the stopped sweep still sends its trial in flight and its cut-off shape: the previous kernel's,
                # which the views would otherwise show (and merge into a shape of the same label) as the new kernel's
                self._relay.cut()
            self.live.clear()
            self.control.label.value = ""
        self.control.bar.value, self.control.bar.description = 0, "idle"
        self.message.value = ""
        if not self.views_ready.is_set():
            return  # the views are built from the kernel picked then
        self.explorer.spec = self.picker.spec
        self.explorer.clear()
        self.exporter.clear()
        self.census.clear()
        self.editor.load()
        self.refresh_views()
        from flytune_nb.ui.notebook.slots import plotly_ready

        if plotly_ready():  # empty figures: no point of the previous kernel stays on screen
            import plotly.graph_objects as go

            for slot in (self.explorer.slot, self.explorer.parallel, self.explorer.heat, self.overview.slot,
                         self.compare.heat, self.runs.slot):
                slot.show(go.Figure(layout=dict(height=slot.height, template="plotly_white",
                                                title=dict(text="no results for this kernel yet", x=0.01),
                                                xaxis=dict(visible=False), yaxis=dict(visible=False))))

    # -- actions -------------------------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def run(self):
        """Start (or resume) the sweep in a thread; returns the thread (tests join it), or None when refused (a bad
        entry, or a sweep already running: one at a time, so a double click starts one)."""
        from flytune_nb.engine.sweep import Sweep

        if not self._run_lock.acquire(blocking=False):
            return None
        try:
            if self.running:
                self.message.value = error_html(
                    "not run: the heuristic editor is measuring its picks; Stop it, or Run when it has finished"
                    if self._measuring else "a sweep is running already; Stop it to start another")
                return None
            self.message.value = ""
            if self.views_ready.is_set() and self.census.running:  # the compilers would compete with the timing
                self.message.value = error_html("not run: a census is compiling; Run after it finishes (or stop it "
                                                "in the census tab)")
                self.control.mark_previous()
                return None
            try:
                gone = self._gone_store()  # first: the preview below reads the store
                if gone:
                    raise UsageError(f"not run: {gone}")
                # A typo in the parameters cell is shown with a fallback in its place; running the fallback would be
                # a silent wrong result, so the sweep waits until the user fixes the cell or answers the widgets.
                problems = self._problems()
                self._sync_accept()
                if problems:
                    raise UsageError(f"not run: {problems[0]} (or press 'use the choices shown')")
                shapes = self.grid.shapes()
                if not self.grid.dtypes.value:
                    raise UsageError("choose at least one dtype")
                self.grid.update_preview()
                if self.grid.fits_problem:  # refused as typos are: nothing runs, nothing is written
                    raise UsageError(f"not run: {self.grid.fits_problem}")
                opts = self.settings.values()
                timer = {**self._timer_extra, **(opts.pop("timer") or {})} or None
                relay = _Relay([self.control, self.live])
                self.sweep = Sweep(self.picker.dropdown.value, shapes, list(self.grid.dtypes.value),
                                   db=self._store(), paths=self.paths, isolate=self.isolate, timer=timer,
                                   listeners=self._listeners(relay), **opts)
            except Exception as e:  # noqa: BLE001 - bad grid / dtype / kernel / setting: one inline line
                said = str(e)
                self.message.value = error_html(said if said.startswith("not run:") else f"not run: {said}")
                # the finish line left from the run before would otherwise read as this Run's outcome
                self.control.mark_previous()
                return None
            self.message.value = _no_gpu_note(opts["gpus"], self.isolate)
            self._relay = relay
            self._measuring = False
            self._stop_asked.clear()
            if self.views_ready.is_set():
                if not self.explorer.pinned:
                    self.explorer.selected = None
                self.editor.measure_button.disabled = True
            self.control.start(self.grid.planned)
            self._thread = run_in_thread(self.sweep.run, self._finished)
            return self._thread
        finally:
            self._run_lock.release()

    def _listeners(self, relay) -> list:
        """Every sweep this workbench starts (Run, the editor's Measure missing) speaks to its views through
        ``relay`` and to the user's own listeners as they are when it starts."""
        return [relay, *self.extra_listeners]

    def _problems(self) -> list[str]:
        return [p for p in (self.picker.problem, *self.grid.problems(), self.settings.problem) if p]

    def _sync_accept(self) -> None:
        self.accept_button.layout.display = "" if self._problems() else "none"

    def accept_choices(self) -> None:
        """Take the kernel, dtypes and axes the widgets show in place of the parameters cell's unknown ones."""
        self.picker.problem, self.picker.warning.value = "", ""
        self.grid.grid_problem = self.grid.dtype_problem = ""
        self.settings.answered()
        self.message.value = ""
        self.grid.update_preview()  # and hides the button

    def stop(self) -> None:
        """End the sweep, or the editor's measuring, within ~1 s (Sweep.stop: the trial in flight is killed if it
        does not finish at once)."""
        if self.running:
            self._stop_asked.set()
            if self.sweep is not None:
                self.sweep.stop()
            self.control.bar.description = "stopping"

    def _store(self):
        from flytune_nb.engine.store import Store

        # Run (the cell's thread) and the views (their builder thread, the census tab) may both ask first: two
        # Stores opening a new file at once collide on SQLite's lock ("database is locked") and one of them fails
        with self._store_lock:
            if self.store is None:
                self.store = Store(self.db_path)
            return self.store

    def _gone_store(self) -> str:
        """"" while the store this workbench opened is still the file at its path; else what happened and what to
        do, once the workbench has let go of it (``_let_go``)."""
        store = self.store
        if store is None:
            return ""
        try:
            store.check_file()
        except StoreGone as e:
            return self._let_go(store, e)
        return ""

    def _let_go(self, store, e: BaseException) -> str:
        """Close a store whose file was deleted or moved, so the next Run opens a new one at the path. Closing is
        what saves a moved store's last rows: SQLite moves them from its -wal (left at the old path) into the file
        where it went, and removes the -wal and -shm, which a new store at the path would otherwise read as its
        own."""
        with self._store_lock:
            if self.store is store:
                self.store = None
        try:
            store.close()
        except Exception:  # noqa: BLE001 - already closed: nothing of it is left to lose
            pass
        from pathlib import Path

        again = (f"Run again opens the file now at {self.db_path}" if Path(self.db_path).exists() else
                 f"Run again starts a new store at {self.db_path}")
        return f"{e}. To go on with a moved store, re-run the cell with db= naming where it is now; {again}"

    def _finished(self, results, error) -> None:
        sweep = self.sweep
        self.grid.forget_estimate()
        self.grid.update_preview()  # its time estimate, from the trials just stored
        line = self._finish_line(sweep, results, error)
        with self._finish_lock:  # a kernel switch clears the finish line: this one is written before it or not at all
            if self._relay is not None and self._relay.was_cut and sweep is not None:
                # its results are not this kernel's, and "Run resumes" would not resume it
                what = "stopped when" if sweep.cut_short or error is not None else "finished before"
                self.control.finish(f"the {html.escape(sweep.spec.name)} sweep {what} the kernel was switched; "
                                    f"what it measured is in <code>{html.escape(str(self.db_path))}</code>")
                return
            # an Exception ended it (Stop and an interrupt of the kernel are not one, nor the error a Stop during the
            # planning ends it on): "failed", not "stopped"
            before = _stopped_before_the_first_trial(sweep, error)
            self.control.finish(line, failed=isinstance(error, Exception) and not getattr(sweep, "cut_short", False)
                                and not before, stopped=before)
        self.refresh_views()

    def _finish_line(self, sweep, results, error) -> str:
        if isinstance(error, StoreGone) and sweep is not None and sweep.store is not None:
            return error_html(f"sweep stopped: {self._let_go(sweep.store, error)}")
        if error is not None and not _stopped_before_the_first_trial(sweep, error):
            return error_html(f"sweep failed: {first_line(error)}")
        # Stopped: Stop ended the run before it measured all it planned; one that came after (a kernel switched as
        # the sweep ended) stopped nothing
        stopped = sweep is not None and (sweep.cut_short or error is not None)
        # What this run did, not what the store held before: its own results (or, stopped, what reached the view)
        mine = results if results is not None else [
            r for r in self.live.results() if sweep is not None and r.shape in sweep.shapes]
        trials = [t for r in mine for t in r.trials]
        fails = summarize(trials)
        partial = sum(r.stopped for r in mine)
        line = (f"{'stopped' if stopped else 'finished'}: {len(mine)} shape(s)"
                + (f" ({partial} partial)" if partial else "") + f", {len(trials)} trials "
                f"({self.control.measured} measured now, {len(trials) - self.control.measured} from the store) in "
                f"<code>{self.db_path}</code>; ")
        if fails.failed:
            line += (f"<b style='color:#b00020'>{fails.line()}</b>; tick <i>retry failed</i> and Run to measure "
                     f"them again")
        else:
            line += fails.line()
        if stopped:
            line += "; Run resumes"
        if fails.failed and fails.failed == len(trials):
            line = error_html("every trial failed. ") + line
        return line

    def refresh_views(self) -> None:
        if not self.views_ready.is_set():
            return
        results = self.live.finished_results()
        spec = self.picker.spec
        # Nothing shown yet (a notebook reopened on its store, another kernel picked): the views say whether the
        # store holds this grid's results, which Run replays without measuring them, instead of reading as if
        # nothing had been measured
        stored = "" if self.live.entries else self._stored_line()
        self.overview.update(results, spec.batch_axis)
        if stored:
            self.overview.summary.value = f"<i>{stored}</i>"
        self.table.update(self.live.results())
        self.compare.update(results)
        self.editor.stored_note = stored
        self.editor.score()
        if self.message.value == self._stored_shown or not self.message.value:
            self.message.value = self._stored_shown = f"<i>{stored}</i>" if stored else ""
        try:
            self.census.refresh()
        except Exception as e:  # noqa: BLE001 - an unreadable census must not stop the other views updating
            self.census.message.value = error_html(f"cannot read the census rows: {first_line(e)}")

    def _stored_line(self) -> str:
        """One line when the store holds trials of the grid shown, for this kernel's current source on this device:
        how many, and that Run shows them without measuring them again (a sweep replays every stored trial); "" when
        it holds none, or the grid cannot be read."""
        import json

        from flytune_nb.core.key import current_source

        store = self._store_if_exists()
        if store is None:
            return ""
        try:
            spec = self.picker.spec
            wanted = {(tuple(s.items()), d) for s in self.grid.shapes() for d in self.grid.dtypes.value}
            df = store.frame(spec.name)
            if df.empty:
                return ""
            df = df[(df["device"] == current_device().name) & (df["source"] == current_source(spec))]
            found = [(tuple(json.loads(sh).items()), d) in wanted for sh, d in zip(df["shape"], df["dtype"])]
            df = df[found]
        except Exception:  # noqa: BLE001 - a grid typo (the preview says it) or an unreadable store (Run says it)
            return ""
        if df.empty:
            return ""
        shapes = df.groupby(["shape", "dtype"]).ngroups
        rest = "; the grid's other shapes are measured" if shapes < len(wanted) else ""
        return (f"the store holds {len(df)} trials of {shapes} of this grid's {len(wanted)} shapes: press Run to "
                f"show them (stored trials are replayed, not measured again{rest})")

    def measure_configs(self, items):
        """Time the configs an edited heuristic picks but nobody measured, with each shape's default and best
        measured again beside them (the verdict then compares timings taken together, not against minutes-old
        ones): one small sweep per shape through the same isolated workers, off the cell. The points reach the
        explorer as they come; the editor re-scores when they are stored."""
        if not self._run_lock.acquire(blocking=False):  # Run pressed at the same instant
            self.editor.result.value = error_html("a sweep is starting; measure after it finishes")
            return None
        try:
            return self._start_measuring(items)
        finally:
            self._run_lock.release()

    def _start_measuring(self, items):
        from flytune_nb.engine.sweep import Sweep

        if self.running:
            self.editor.result.value = error_html("a sweep is running; measure after it finishes")
            return None
        if self.census.running:
            self.editor.result.value = error_html("a census is compiling; measure after it finishes")
            return None
        gone = self._gone_store()
        if gone:
            self.editor.result.value = error_html(f"not measured: {gone}")
            return None
        jobs = {}
        for shape, dtype, config in items:
            jobs.setdefault((tuple(shape.items()), dtype), []).append(config)
        current = {shape_label(r.shape, r.dtype): r for r in self.live.finished_results()}
        relay = self._relay = _Relay([self.control, _AddedTimings(self.live)])
        stop_asked = self._stop_asked
        planned = []
        for (shape, dtype), configs in jobs.items():
            r = current.get(shape_label(dict(shape), dtype))
            planned.append(len(set(configs) | ({r.default, r.pick.config} if r is not None and r.pick else set())))

        def work():
            out = []
            for (shape, dtype), configs in jobs.items():
                if stop_asked.is_set():
                    break
                r = current.get(shape_label(dict(shape), dtype))
                fresh = [r.default, r.pick.config] if r is not None and r.pick is not None else []
                # No selection stage here: these timings score the edit, they do not decide the shape. Its decision
                # (the re-timed winner an export ships, and its evidence) stays the sweep's; a selection over these
                # few configs would replace it in the store, and a single slow timing of the pick would hand the
                # shape to the default without any re-timing.
                sw = Sweep(self.picker.dropdown.value, [dict(shape)], [dtype], db=self._store(), paths=self.paths,
                           isolate=self.isolate, configs=list(dict.fromkeys(configs + fresh)), baselines=(),
                           beside=fresh, selection=None, listeners=self._listeners(relay))
                self.sweep = sw
                if stop_asked.is_set():  # Stop pressed while this sweep was being made: it stopped the previous one
                    break
                out += sw.run()
            return out

        def done(results, error):
            cut = stop_asked.is_set() and (results is None or len(results) < len(jobs)
                                           or any(r.stopped for r in results))
            if isinstance(error, StoreGone) and self.sweep is not None and self.sweep.store is not None:
                line = error_html(f"measuring stopped: {self._let_go(self.sweep.store, error)}")
            elif error is not None and not (cut and "stopped before the first trial" in str(error)):
                line = error_html(f"measuring failed: {first_line(error)}")
            else:
                line = (f"{'measuring stopped' if cut else 'measured'} for the heuristic editor: "
                        f"{self.control.measured} trial(s) measured now, stored in <code>{html.escape(str(self.db_path))}</code>"
                        + ("; Measure missing measures the rest" if cut else ""))
            with self._finish_lock:
                if relay.was_cut:  # the kernel was switched: the editor shows the new kernel's rule now
                    what = "stopped when" if cut else "ended before"
                    self.control.finish(f"measuring for the heuristic editor {what} the kernel was switched; what it "
                                        f"measured is in <code>{html.escape(str(self.db_path))}</code>")
                    return
                self.control.finish(line)
            self.refresh_views()  # the editor re-scores, and offers what is still unmeasured
            self.editor.result.value = f"<p>{line}</p>" + self.editor.result.value

        self._measuring = True
        stop_asked.clear()
        self.control.start(planned)
        self.editor.result.value = f"<i>measuring {len(items)} config(s) beside the defaults and bests...</i>"
        self._thread = run_in_thread(work, done)
        return self._thread

    def close(self) -> None:
        """Stop a running sweep and close every widget of this workbench (the front-end frees their models)."""
        if "views_ready" not in self.__dict__:
            # __init__ stopped before its views existed (a worker server that could not start): the widget's
            # __del__ still calls close, which must then say nothing beside the error that stopped __init__
            return super().close()
        if self.running:
            self.stop()
            # Stop ends a sweep within about a second (the trial in flight's grace, then its worker is killed). The
            # cell that re-ran, closing this workbench, opens the same store next: until this sweep has let go of it,
            # that cell's Run is refused as "being written by another sweep".
            self._thread.join(CLOSE_WAIT_S)
        if self.views_ready.is_set():
            self.census.stop()  # its compilers exit once the configs in flight finish
        self.live.on_change = self.live.on_new_shape = None
        self.views_ready.wait(30)
        _close_tree(self)

    def show(self):
        display(self)
        return self


class _Relay(Emitter):
    """Hands one sweep's events to the progress bar and the views until ``cut`` (a kernel switch): once ``cut``
    returns, none of that sweep's later events reaches them. A view that raises is detached, as by any Emitter."""

    def __init__(self, targets) -> None:
        super().__init__(targets)
        self.was_cut = False

    def __call__(self, event) -> None:
        with self._lock:
            if not self.was_cut:
                self._emit(event)

    def cut(self) -> None:
        with self._lock:
            self.was_cut = True


class _AddedTimings:
    """A measure-missing run's events for the live results: its trials are timings added to finished shapes
    (``LiveResults.add``), never a new search of them. Its ShapeDone is not the shape's result: it holds none of the
    search's trials, no selection (the run makes no decision) and none of the shape's baselines, and a run that
    fails mid-shape sends none, so the shape must not depend on it."""

    def __init__(self, live: LiveResults) -> None:
        self.live = live

    def __call__(self, event) -> None:
        if isinstance(event, (TrialDone, TrialFailed)):
            self.live.add(event.trial)
        elif not isinstance(event, ShapeDone):
            self.live(event)


def _stopped_before_the_first_trial(sweep, error) -> bool:
    """Whether ``error`` is the one a Stop during the sweep's planning ends it on: a stop, not a failure."""
    return (error is not None and sweep is not None and sweep.stopped
            and "stopped before the first trial" in str(error))


def _no_gpu_note(gpus, isolate: bool) -> str:
    """What the GPUs box runs on a machine without a GPU: check_gpus takes 0..k-1 there as a count of CPU workers
    of Triton's interpreter (the multi-lane path, exercised without a GPU), which no one typing "0,1" expects."""
    if not gpus or current_device().is_gpu:
        return ""
    n = len(gpus) if isolate else 1  # in-process trials (isolate=False) run in the notebook's own process
    runs = f"{n} CPU worker{'s' if n != 1 else ''} of Triton's interpreter" + (" sharing the shapes" if n > 1 else "")
    return (f"<span style='color:#b35900'>&#9888; no GPU here: GPUs {html.escape(','.join(map(str, gpus)))} runs "
            f"{runs}; its timings say nothing about GPU speed</span>")


def _widgets_under(root) -> list:
    """``root`` and every widget under it: children, tab pages, each widget's Layout and Style models, and widgets
    held as attributes (a FigureSlot's FigureWidget, a view's controls, the workbench's views)."""
    out, stack, seen = [], [root], set()
    while stack:
        w = stack.pop()
        if id(w) in seen:
            continue
        seen.add(id(w))
        if isinstance(w, W.Widget):
            out.append(w)
        values = list(getattr(w, "_trait_values", {}).values()) + list(vars(w).values())
        for v in values:
            if isinstance(v, W.Widget):
                stack.append(v)
            elif isinstance(v, (list, tuple)):
                stack.extend(x for x in v if isinstance(x, W.Widget))
            elif isinstance(v, dict):
                stack.extend(x for x in v.values() if isinstance(x, W.Widget))
    return out


def _close_tree(widget) -> None:
    for w in _widgets_under(widget):
        try:
            # the workbench's own close() is what called this: close its model, not it again
            W.Widget.close(w) if isinstance(w, Workbench) else w.close()
        except Exception:  # noqa: BLE001 - closing what is half-gone must not fail the new cell
            pass


def _close_previous() -> None:
    old = _CURRENT[0]() if _CURRENT else None
    if old is not None:
        old.close()
    _CURRENT.clear()
