"""Input widgets: kernel picker, shape-grid editor with a live preview, Run / Stop with progress.

Each shows bad input inline (one red line) instead of raising into the notebook.
"""
from __future__ import annotations

import difflib
import html
import threading
import time

import ipywidgets as W

from flytune_nb.backends import cannot_launch
from flytune_nb.core.device import current_device
from flytune_nb.core.dtypes import DtypeError, canonical, parse_list
from flytune_nb.engine.events import ShapeDone, SweepDone, TrialDone, TrialFailed, TrialStarted
from flytune_nb.core.shapes import SGLANG_BATCH_SIZES, GridError, parse_grid, split_known
from flytune_nb.measure.memory import check_fits
from flytune_nb.core.registry import get_kernel, list_kernels

PRESETS = {"custom": None, "SGLang batch sizes (1 ... 4096)": ",".join(map(str, SGLANG_BATCH_SIZES)),
           "decode (1, 2, 4, 8)": "1,2,4,8", "prefill (1024 ... 8192)": "1024,2048,4096,8192"}


def error_html(msg: str) -> str:
    return f"<span style='color:#b00020'>&#9888; {html.escape(msg)}</span>"


class KernelPicker(W.VBox):
    def __init__(self, kernel: str | None = None, paths=()) -> None:
        self.paths = list(paths)
        names = list_kernels(self.paths)
        close = difflib.get_close_matches(str(kernel), names, n=1) if kernel is not None else []
        shown = kernel if kernel in names else (close or names or [None])[0]
        self.dropdown = W.Dropdown(options=names, value=shown, description="kernel")
        self.info = W.HTML()
        self.warning = W.HTML()
        super().__init__([self.dropdown, self.info, self.warning])
        self.problem = ""  # a parameters-cell typo not yet answered: the workbench refuses to run until it is
        self.dropdown.observe(self._picked, "value")
        self.refresh()
        if kernel is not None and kernel not in names:  # a typo in the parameters cell: say so, never guess silently
            hint = f" Did you mean {close[0]!r}?" if close else ""
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


class GridEditor(W.VBox):
    """Per-axis value lists (with presets for the batch axis) and dtypes; ``preview`` counts the work."""

    def __init__(self, picker: KernelPicker, grid: dict | None = None, dtypes=("bf16",)) -> None:
        self.picker = picker
        self.axis_boxes: dict[str, W.Text] = {}
        self.preset = W.Dropdown(options=list(PRESETS), value="custom", description="batch preset")
        self.dtypes = W.SelectMultiple(description="dtypes", rows=3)
        self.preview = W.HTML()
        self.rows = W.VBox()
        self._rebuilding = False
        self.on_change = None  # called after every preview: the workbench shows or hides its accept button
        super().__init__([self.rows, self.preset, self.dtypes, self.preview])
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
        self.rows.children = list(self.axis_boxes.values())
        self.dtypes.options = list(spec.dtypes)
        wanted = [str(d) for d in (parse_list(dtypes) if dtypes else (self.dtypes.value or spec.dtypes[:1]))]

        chosen, self.dtype_problem = [], ""
        for d in wanted:
            try:
                c = canonical(d)
            except DtypeError as e:
                self.dtype_problem = str(e)
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
        self.update_preview()

    def _axis_edited(self, _) -> None:
        self.grid_problem = ""  # the user edited the boxes: an earlier parameters-cell problem is answered
        self.update_preview()

    def problems(self) -> list[str]:
        """Parameters-cell mistakes the widgets replaced with a fallback and the user has not answered yet."""
        return [p for p in (self.grid_problem, self.dtype_problem) if p]

    def _dtypes_changed(self, _) -> None:
        if self._rebuilding:
            return  # rebuild() previews once when it is done
        self.dtype_problem = ""  # the user picked from the list: an earlier parameters-cell problem is answered
        self.update_preview()

    def _apply_preset(self, change) -> None:
        values = PRESETS.get(change["new"])
        if values:
            self.axis_boxes[self.picker.spec.batch_axis].value = values

    def shapes(self) -> list[dict]:
        """The grid as shapes; raises GridError with a one-line reason."""
        return parse_grid({a: b.value for a, b in self.axis_boxes.items()}, self.picker.spec.axes)

    def update_preview(self) -> tuple[int, int] | None:
        try:
            return self._preview()
        finally:
            if self.on_change is not None:
                self.on_change()

    def _preview(self) -> tuple[int, int] | None:
        try:
            shapes = self.shapes()
            if not self.dtypes.value:
                raise GridError("choose at least one dtype")
            spec, dev = self.picker.spec, current_device()
            for s in shapes:  # too large for this device: one line now, not a failed worker later
                for d in self.dtypes.value:
                    check_fits(spec, s, d, dev)
            n = sum(len(set(spec.configs(s, d, dev)) | {spec.default(s, d, dev)}) for s in shapes
                    for d in self.dtypes.value)
            per_trial = 0.2 if dev.is_gpu else 0.05  # s: ~125 ms of timing on a GPU; interpreter at small shapes
            warn = "".join(error_html(p) + "<br>" for p in self.problems())
            self.preview.value = warn + (f"<b>{len(shapes)}</b> shapes x <b>{len(self.dtypes.value)}</b> dtypes = "
                                  f"<b>{n}</b> trials after pruning, roughly {max(1, round(n * per_trial))} s "
                                  f"on {dev.name}, plus compile time on a GPU (less when the store already has "
                                  f"some; fewer trials with a budget)")
            return len(shapes), n
        except Exception as e:  # noqa: BLE001 - GridError, a dtype error, or a broken plugin
            self.preview.value = error_html(str(e))
            return None


class RunControl(W.VBox):
    """Run / Stop and progress: "i of N, current config, its median, best so far, ETA". Also a sweep listener."""

    def __init__(self) -> None:
        self.run_button = W.Button(description="Run", button_style="success", icon="play")
        self.stop_button = W.Button(description="Stop", button_style="danger", icon="stop", disabled=True)
        self.bar = W.IntProgress(value=0, min=0, max=1, description="idle")
        self.label = W.HTML()
        super().__init__([W.HBox([self.run_button, self.stop_button]), self.bar, self.label])
        self.done = 0
        self._t0 = time.monotonic()

    def start(self, total_shapes: int) -> None:
        self.done, self._t0 = 0, time.monotonic()
        self.run_button.disabled, self.stop_button.disabled = True, False
        self.bar.value, self.bar.max, self.bar.description = 0, 1, "running"
        self.total_shapes, self.shapes_done = total_shapes, 0

    def finish(self, message: str) -> None:
        self.run_button.disabled, self.stop_button.disabled = False, True
        self.bar.description = "done"
        self.label.value = message

    def __call__(self, event) -> None:
        if isinstance(event, TrialStarted):
            self.bar.max = max(event.total, 1)
        elif isinstance(event, (TrialDone, TrialFailed)):
            t = event.trial
            self.bar.value = min(event.index + 1, self.bar.max)
            self.done += 1
            rate = (time.monotonic() - self._t0) / self.done
            left = (self.bar.max - self.bar.value) + (self.total_shapes - self.shapes_done - 1) * self.bar.max
            now = f"{t.p50 * 1e3:.2f} us" if t.ok else t.status
            best = f"{event.best.p50 * 1e3:.2f} us" if event.best is not None else "-"
            shape = " ".join(f"{k}={v}" for k, v in t.shape.items())
            self.label.value = (f"{shape} {t.dtype}: {event.index + 1} of {event.total} &middot; "
                                f"<code>{html.escape(str(t.config))}</code> {now} &middot; best so far {best} "
                                f"&middot; ETA {max(0, left) * rate:.0f} s")
        elif isinstance(event, ShapeDone):
            self.shapes_done += 1
        elif isinstance(event, SweepDone):
            self.bar.value = self.bar.max


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
