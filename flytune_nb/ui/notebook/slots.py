"""Places for plotly figures that cost nothing until plotly is loaded.

The workbench paints its controls first and loads plotly in a thread after that (``load_plotly``): the Run button
must not wait for the FigureWidget chain. A ``FigureSlot`` holds a placeholder until then; ``show(figure)`` is
remembered and drawn once the widget exists. Each ``show`` copies a plain ``go.Figure`` (from figures.py) into the
slot's FigureWidget in one batch: trace data updated in place when the traces are the same kinds and names (no
flicker while a sweep adds points), replaced otherwise.
"""
from __future__ import annotations

import threading

import ipywidgets as W

_READY = threading.Event()
_LOAD_LOCK = threading.Lock()
_SLOTS: "list" = []  # weak in effect: a closed slot removes itself
_LOAD_ERROR: list = []


def plotly_ready() -> bool:
    return _READY.is_set()


def load_plotly(background: bool = True, on_ready=None) -> None:
    """Import plotly (the FigureWidget chain) and fill every slot waiting for it, then call ``on_ready()``; in a
    thread by default."""
    def done():
        for slot in list(_SLOTS):
            slot._materialise()
        if on_ready is not None:
            on_ready()

    def work():
        with _LOAD_LOCK:
            if _READY.is_set():
                return
            try:
                from flytune_nb._compat.plotly import graph_objects

                graph_objects()
            except Exception as e:  # noqa: BLE001 - shown in every slot instead of a figure
                _LOAD_ERROR.append(e)
            _READY.set()
        done()

    if _READY.is_set():
        done()
        return
    if background:
        threading.Thread(target=work, daemon=True, name="flytune-plotly").start()
    else:
        work()


def wait_plotly(timeout: float | None = None) -> bool:
    return _READY.wait(timeout)


class FigureSlot(W.Box):
    def __init__(self, height: int = 400, placeholder: str = "loading the plot…") -> None:
        self.height = height
        self.placeholder = W.HTML(f"<i style='color:#888'>{placeholder}</i>")
        super().__init__([self.placeholder], layout=W.Layout(min_height=f"{height}px", width="100%"))
        self.widget = None
        self.figure = None  # the last go.Figure shown
        self.on_click = None  # fn(trace, points): a click on a point (the overview opens that shape)
        self.draws = 0
        self._lock = threading.Lock()
        _SLOTS.append(self)
        if _READY.is_set():
            self._materialise()

    def _materialise(self) -> None:
        with self._lock:
            if self.widget is not None or self not in _SLOTS:
                return
            if _LOAD_ERROR:
                self.placeholder.value = f"<i>plots unavailable: {_LOAD_ERROR[0]}</i>"
                return
            import plotly.graph_objects as go

            self.widget = go.FigureWidget(layout=dict(height=self.height, template="plotly_white"))
            pending = self.figure
        self.children = [self.widget]
        if pending is not None:
            self.show(pending)

    def show(self, figure) -> None:
        """Draw ``figure`` (a go.Figure) now, or as soon as plotly is loaded."""
        with self._lock:
            self.figure = figure
            w = self.widget
            if w is None:
                return
            with w.batch_update():
                same = len(w.data) == len(figure.data) and all(
                    a.type == b.type and a.name == b.name for a, b in zip(w.data, figure.data))
                if same:
                    for a, b in zip(w.data, figure.data):
                        a.update(b.to_plotly_json(), overwrite=True)
                else:
                    w.data = []
                    w.add_traces(list(figure.data))
                    self._bind_clicks()
                w.layout = figure.layout
            self.draws += 1

    def _bind_clicks(self) -> None:
        for trace in self.widget.data:
            if hasattr(trace, "on_click"):
                trace.on_click(self._clicked)

    def _clicked(self, trace, points, state) -> None:
        if self.on_click is not None and points.point_inds:
            self.on_click(trace, points)

    def close(self) -> None:
        if self in _SLOTS:
            _SLOTS.remove(self)
        if self.widget is not None:
            self.widget.close()
        self.placeholder.close()
        super().close()
