"""Plots: a live FigureWidget fed by sweep events (batched), and static figures for papermill reports.

The live plot shows, for the selected shape, every config's p50 in the order measured: colour by status, the
heuristic default and the best marked, torch eager / torch.compile as horizontal lines, % of measured copy bandwidth
on hover. Updates are batched: events are buffered and drawn at most every ``interval`` seconds (default 0.25 s, so
the plot lags < 1 s and redraws cost little next to the trials).
"""
from __future__ import annotations

import math
import threading
import time

import plotly.graph_objects as go

from flytune_nb.engine.events import ShapeDone, SweepDone, TrialDone, TrialFailed
from flytune_nb.measure.roofline import bandwidth_fraction

COLOURS = {"ok": "#2a9d8f", "wrong": "#e76f51", "failed": "#9d0208"}


def _shape_label(shape: dict, dtype: str) -> str:
    return " ".join(f"{k}={v}" for k, v in shape.items()) + f" {dtype}"


def _points(trials, spec, shape, dtype, device_name):
    """x, y (us), status class, hover text for a list of trials. Failed ones sit at the top edge, y = None."""
    rows = []
    for i, t in enumerate(trials):
        cls = "ok" if t.ok else ("wrong" if t.status == "wrong" else "failed")
        us = t.p50 * 1e3 if t.ok else None
        frac = bandwidth_fraction(spec, shape, dtype, t.p50, device_name) if (spec is not None and t.ok) else None
        hover = f"{t.config}<br>{t.status}" + (f" {us:.2f} us" if us is not None else f": {t.reason[:80]}")
        if frac is not None:
            hover += f"<br>{frac:.0%} of copy bandwidth"
        rows.append((i, us, cls, hover, t, frac))
    return rows


class LivePlot:
    """A sweep listener that draws into ``self.fig`` (a plotly FigureWidget)."""

    def __init__(self, spec=None, interval: float = 0.25) -> None:
        self.spec, self.interval = spec, interval
        self.fig = go.FigureWidget(layout=go.Layout(
            height=400, margin=dict(l=60, r=20, t=80, b=40), xaxis_title="config (order measured)",
            yaxis_title="p50 (us)", legend=dict(orientation="h", y=1.0, yanchor="bottom", x=1, xanchor="right"),
            title=dict(y=0.97, x=0.01, xanchor="left"), template="plotly_white"))
        for name, colour, symbol in (("ok", COLOURS["ok"], "circle"), ("wrong", COLOURS["wrong"], "x"),
                                     ("failed", COLOURS["failed"], "x-thin")):
            self.fig.add_scatter(x=[], y=[], mode="markers", name=name, marker=dict(color=colour, symbol=symbol,
                                                                                     size=8), hoverinfo="text")
        self.fig.add_scatter(x=[], y=[], mode="markers", name="heuristic default", hoverinfo="text",
                             marker=dict(symbol="star", size=16, color="#264653", line=dict(width=1, color="white")))
        self.fig.add_scatter(x=[], y=[], mode="markers", name="best", hoverinfo="text",
                             marker=dict(symbol="diamond-open", size=18, color="#f4a261", line=dict(width=3)))
        self.metric = "latency"  # or "roofline": y = % of the device's measured copy bandwidth (where known)
        self.shapes: dict[str, dict] = {}  # label -> {"shape", "dtype", "trials", "default", "baselines", "device"}
        self.selected: str | None = None
        self.pinned = False  # True once the user picks a shape; until then the plot follows the running one
        self.on_new_shape = None  # callback(label) when a shape first appears (the workbench fills its dropdown)
        self.redraws = 0
        self._dirty = False
        self._last = 0.0
        self._lock = threading.Lock()  # the data
        self._draw = threading.Lock()  # one redraw at a time, so an older snapshot never lands last
        self._timer: threading.Timer | None = None

    # -- listener ------------------------------------------------------------------------------------------------
    def __call__(self, event) -> None:
        if isinstance(event, (TrialDone, TrialFailed)):
            t = event.trial
            label = _shape_label(t.shape, t.dtype)
            with self._lock:
                new = label not in self.shapes
                entry = self.shapes.setdefault(label, {
                    "shape": t.shape, "dtype": t.dtype, "trials": [], "default": None, "baselines": {},
                    "device": t.device})
                if entry["default"] is None and event.index == 0:
                    entry["default"] = t.config  # the engine measures the heuristic default first
                entry["trials"].append(t)
                if not self.pinned:
                    self.selected = label  # follow the shape being measured
                self._dirty = True
            if new and self.on_new_shape is not None:
                self.on_new_shape(label)
            if time.monotonic() - self._last >= self.interval:
                self.flush()
            else:
                self._schedule()
        elif isinstance(event, ShapeDone):
            r = event.result
            with self._lock:
                entry = self.shapes.setdefault(_shape_label(r.shape, r.dtype), {
                    "shape": r.shape, "dtype": r.dtype, "trials": list(r.trials), "default": r.default,
                    "baselines": {}, "device": r.device.name})
                entry["default"], entry["baselines"] = r.default, dict(r.baselines)
                self._dirty = True
            self.flush()
        elif isinstance(event, SweepDone):
            self.flush()

    def set_metric(self, metric: str) -> None:
        """"latency" (p50 in us) or "roofline" (% of measured copy bandwidth; falls back to latency when the device
        has no measured ceiling or the kernel no byte count)."""
        if metric not in ("latency", "roofline"):
            raise ValueError(f"metric is latency or roofline, got {metric!r}")
        self.metric = metric
        self._dirty = True
        self.flush()

    def select(self, label: str, pin: bool = True) -> None:
        self.selected, self.pinned = label, pin
        self._dirty = True
        self.flush()

    def _schedule(self) -> None:
        """Buffered points are drawn at most ``interval`` later even if no further event arrives."""
        if self._timer is None or not self._timer.is_alive():
            self._timer = threading.Timer(self.interval, self.flush)
            self._timer.daemon = True
            self._timer.start()

    # -- drawing -------------------------------------------------------------------------------------------------
    def flush(self) -> None:
        with self._draw:
            self._flush()

    def _flush(self) -> None:
        with self._lock:
            if not self._dirty or self.selected not in self.shapes:
                return
            entry = self.shapes[self.selected]
            trials = list(entry["trials"])
            self._dirty = False
        pts = _points(trials, self.spec, entry["shape"], entry["dtype"], entry["device"])
        roofline = self.metric == "roofline" and any(p[5] is not None for p in pts)
        if roofline:  # y = % of copy bandwidth; higher is better
            pts = [(p[0], p[5] * 100 if p[5] is not None else None, p[2], p[3], p[4], p[5]) for p in pts]
        ok_y = [p[1] for p in pts if p[1] is not None]
        top = max(ok_y) * 1.1 if ok_y else 1.0
        best = (max if roofline else min)((p for p in pts if p[1] is not None), key=lambda p: p[1], default=None)
        dflt = next((p for p in pts if p[4].config == entry["default"]), None)
        with self.fig.batch_update():
            for trace, cls in zip(self.fig.data[:3], ("ok", "wrong", "failed")):
                sel = [p for p in pts if p[2] == cls]
                trace.x = [p[0] for p in sel]
                trace.y = [p[1] if p[1] is not None else top for p in sel]
                trace.hovertext = [p[3] for p in sel]
            for trace, p in ((self.fig.data[3], dflt), (self.fig.data[4], best)):
                trace.x = [p[0]] if p and p[1] is not None else []
                trace.y = [p[1]] if p and p[1] is not None else []
                trace.hovertext = [p[3]] if p else []
            self.fig.layout.yaxis.title = "% of measured copy bandwidth" if roofline else "p50 (us)"
            lines = []
            for name, b in entry["baselines"].items():
                if b.get("status") == "ok" and math.isfinite(b.get("p50", math.inf)):
                    y = b["p50"] * 1e3
                    if roofline:
                        frac = bandwidth_fraction(self.spec, entry["shape"], entry["dtype"], b["p50"],
                                                  entry["device"])
                        if frac is None:
                            continue
                        y = frac * 100
                    lines.append(dict(type="line", xref="paper", x0=0, x1=1, y0=y, y1=y,
                                      line=dict(dash="dash", color="#6c757d" if name == "torch_eager" else "#7209b7")))
            self.fig.layout.shapes = lines
            note = (" (no measured bandwidth ceiling for this device: showing latency)"
                    if self.metric == "roofline" and not roofline else "")
            self.fig.layout.title = f"{self.selected}: {len(pts)} configs" + (
                "" if not best else f", best {best[1]:.0f}% of copy BW" if roofline else f", best {best[1]:.2f} us"
            ) + note
        self._last = time.monotonic()
        self.redraws += 1


def static_figures(results, spec=None) -> list[go.Figure]:
    """Plain figures (no widget state) for a finished sweep: per-shape latency scatter + speed-up heatmap."""
    figs = []
    for r in results:
        pts = _points(r.trials, spec, r.shape, r.dtype, r.device.name)
        fig = go.Figure(layout=go.Layout(title=f"{r.kernel} {_shape_label(r.shape, r.dtype)}", height=320,
                                         xaxis_title="config", yaxis_title="p50 (us)", template="plotly_white"))
        for cls in ("ok", "wrong", "failed"):
            sel = [p for p in pts if p[2] == cls and p[1] is not None]
            if sel:
                fig.add_scatter(x=[p[0] for p in sel], y=[p[1] for p in sel], mode="markers", name=cls,
                                hovertext=[p[3] for p in sel], marker=dict(color=COLOURS[cls]))
        if r.default_trial is not None and r.default_trial.ok:
            fig.add_hline(y=r.default_trial.p50 * 1e3, line_dash="dot", annotation_text="heuristic default")
        for name, b in r.baselines.items():
            if b.get("status") == "ok":
                fig.add_hline(y=b["p50"] * 1e3, line_dash="dash", annotation_text=name)
        figs.append(fig)
    heat = speedup_heatmap(results)
    if heat is not None:
        figs.append(heat)
    return figs


def speedup_heatmap(results) -> go.Figure | None:
    """default / best over the grid: rows = batch size, columns = the other axes (and dtype)."""
    if not results:
        return None
    batch = next(iter(results[0].shape))
    cols = sorted({" ".join(f"{k}={v}" for k, v in r.shape.items() if k != batch) + f" {r.dtype}" for r in results})
    rows = sorted({r.shape[batch] for r in results})
    z = [[None] * len(cols) for _ in rows]
    for r in results:
        c = cols.index(" ".join(f"{k}={v}" for k, v in r.shape.items() if k != batch) + f" {r.dtype}")
        z[rows.index(r.shape[batch])][c] = r.speedup if math.isfinite(r.speedup) else None
    fig = go.Figure(go.Heatmap(z=z, x=cols, y=[f"{batch}={m}" for m in rows], colorscale="Viridis",
                               colorbar_title="default / best", texttemplate="%{z:.2f}x"))
    fig.update_layout(title="speed-up of the searched best over the heuristic default", height=300,
                      template="plotly_white")
    return fig
