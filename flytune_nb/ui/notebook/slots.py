"""Places for plotly figures that cost nothing until plotly is loaded.

The workbench paints its controls first and loads plotly in a thread after that (``load_plotly``): the Run button
must not wait for the FigureWidget chain. A ``FigureSlot`` holds a placeholder until then; ``show(figure)`` is
remembered and drawn once the widget exists.

Each slot's FigureWidget is built once with a fixed pool of traces of one type (scatter, heatmap, parcoords), and
``show`` restyles that pool in one batch from a plain ``go.Figure`` (figures.py): unused traces are hidden, axes the
new figure does not have are hidden. Adding or deleting traces on a displayed FigureWidget (plotly 6-7, anywidget)
was lost in the browser when its front-end module had not loaded yet (an empty plot stayed, seen in JupyterLab with
Chromium on the loaded 2-core box), while restyling traces that exist from the start is what the live plot has
always done reliably; one widget per slot also keeps the ~5 MB plotly.js module from being sent once per redraw.
"""
from __future__ import annotations

import threading

import ipywidgets as W

from flytune_nb._compat.plotly import sync_widget_state

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


AXIS_PREFIXES = ("xaxis", "yaxis")


class FigureSlot(W.Box):
    def __init__(self, height: int = 400, placeholder: str = "loading the plot…", kind: str = "scatter",
                 pool: int = 48) -> None:
        self.height, self.kind, self.pool = height, kind, pool
        self.placeholder = W.HTML(f"<i style='color:#888'>{placeholder}</i>")
        super().__init__([self.placeholder], layout=W.Layout(min_height=f"{height}px", width="100%"))
        self.widget = None
        self.figure = None  # the last go.Figure shown
        self.on_click = None  # fn(trace, points): a click on a point (the overview opens that shape)
        self.draws = 0
        self.shown = []  # the figure's traces drawn by the last show (tests read them: the pool holds hidden ones)
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

            trace = {"scatter": go.Scatter, "heatmap": go.Heatmap, "parcoords": go.Parcoords}[self.kind]
            self.widget = go.FigureWidget(data=[trace(visible=False) for _ in range(self.pool)],
                                          layout=dict(height=self.height, template="plotly_white"))
            self._bind_clicks()
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
            traces = [t for t in figure.data if t.type == self.widget.data[0].type][:self.pool]
            with w.batch_update():
                for i, trace in enumerate(w.data):
                    if i < len(traces):
                        props = traces[i].to_plotly_json()
                        props.pop("type", None)
                        props.pop("uid", None)
                        trace.update(visible=props.pop("visible", True), **props, overwrite=True)
                        for gone in set(trace.to_plotly_json()) - set(props) - {"type", "uid", "visible"}:
                            trace[gone] = None  # what the previous figure set and this one does not
                    elif trace.visible is not False:
                        trace.visible = False
                layout = figure.layout.to_plotly_json()
                stale = {k: {"visible": False} for k in w.layout.to_plotly_json()
                         if k.startswith(AXIS_PREFIXES) and k not in layout}
                w.update_layout(**layout, overwrite=True)
                if stale:
                    w.update_layout(**stale)
                if not layout.get("annotations"):
                    w.layout.annotations = ()
                if not layout.get("shapes"):
                    w.layout.shapes = ()
            sync_widget_state(w)  # a front-end model that loads late starts from this, not from an empty plot
            self.draws += 1
        self.shown = traces

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
