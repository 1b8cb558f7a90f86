"""Places for plotly figures that cost nothing until plotly is loaded.

The workbench paints its controls first and loads plotly in a thread after that (``load_plotly``): the Run button
must not wait for it. A ``FigureSlot`` shows a placeholder until then; ``show(figure)`` is remembered and drawn once
plotly is there.

A slot draws through an ``Output`` widget holding the figure as plotly's mimetype (what JupyterLab's plotly
extension renders, the same as ``fig.show()``), replaced whole on every ``show``: one synced value, which may be set
from the sweep's threads. Not a FigureWidget (plotly 6-7, an anywidget): its updates are transient messages that a
front-end model whose ~5 MB module has not loaded yet never applies, and on the loaded 2-core box figures created
off the cell stayed empty in Chromium, even in a fresh view of the same model; each FigureWidget also ships that
module. Clicks on points come back through ``PlotClicks``, a small anywidget that listens to the rendered plots'
``plotly_click``.
"""
from __future__ import annotations

import json
import threading
import uuid

import anywidget
import ipywidgets as W
import traitlets

_READY = threading.Event()
_LOAD_LOCK = threading.Lock()
_SLOTS: list = []
_LOAD_ERROR: list = []
PLOTLY_MIME = "application/vnd.plotly.v1+json"


def plotly_ready() -> bool:
    return _READY.is_set()


def load_plotly(background: bool = True, on_ready=None) -> None:
    """Import plotly (graph objects and plotly.io) and draw every slot waiting for it, then call ``on_ready()``; in a
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
                from flytune_nb.ui.notebook.plotly_import import graph_objects

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


class PlotClicks(anywidget.AnyWidget):
    """Reports a click on a point of the plots inside the element with CSS class ``target``: the point's customdata
    in ``clicked`` (``count`` counts clicks, so a second click on the same point is a change too)."""

    _esm = """
    export default {
      render({ model, el }) {
        let root = null, observer = null;
        const bind = () => {
          root.querySelectorAll('.js-plotly-plot').forEach((gd) => {
            if (gd._flytuneClicks || typeof gd.on !== 'function') return;
            gd._flytuneClicks = true;
            gd.on('plotly_click', (ev) => {
              const p = ev && ev.points && ev.points[0];
              if (!p || p.customdata === undefined || p.customdata === null) return;
              model.set('clicked', String(p.customdata));
              model.set('count', model.get('count') + 1);
              model.save_changes();
            });
          });
        };
        const find = () => {
          root = document.querySelector('.' + model.get('target'));
          if (!root) { setTimeout(find, 250); return; }
          observer = new MutationObserver(() => setTimeout(bind, 50));
          observer.observe(root, { childList: true, subtree: true });
          bind();
        };
        find();
        return () => observer && observer.disconnect();
      }
    };
    """
    target = traitlets.Unicode("").tag(sync=True)
    clicked = traitlets.Unicode("").tag(sync=True)
    count = traitlets.Int(0).tag(sync=True)


class FigureSlot(W.VBox):
    def __init__(self, height: int = 400, placeholder: str = "loading the plot…", clicks: bool = False) -> None:
        self.height = height
        self.css = f"flytune-slot-{uuid.uuid4().hex[:10]}"
        self.out = W.Output(layout=W.Layout(min_height=f"{height}px", width="100%"))
        self.out.add_class(self.css)
        self.out.outputs = (_text(f"<i style='color:#888'>{placeholder}</i>"),)
        self.clicks = PlotClicks(target=self.css, layout=W.Layout(display="none")) if clicks else None
        super().__init__([self.out] + ([self.clicks] if self.clicks is not None else []),
                         layout=W.Layout(width="100%"))
        self.figure = None  # the last go.Figure shown (tests and static exports read it)
        self.on_click = None  # fn(customdata): a click on a point (the overview opens that shape)
        self.draws = 0
        self._lock = threading.Lock()
        if self.clicks is not None:
            self.clicks.observe(self._clicked, "count")
        _SLOTS.append(self)
        if _READY.is_set():
            self._materialise()

    def _materialise(self) -> None:
        if _LOAD_ERROR:
            self.out.outputs = (_text(f"<i>plots unavailable: {_LOAD_ERROR[0]}</i>"),)
        elif self.figure is not None:
            self.show(self.figure)

    def show(self, figure) -> None:
        """Draw ``figure`` (a go.Figure) now, or as soon as plotly is loaded."""
        with self._lock:
            self.figure = figure
            if not _READY.is_set() or _LOAD_ERROR:
                return
            import plotly.io as pio

            spec = json.loads(pio.to_json(figure, validate=False))
            spec.setdefault("config", {}).update(displaylogo=False, responsive=True)
            title = (figure.layout.title.text or "plot").split("<br>")[0]
            self.out.outputs = ({"output_type": "display_data", "metadata": {},
                                 "data": {PLOTLY_MIME: spec, "text/plain": f"<figure: {title}>"}},)
            self.draws += 1

    def _clicked(self, change) -> None:
        if self.on_click is not None and self.clicks.clicked:
            self.on_click(self.clicks.clicked)

    def close(self) -> None:
        if self in _SLOTS:
            _SLOTS.remove(self)
        super().close()


def _text(html: str) -> dict:
    return {"output_type": "display_data", "metadata": {}, "data": {"text/html": html, "text/plain": ""}}
