"""Input widgets: kernel picker, shape-grid editor with a live preview, sweep settings, Run / Stop with progress.

Each shows bad input inline (one red line) instead of raising into the notebook.
"""
from __future__ import annotations

import atexit
import html
import threading
import time
import weakref

import ipywidgets as W

from flytune_nb.backends import cannot_launch
from flytune_nb.analysis.estimate import duration, estimate, work_of
from flytune_nb.analysis.units import fmt_time
from flytune_nb.core.device import current_device
from flytune_nb.core.dtypes import DtypeError, canonical, parse_list
from flytune_nb.core.suggest import closest
from flytune_nb.core.registry import get_kernel, list_kernels
from flytune_nb.core.shapes import SGLANG_BATCH_SIZES, GridError, parse_grid, shape_text, split_known
from flytune_nb.core.events import ShapeDone, SweepDone, TrialDone, TrialFailed, TrialStarted
from flytune_nb.errors import UsageError

# The grid preview's size checks run on daemon threads; one still inside torch's C++ when the interpreter finalises
# aborts the process ("terminate called without an active exception", exit 134), e.g. a script or a kernel that
# ends right after a kernel switch. At exit they stop between shapes and are waited for: the first check's import
# of torch's symbolic machinery is the longest step, ~5 s on 2 cores.
_FITS_THREADS: weakref.WeakSet = weakref.WeakSet()
_EXITING = threading.Event()
EXIT_WAIT_S = 30.0


@atexit.register
def _finish_fits_checks() -> None:
    _EXITING.set()
    deadline = time.monotonic() + EXIT_WAIT_S
    for th in list(_FITS_THREADS):
        th.join(max(0.0, deadline - time.monotonic()))

PRESETS = {"custom": None, "SGLang batch sizes (1 ... 4096)": ",".join(map(str, SGLANG_BATCH_SIZES)),
           "decode (1, 2, 4, 8)": "1,2,4,8", "prefill (1024 ... 8192)": "1024,2048,4096,8192"}
STRATEGIES = ("exhaustive", "random", "halving", "surrogate")


def error_html(msg: str) -> str:
    return f"<span style='color:#b00020'>&#9888; {html.escape(msg)}</span>"


class KernelPicker(W.VBox):
    def __init__(self, kernel: str | None = None, paths=()) -> None:
        self.paths = list(paths)
        names = list_kernels(self.paths)
        close = closest(str(kernel), names) if kernel is not None else None
        shown = kernel if kernel in names else close or (names or [None])[0]
        self.dropdown = W.Dropdown(options=names, value=shown, description="kernel")
        self.info = W.HTML()
        self.warning = W.HTML()
        super().__init__([self.dropdown, self.info, self.warning])
        self.problem = ""  # a parameters-cell typo not yet answered: the workbench refuses to run until it is
        self.dropdown.observe(self._picked, "value")
        self.refresh()
        if kernel is not None and kernel not in names:  # a typo in the parameters cell: say so, never guess silently
            hint = f" Did you mean {close!r}?" if close else ""
            self.problem = (f"unknown kernel {kernel!r}.{hint} Fix it in the parameters cell, or pick a kernel from "
                            f"the list. Known: {', '.join(names)}")
            self.warning.value = error_html(self.problem)

    def _picked(self, _) -> None:
        self.problem, self.warning.value = "", ""  # the user chose from the list: the typo is answered
        self.refresh()

    @property
    def spec(self):
        return get_kernel(self.dropdown.value, self.paths)

    def refresh(self) -> None:
        try:
            s = self.spec
            example = s.example()
            n = len(s.configs(example, s.dtypes[0], current_device()))
            self.info.value = (f"<small>axes <b>{', '.join(s.axes)}</b> (batch: {s.batch_axis}); dtypes "
                               f"{', '.join(s.dtypes)}; {n} configs at "
                               f"{' '.join(f'{k}={v}' for k, v in example.items())}. "
                               f"{html.escape(s.description)}</small>")
            elsewhere = cannot_launch(s, current_device())  # a FlyDSL kernel off an AMD GPU: said before Run
            if elsewhere:
                self.info.value += "<br>" + error_html(elsewhere)
        except Exception as e:  # noqa: BLE001 - a broken plugin is shown, not raised
            self.info.value = error_html(str(e))


def quick_fits(spec, shape: dict, dtype: str, device) -> str:
    """A too-large shape, judged without torch's meta machinery (5 s to import on the 2-core box): 3x the kernel's
    traffic model against the memory there is. Catches the typos (M=100000000); the exact check on meta tensors
    follows in the background (GridEditor) and in the worker before anything is written."""
    from flytune_nb.measure.memory import host_memory

    if spec.bytes is None:
        return ""
    try:
        need = 3 * int(spec.bytes(shape, dtype))
    except Exception:  # noqa: BLE001 - a traffic model that cannot answer: the exact check decides
        return ""
    have = device.total_memory if device.is_gpu else host_memory()
    if have and need > have:
        return (f"{spec.name} {' '.join(f'{k}={v}' for k, v in shape.items())} {dtype} needs ~{need / 2**30:.1f} GiB;"
                f" {device.name} has {have / 2**30:.1f} GiB")
    return ""


class GridEditor(W.VBox):
    """Per-axis value lists (with presets for the batch axis) and dtypes; ``preview`` counts the work and estimates
    its time from what the store measured before."""

    def __init__(self, picker: KernelPicker, grid: dict | None = None, dtypes=("bf16",), store_getter=None,
                 budget: int | None = None) -> None:
        self.picker = picker
        self._budget = budget or 0
        self.store_getter = store_getter or (lambda: None)
        self.axis_boxes: dict[str, W.Text] = {}
        self.preset = W.Dropdown(options=list(PRESETS), value="custom", description="batch preset")
        self.dtypes = W.SelectMultiple(description="dtypes", rows=3)
        self.preview = W.HTML()
        self.rows = W.VBox()
        self._rebuilding = False
        self.on_change = None  # called after every preview: the workbench shows or hides its accept button
        self.on_edit = None  # called after the user edits the grid (an axis box, a preset, the dtypes)
        self.fits_problem = ""  # a shape too large for the device: Run refuses, as it refuses typos
        self.planned: list[int] = []  # trials per (dtype, shape) of the current grid, in the sweep's order
        self._fits_gen = 0
        self._estimate = None
        super().__init__([self.rows, W.HBox([self.preset, self.dtypes]), self.preview])
        self.preset.observe(self._apply_preset, "value")
        self.dtypes.observe(self._dtypes_changed, "value")
        picker.dropdown.observe(lambda _: self.rebuild(), "value")
        self.rebuild(grid or {}, dtypes)

    def rebuild(self, grid: dict | str | None = None, dtypes=None) -> None:
        spec = self.picker.spec
        # The core's own splitter (the papermill / CLI string form or a dict of lists): a malformed term or an axis
        # the kernel does not have is shown in the preview, never dropped silently; the well-formed axes are kept and
        # axes not given start at the example.
        grid, problems = split_known(grid or {}, spec.axes)  # the well-formed axes are kept
        self.grid_problem = problems[0] if problems else ""
        example = spec.example()
        self.axis_boxes = {a: W.Text(value=str(grid.get(a, "1,64" if a == spec.batch_axis else example[a])),
                                     description=a, continuous_update=False) for a in spec.axes}
        for box in self.axis_boxes.values():
            box.observe(self._axis_edited, "value")
        old = list(self.rows.children)
        self.rows.children = list(self.axis_boxes.values())
        for box in old:  # the previous kernel's axes: their front-end models are freed
            box.layout.close()
            box.style.close()
            box.close()
        self.dtypes.options = list(spec.dtypes)
        chosen, self.dtype_problem = [], ""
        try:
            wanted = [str(d) for d in (parse_list(dtypes) if dtypes else (self.dtypes.value or spec.dtypes[:1]))]
        except DtypeError as e:  # dtypes = 16: not a list of names at all; shown like a name's typo
            wanted, self.dtype_problem = [], str(e)
        for d in wanted:
            try:
                c = canonical(d)
            except DtypeError:  # name this kernel's dtypes, not every dtype flytune knows
                self.dtype_problem = f"unknown dtype {d!r}; {spec.name} supports {', '.join(spec.dtypes)}"
                continue
            if c in spec.dtypes:
                chosen.append(c)
            else:
                self.dtype_problem = f"{spec.name} does not support {c}; it supports {', '.join(spec.dtypes)}"
        self._rebuilding = True  # this assignment is not the user answering a parameters-cell problem
        try:
            self.dtypes.value = tuple(dict.fromkeys(chosen)) or tuple(spec.dtypes[:1])
        finally:
            self._rebuilding = False
        self._estimate = None  # another kernel: another history
        self.update_preview()

    def _axis_edited(self, _) -> None:
        self.grid_problem = ""  # the user edited the boxes: an earlier parameters-cell problem is answered
        self.update_preview()
        self._edited()

    def _edited(self) -> None:
        if self.on_edit is not None:
            self.on_edit()

    def problems(self) -> list[str]:
        """Parameters-cell mistakes the widgets replaced with a fallback and the user has not answered yet."""
        return [p for p in (self.grid_problem, self.dtype_problem) if p]

    def _dtypes_changed(self, _) -> None:
        if self._rebuilding:
            return  # rebuild() previews once when it is done
        self.dtype_problem = ""  # the user picked from the list: an earlier parameters-cell problem is answered
        self.update_preview()
        self._edited()

    def _apply_preset(self, change) -> None:
        values = PRESETS.get(change["new"])
        if values:
            self.axis_boxes[self.picker.spec.batch_axis].value = values

    def shapes(self) -> list[dict]:
        """The grid as shapes; raises GridError (or the kernel's shape rule broken, a UsageError) with a one-line
        reason, as the sweep would refuse it."""
        spec = self.picker.spec
        return [spec.check_shape(s) for s in parse_grid({a: b.value for a, b in self.axis_boxes.items()}, spec.axes,
                                                        batch_axis=spec.batch_axis)]

    def update_preview(self, budget: int | None = None) -> tuple[int, int] | None:
        if budget is not None:
            self._budget = budget
        try:
            return self._preview()
        finally:
            if self.on_change is not None:
                self.on_change()

    def forget_estimate(self) -> None:
        """After a sweep: the next preview estimates from the store's new measurements."""
        self._estimate = None

    def _preview(self) -> tuple[int, int] | None:
        self.fits_problem = ""
        # every preview supersedes the background work of the one before, an invalid grid's included: else the
        # previous grid's estimate, arriving late, redraws its counts over this grid's error
        self._fits_gen += 1
        try:
            shapes = self.shapes()
            if not self.dtypes.value:
                raise GridError("choose at least one dtype")
            spec, dev = self.picker.spec, current_device()
            for d in self.dtypes.value:
                for s in shapes:
                    problem = quick_fits(spec, s, d, dev)
                    if problem:
                        self.fits_problem = problem
                        raise UsageError(problem)
            budget = getattr(self, "_budget", None)
            self.planned = []
            for d in self.dtypes.value:  # the sweep's order: dtype-major
                for s in shapes:
                    n = len(set(spec.configs(s, d, dev)) | {spec.default(s, d, dev)})
                    self.planned.append(n if not budget else min(n, budget))
            n = sum(self.planned)
            # each shape's trials beside the shape: the estimate scales a trial's time with the shape's work
            plan = [(s, d, k) for (d, s), k in zip(((d, s) for d in self.dtypes.value for s in shapes), self.planned)]
            self._shown = (len(shapes), len(self.dtypes.value), n, budget, dev.name, plan)
            self._render()
            self._check_in_background(spec, shapes, list(self.dtypes.value), dev)
            return len(shapes), n
        except Exception as e:  # noqa: BLE001 - GridError, a dtype error, a shape too large, or a broken plugin
            self.planned = []
            self.preview.value = error_html(str(e))
            return None

    def _render(self) -> None:
        n_shapes, n_dtypes, n, budget, dev_name, plan = self._shown
        warn = "".join(error_html(p) + "<br>" for p in self.problems())
        when = (self._estimate.describe(plan) if self._estimate is not None
                else "estimating the time…")
        self.preview.value = warn + (
            f"<b>{n_shapes}</b> shape{'s' if n_shapes != 1 else ''} x <b>{n_dtypes}</b> "
            f"dtype{'s' if n_dtypes != 1 else ''} = <b>{n}</b> trial{'s' if n != 1 else ''} after pruning"
            f"{' and the budget' if budget else ''}; {when} on {dev_name} (less where the store has them already)")

    def _check_in_background(self, spec, shapes, dtypes, dev) -> None:
        """Off the cell: the time estimate (it reads the store, and pandas) and memory.check_fits on meta tensors
        (the kernel's real input sizes; its first call imports torch's symbolic machinery, ~5 s on 2 cores), which
        the Run button must not wait for. A shape found too large is shown and refused like a typo; a newer preview
        supersedes an older check (``_preview`` counted this one's generation)."""
        gen = self._fits_gen

        def work():
            from flytune_nb.measure.memory import ShapeTooLarge, check_fits

            if self._estimate is None:
                try:
                    self._estimate = estimate(self.store_getter(), spec.name, dev.name, dev.is_gpu,
                                              work=work_of(spec))
                except Exception:  # noqa: BLE001 - an estimate never fails the preview
                    self._estimate = None
                if gen == self._fits_gen and self._estimate is not None and not self.fits_problem:
                    self._render()
            for d in dtypes:
                for s in shapes:
                    if gen != self._fits_gen or _EXITING.is_set():
                        return
                    try:
                        check_fits(spec, s, d, dev)
                    except ShapeTooLarge as e:
                        if gen == self._fits_gen:
                            self.fits_problem = str(e)
                            self.preview.value = error_html(str(e))
                            if self.on_change is not None:
                                self.on_change()
                        return
                    except Exception:  # noqa: BLE001 - the worker checks again before anything is written
                        return

        self.fits_thread = threading.Thread(target=work, daemon=True, name="flytune-fits")
        _FITS_THREADS.add(self.fits_thread)
        self.fits_thread.start()


class SweepSettings(W.HBox):
    """Strategy, budget, per-trial timeout, GPU timing budget, GPUs, retry failed: the sweep's knobs, checked on Run."""

    def __init__(self, strategy: str = "exhaustive", budget: int | None = None, timeout: float = 120.0,
                 rep_ms: float | None = None, gpus=None, retry_failed: bool = False) -> None:
        narrow = W.Layout(width="190px")
        if isinstance(budget, str) and budget.strip().isdigit():  # papermill -r passes text
            budget = int(budget)
        close = closest(str(strategy), STRATEGIES)
        self.strategy = W.Dropdown(options=list(STRATEGIES), value=strategy if strategy in STRATEGIES else
                                   close or "exhaustive", description="strategy", layout=W.Layout(width="230px"))
        try:
            shown_budget = max(int(budget or 0), 0)
        except (TypeError, ValueError, OverflowError):  # 'ten', nan, inf: named below, the box shows the whole space
            shown_budget = 0
        self.budget = W.IntText(value=shown_budget, description="budget", layout=narrow,
                                tooltip="at most this many configs per shape; 0: the whole space")
        # A parameters-cell typo is shown with the widget's fallback in its place and Run refuses until it is
        # answered, as for a kernel typo: running exhaustive where surrogate was asked for is hours on a big space
        problems = []
        if strategy not in STRATEGIES:
            hint = f" Did you mean {close!r}?" if close else ""
            problems.append(f"unknown strategy {strategy!r}.{hint} Fix it in the parameters cell, or pick one from "
                            f"the list ({', '.join(STRATEGIES)})")
        if budget is not None and not (isinstance(budget, int) and budget >= 1):
            problems.append(f"budget {budget!r} is not a number of configs >= 1 (None: the whole space). Fix it in "
                            "the parameters cell, or set the budget box (0 there: the whole space)")
        try:
            shown_timeout = float(timeout)
        except (TypeError, ValueError):
            problems.append(f"timeout {timeout!r} is not a number of seconds. Fix it in the parameters cell, or set "
                            f"the timeout box")
            shown_timeout = 120.0
        self.problem = problems[0] if problems else ""
        self.warning = W.HTML(error_html(self.problem) if self.problem else "")
        self.timeout = W.FloatText(value=shown_timeout, description="timeout s", layout=narrow,
                                   tooltip="seconds one trial may take before its worker is killed (recorded as timeout)")
        self.rep_ms = W.FloatText(value=float(rep_ms or 100.0), description="timing ms", layout=narrow,
                                  tooltip="GPU timing budget per config (ms); the interpreter always times 3 reps")
        self.gpus = W.Text(value=",".join(map(str, gpus)) if gpus else "", description="GPUs", placeholder="0,1,2,3",
                           layout=W.Layout(width="200px"), tooltip="GPU indices, one worker each; empty: one worker")
        self.retry_failed = W.Checkbox(value=bool(retry_failed), description="retry failed", indent=False,
                                       layout=W.Layout(width="110px"),
                                       tooltip="measure again every stored trial that did not pass (any status)")
        super().__init__([self.strategy, self.budget, self.timeout, self.rep_ms, self.gpus, self.retry_failed,
                          self.warning], layout=W.Layout(flex_flow="row wrap"))
        for knob in (self.strategy, self.budget, self.timeout):
            knob.observe(self.answered, "value")

    def answered(self, _=None) -> None:
        """The user set a knob: the parameters cell's problem is answered."""
        self.problem, self.warning.value = "", ""

    def values(self) -> dict:
        """Sweep keyword arguments; UsageError with one line for a bad entry."""
        budget = self.budget.value
        if budget < 0:
            raise UsageError(f"budget must be >= 1 (or 0 for the whole space), got {budget}")
        if not self.timeout.value > 0:
            raise UsageError(f"timeout must be a number of seconds > 0, got {self.timeout.value:g}")
        if not self.rep_ms.value > 0:
            raise UsageError(f"timing budget must be > 0 ms, got {self.rep_ms.value:g}")
        try:
            gpus = [int(g) for g in self.gpus.value.split(",") if g.strip()] or None
        except ValueError:
            raise UsageError(f"GPUs must be comma-separated integers, got {self.gpus.value!r}") from None
        timer = None if self.rep_ms.value == 100.0 else {"rep_ms": float(self.rep_ms.value)}
        return {"strategy": self.strategy.value, "budget": budget or None, "timeout": float(self.timeout.value),
                "gpus": gpus, "retry_failed": self.retry_failed.value, "timer": timer}


class RunControl(W.VBox):
    """Run / Stop and progress over the whole sweep: shape i of n, config j of its total, the running config and how
    long it has run, best so far, trials done of all, and an ETA from this run's measured trial times (stored
    trials replayed on a resume count as done, not as instant measurements). Also a sweep listener."""

    TICK_S = 1.0  # how often the running config's elapsed time is refreshed

    def __init__(self) -> None:
        self.run_button = W.Button(description="Run", button_style="success", icon="play")
        self.stop_button = W.Button(description="Stop", button_style="danger", icon="stop", disabled=True)
        self.bar = W.IntProgress(value=0, min=0, max=1, description="idle", layout=W.Layout(width="60%"))
        self.label = W.HTML()
        super().__init__([W.HBox([self.run_button, self.stop_button, self.bar]), self.label])
        self.running = False
        self._marked = False  # the label is a finish line marked as the run before a refused Run's
        self._lock = threading.Lock()
        self._reset([])

    def _reset(self, planned) -> None:
        self.planned = list(planned)
        self.total = sum(self.planned)
        self.done = self.measured = self.failed = self.replayed = 0
        self.spent = 0.0  # seconds of measured trials (TrialStarted -> done)
        self.shapes_done = 0
        self.shape_index = 0
        self.cut = False  # the sweep ended before its plan: Stop, or a stopped shape
        self.in_flight: tuple | None = None  # the latest started: (label, config, i, n, monotonic start)
        # every trial started and not yet done, (label, config) -> monotonic start: a multi-GPU sweep has one per GPU,
        # and a trial Stop cuts off is started but never done (nor stored), so it is never counted as measured
        self._started: dict = {}
        self.best_text = "-"
        self._t0 = time.monotonic()

    def start(self, planned) -> None:
        """``planned``: trials per (dtype, shape) of the sweep (GridEditor.planned)."""
        with self._lock:
            self._reset(planned)
            self.running = True
        self.run_button.disabled, self.stop_button.disabled = True, False
        self.bar.value, self.bar.max, self.bar.description = 0, max(self.total, 1), "running"
        self.label.value = "<i>starting the workers…</i>"
        self._marked = False
        self._tick()

    def finish(self, message: str, failed: bool = False, stopped: bool = False) -> None:
        """``failed``: the sweep ended on an error (a shape it could not prepare), not on Stop: the bar, left at what
        it measured, says so rather than "stopped". ``stopped``: Stop ended it where no SweepDone tells (during its
        planning, before any trial)."""
        with self._lock:
            self.running = False
            self.in_flight = None
        self.run_button.disabled, self.stop_button.disabled = False, True
        self.bar.description = "failed" if failed else "stopped" if self.cut or stopped else "done"
        self.label.value = message
        self._marked = False

    def mark_previous(self) -> None:
        """A Run refused before it started: the finish line shown is the run before's, and says so (once)."""
        if self.running or not self.label.value or self._marked:
            return
        self._marked = True
        self.label.value = (f"<span style='color:#888'>the Run before this one: <span style='opacity:0.7'>"
                            f"{self.label.value}</span></span>")

    def eta_s(self) -> float | None:
        if not self.measured:
            return None
        return max(0, self.total - self.done) * self.spent / self.measured

    def _tick(self) -> None:
        if not self.running:
            return
        self._render()
        t = threading.Timer(self.TICK_S, self._tick)
        t.daemon = True
        t.start()

    def _render(self) -> None:
        with self._lock:
            flight, eta = self.in_flight, self.eta_s()
            parts = []
            if flight is not None:
                label, config, i, n, t0 = flight
                parts.append(f"<b>{html.escape(label)}</b> (shape {self.shape_index} of {len(self.planned) or '?'}): "
                             f"config {i + 1} of {n} <code>{html.escape(str(config))}</code> running "
                             f"{time.monotonic() - t0:.0f} s")
            parts.append(f"best so far {self.best_text}")
            parts.append(f"{self.done} of {self.total} trials" + (f" ({self.replayed} from the store)"
                                                                   if self.replayed else ""))
            if self.failed:
                parts.append(f"<span style='color:#b00020'>{self.failed} failed</span>")
            parts.append(f"elapsed {duration(time.monotonic() - self._t0)}")
            parts.append(f"ETA {duration(eta)}" if eta is not None else "ETA: after the first measured trial")
        if self.running:
            self.label.value = " &middot; ".join(parts)

    def __call__(self, event) -> None:
        with self._lock:
            if isinstance(event, TrialStarted):
                label = f"{shape_text(event.shape)} {event.dtype}"
                if event.index == 0 or self.in_flight is None or self.in_flight[0] != label:
                    self.shape_index = max(self.shape_index, self.shapes_done + 1)
                self.in_flight = (label, event.config, event.index, event.total, time.monotonic())
                self._started[(label, event.config)] = self.in_flight[4]
            elif isinstance(event, (TrialDone, TrialFailed)):
                t = event.trial
                started = self._started.pop((f"{shape_text(t.shape)} {t.dtype}", t.config), None)
                if started is not None:  # measured in this run; else replayed from the store
                    self.measured += 1
                    self.spent += time.monotonic() - started
                    if self.in_flight is not None and self.in_flight[1] == t.config:
                        self.in_flight = None
                else:
                    self.replayed += 1
                    if event.index == 0:
                        self.shape_index = self.shapes_done + 1
                self.done += 1
                self.failed += not t.ok
                if event.best is not None:
                    self.best_text = fmt_time(event.best.p50)
            elif isinstance(event, ShapeDone):
                self.shapes_done += 1
                # a budgeted or stopped shape has fewer trials than planned: the rest is not coming
                i = self.shapes_done - 1
                if i < len(self.planned):
                    self.total -= max(0, self.planned[i] - len(event.result.trials))
                    self.planned[i] = len(event.result.trials)
        if isinstance(event, (TrialDone, TrialFailed)):
            self.bar.max = max(self.total, 1)
            self.bar.value = min(self.done, self.bar.max)
            self._render()
        elif isinstance(event, SweepDone):
            # A finished sweep fills the bar (a budget or the selection may plan other counts than it measures); a
            # stopped one shows what it measured of the plan
            with self._lock:
                self.cut = self.shapes_done < len(self.planned) or any(r.stopped for r in event.results)
                total, done = max(self.total, 1), self.done
            self.bar.max = total
            self.bar.value = min(done, total) if self.cut else total


def run_in_thread(target, on_done) -> threading.Thread:
    """Run the sweep off the cell, so Stop (and the rest of the notebook) stays responsive."""
    def body():
        try:
            on_done(target(), None)
        except BaseException as e:  # noqa: BLE001 - shown inline by on_done
            on_done(None, e)
    th = threading.Thread(target=body, daemon=True, name="flytune-sweep")
    th.start()
    return th
