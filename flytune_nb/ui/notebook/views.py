"""Result views: the results table, heuristic-vs-best (table + speed-up heatmap + regret), the export panel."""
from __future__ import annotations

import difflib
import html
import math

import ipywidgets as W
import pandas as pd
import plotly.graph_objects as go

from flytune_nb.errors import UsageError
from flytune_nb.analysis.scores import regret, speedup_rows
from flytune_nb.artifacts.export import export, preview
from flytune_nb.ui.notebook.controls import error_html
from flytune_nb.ui.notebook.plot import speedup_heatmap


def trials_frame(results) -> pd.DataFrame:
    rows = []
    for r in results:
        for t in r.trials:
            rows.append({**t.shape, "dtype": t.dtype, "config": str(t.config), "status": t.status,
                         "p50_us": t.p50 * 1e3 if t.ok else math.nan, "p20_us": t.p20 * 1e3 if t.ok else math.nan,
                         "p80_us": t.p80 * 1e3 if t.ok else math.nan, "rel_error": t.rel_error,
                         "default": t.config == r.default, "reason": t.reason, "fidelity": t.fidelity})
    return pd.DataFrame(rows)


class ResultsTable(W.VBox):
    """Every trial, sortable; failures keep their reason."""

    def __init__(self) -> None:
        self.sort = W.Dropdown(options=["p50_us", "status", "config", "rel_error"], value="p50_us",
                               description="sort by")
        self.only_failed = W.Checkbox(description="failures only", value=False)
        self.html = W.HTML()
        self.frame = pd.DataFrame()
        super().__init__([W.HBox([self.sort, self.only_failed]), self.html])
        self.sort.observe(lambda _: self.render(), "value")
        self.only_failed.observe(lambda _: self.render(), "value")

    def update(self, results) -> None:
        self.frame = trials_frame(results)
        self.render()

    def render(self) -> None:
        df = self.frame
        if df.empty:
            self.html.value = "<i>no trials yet</i>"
            return
        if self.only_failed.value:
            df = df[df["status"] != "ok"]
        df = df.sort_values(self.sort.value, na_position="last")
        self.html.value = df.to_html(index=False, float_format=lambda v: f"{v:.3g}", max_rows=400, na_rep="-")


class CompareView(W.VBox):
    """Per shape: heuristic default vs searched best, torch baselines; heat map of the speed-up; regret."""

    def __init__(self) -> None:
        self.summary = W.HTML()
        self.table = W.HTML()
        # A FigureWidget updated in place: safe to update from the sweep thread (an Output widget's capture is not).
        self.heat = go.FigureWidget(layout=go.Layout(height=300, template="plotly_white",
                                                     title="speed-up of the searched best over the heuristic default"))
        super().__init__([self.summary, self.table, self.heat])

    def update(self, results) -> None:
        rows = speedup_rows(results)
        if not rows:
            self.summary.value = "<i>no finished shapes yet</i>"
            return
        df = pd.DataFrame(rows)
        failing = sum(math.isinf(r["default_ms"]) for r in rows)
        regret_ = regret(r["default_ms"] / r["best_ms"] for r in rows)
        worst = max((r for r in rows if math.isfinite(r["speedup"])), key=lambda r: r["speedup"], default=None)
        self.summary.value = (f"<b>heuristic regret</b> (geomean default / best over {len(rows)} shapes): "
                              + (f"<b>inf: the heuristic default fails on {failing} shape(s)</b>" if failing
                                 else f"<b>{regret_:.3f}x</b>") + (
                                  f"; worst at {html.escape(' '.join(f'{k}={worst[k]}' for k in results[0].shape))}"
                                  f" {worst['dtype']}: {worst['speedup']:.2f}x" if worst else ""))
        self.table.value = df.to_html(index=False, float_format=lambda v: f"{v:.4g}", na_rep="-")
        fig = speedup_heatmap(results)
        if fig is not None:
            src = fig.data[0]
            if not self.heat.data:  # added on first data: an empty heat map trace upsets plotly.js
                self.heat.add_heatmap(z=src.z, x=src.x, y=src.y, colorscale="Viridis",
                                      colorbar_title="default / best", texttemplate="%{z:.2f}x")
                return
            with self.heat.batch_update():
                self.heat.data[0].z, self.heat.data[0].x, self.heat.data[0].y = src.z, src.x, src.y


class ExportPanel(W.VBox):
    """Preview of the SGLang files an export would write, a diff against what is there, and a write button."""

    def __init__(self, store_getter, out_dir: str = "exports", kernel_getter=lambda: None, paths=()) -> None:
        self.store_getter, self.kernel_getter, self.paths = store_getter, kernel_getter, list(paths)
        self.out = W.Text(value=str(out_dir), description="export to")
        self.refresh_button = W.Button(description="Preview", icon="eye")
        self.write_button = W.Button(description="Write files", button_style="warning", icon="save")
        self.html = W.HTML()
        super().__init__([W.HBox([self.out, self.refresh_button, self.write_button]), self.html])
        self.refresh_button.on_click(lambda _: self.refresh())
        self.write_button.on_click(lambda _: self.write())

    def _target(self):
        """(store, export dir), or a ValueError saying what is missing: no sweep yet, or no folder to write to (an
        empty box would mean the notebook's own folder)."""
        store = self.store_getter()
        if store is None:
            raise UsageError("run a sweep first: there is nothing to export yet")
        if not self.out.value.strip():
            raise UsageError("choose a folder to export to")
        return store, self.out.value.strip()

    def refresh(self) -> list:
        if self.store_getter() is None:  # the normal state before the first run: a hint, not an error
            self.html.value = "<i>run a sweep first</i>"
            return []
        try:
            store, out = self._target()
            files = preview(store, out, kernel=self.kernel_getter(), paths=self.paths)
        except Exception as e:  # noqa: BLE001 - shown inline
            self.html.value = error_html(str(e))
            return []
        parts = []
        for path, new, old in files:
            if new == old:
                parts.append(f"<p><code>{html.escape(str(path))}</code>: unchanged</p>")
                continue
            diff = "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), "committed", "new"))
            parts.append(f"<p><code>{html.escape(str(path))}</code> ({'new file' if not old else 'changed'})</p>"
                         f"<pre style='font-size:11px'>{html.escape(diff)}</pre>")
        self.html.value = "".join(parts) or "<i>nothing to export (no passing trials)</i>"
        return files

    def write(self) -> None:
        try:
            store, out = self._target()
            written = export(store, out, kernel=self.kernel_getter(), paths=self.paths)
            self.html.value = "wrote:<br>" + "<br>".join(f"<code>{html.escape(str(p))}</code>" for p in written)
        except Exception as e:  # noqa: BLE001
            self.html.value = error_html(str(e))
