"""Result views: overview of all shapes, the config-space explorer of one shape, the results table,
heuristic-vs-best, two runs compared, and the export panel. Each computes its data with flytune_nb.analysis
(headless) and draws with figures.py into FigureSlots (which wait for plotly to load)."""
from __future__ import annotations

import base64
import difflib
import html
import math
import warnings
from pathlib import Path

import ipywidgets as W

from flytune_nb.analysis.explore import ORDER, RANK, heat_table, knob_influence, knobs, trials_frame
from flytune_nb.analysis.units import fmt_time, in_unit, unit_for
from flytune_nb.errors import UsageError
from flytune_nb.ui.notebook.controls import error_html
from flytune_nb.ui.notebook.slots import FigureSlot, plotly_ready
from flytune_nb.ui.notebook.styles import SCROLL, table_css

TABLE_CSS = table_css("flytune-table", "white-space:normal;word-break:break-word;max-width:520px;")


def _unconfirmed(row) -> str:
    """Under a shape's winning config: the search's fastest, where re-timing did not confirm its lead."""
    fastest = row.get("fastest") or ""
    return (f"<br><small>the search's fastest, <code>{html.escape(fastest)}</code>, lost its lead when re-timed"
            f"</small>" if fastest else "")


class OverviewView(W.VBox):
    """All shapes: best and default p50 against the batch axis per dtype (log axes), speed-up against it, regret per
    dtype over the complete shapes, and the winning config per shape. Clicking a shape calls ``on_open(label)``."""

    def __init__(self) -> None:
        self.summary = W.HTML("<i>no finished shapes yet</i>")
        self.slot = FigureSlot(620, clicks=True)
        self.slot.on_click = self._clicked
        self.table = W.HTML()
        self.on_open = None
        self.frame = None
        super().__init__([self.summary, self.slot, self.table])

    def update(self, results, batch_axis: str) -> None:
        from flytune_nb.analysis.overview import overview_frame, regret_by_dtype

        self.frame = df = overview_frame(results, batch_axis)
        if df.empty:
            self.summary.value = "<i>no finished shapes yet</i>"
            self.table.value = ""
            return
        parts = []
        for dtype, s in regret_by_dtype(df).items():
            r = s["regret"]
            text = ("-" if r != r else "<b style='color:#b00020'>inf: the default fails on a shape</b>"
                    if math.isinf(r) else f"<b>{r:.3f}x</b>")
            parts.append(f"{dtype}: heuristic regret {text} over {s['shapes']} shapes"
                         + (f", worst at {html.escape(s['worst'])}" if s["worst"] else "")
                         + (f" ({s['partial']} partial shapes left out)" if s["partial"] else ""))
        parts += _wide_bands(df)
        self.summary.value = "<br>".join(parts) + "<br><small>click a point to open that shape in the explorer</small>"
        rows = "".join(
            f"<tr{' class=failed' if not r['best'] else ''}><td>{html.escape(r['label'])}"
            f"{' <i>(partial)</i>' if r['partial'] else ''}</td><td><code>{html.escape(r['best'] or 'none passed')}"
            f"</code>{_unconfirmed(r)}{_band_mark(r)}</td><td>{fmt_time(r['best_ms'])}</td><td><code>{html.escape(r['default'])}</code></td>"
            f"<td>{fmt_time(r['default_ms']) if math.isfinite(r['default_ms']) else 'fails'}</td>"
            f"<td>{r['speedup']:.2f}x</td><td>{r['failed']} / {r['trials']}</td></tr>" for _, r in df.iterrows())
        self.table.value = (TABLE_CSS + f"<div style='{SCROLL}'><table class='flytune-table'><tr><th>shape</th>"
                            f"<th>winning config</th><th>best</th><th>heuristic default</th><th>default</th>"
                            f"<th>speed-up</th><th>failed</th></tr>{rows}</table></div>")
        if plotly_ready():
            from flytune_nb.ui.notebook.figures import overview_figure

            self.slot.show(overview_figure(df, batch_axis))

    def _clicked(self, label: str) -> None:
        if label and self.on_open is not None:
            self.on_open(label)


def _wide_bands(df) -> list[str]:
    """One warning line naming the shapes decided with a tie band past WIDE_BAND: their pick is the default (or a
    candidate) by a rule that could not tell a much faster config from a tie."""
    from flytune_nb.strategies.selection import WIDE_BAND, too_wide

    wide = [r for _, r in df.iterrows() if too_wide(r["band"])]
    if not wide:
        return []
    named = "; ".join(f"{html.escape(r['label'])}: band {r['band']:.0%}" + (
        f", the best candidate took {r['margin']:.1%} less time than the default" if r["margin"] > 0 else "")
        for r in wide[:5]) + (f"; {len(wide) - 5} more" if len(wide) > 5 else "")
    return [error_html(f"decided with a tie band over {WIDE_BAND:.0%}, too noisy to tell the configs apart: ")
            + named + " (re-run those shapes on a quieter machine before trusting or exporting their pick)"]


def _band_mark(r) -> str:
    from flytune_nb.strategies.selection import too_wide

    return f" <span style='color:#b00020'>&#9888; band {r['band']:.0%}</span>" if too_wide(r["band"]) else ""


class ExplorerView(W.VBox):
    """One shape's config space: x = a knob (or latency rank / order measured), colour = another, facet = a third;
    knobs -> latency as parallel coordinates; a knob x knob heat map of the best latency per cell. Follows the shape
    being measured until the user picks one. With census rows (the census tab's), the points can be coloured by a
    target's occupancy, spills or load width, and each point's hover says what its binary uses there."""

    def __init__(self, spec=None) -> None:
        self.spec = spec
        self.shape = W.Dropdown(description="shape", options=[], layout=W.Layout(width="300px"))
        self.x = W.Dropdown(description="x", options=[RANK, ORDER], value=RANK, layout=W.Layout(width="220px"))
        self.colour = W.Dropdown(description="colour", options=[("status", None)], layout=W.Layout(width="220px"))
        self.facet = W.Dropdown(description="facet", options=[("none", None)], layout=W.Layout(width="220px"))
        self.census = W.Dropdown(description="census", options=[("none", None)], layout=W.Layout(width="300px"),
                                 tooltip="a target's compile census: colour by its resources, show them on hover")
        self.census_rows: list = []
        self.metric = W.ToggleButtons(options=[("latency", "latency"), ("% of copy BW", "roofline")],
                                      value="latency", layout=W.Layout(width="auto"))
        self.influence = W.HTML()
        self.slot = FigureSlot(430)
        self.parallel = FigureSlot(360)
        self.heat_x = W.Dropdown(description="heat x", options=[], layout=W.Layout(width="220px"))
        self.heat_y = W.Dropdown(description="heat y", options=[], layout=W.Layout(width="220px"))
        self.heat = FigureSlot(320)
        self.selected: str | None = None
        self.pinned = False  # True once the user picks a shape; until then the view follows the running one
        self.source = None  # fn(label) -> SearchResult | None
        self._programmatic = False
        # The heat map's pair, once the user picks one: until then it follows the knobs that vary, which a live
        # shape's first trials do not show yet
        self._heat_chosen = False
        super().__init__([W.HBox([self.shape, self.x, self.colour, self.facet]), W.HBox([self.metric, self.census]),
                          self.influence, self.slot, self.parallel, W.HBox([self.heat_x, self.heat_y]), self.heat])
        self.shape.observe(self._picked, "value")
        for w in (self.heat_x, self.heat_y):
            w.observe(self._heat_picked, "value")
        for w in (self.x, self.colour, self.facet, self.metric, self.heat_x, self.heat_y, self.census):
            w.observe(lambda _: self.redraw(), "value")

    def set_census(self, rows) -> None:
        """The census rows of the kernel (every target's); the dropdown offers their targets, the GPU being swept
        first when it has rows."""
        from flytune_nb.analysis.resources import devices

        rows = list(rows)
        sign = [(r.device, str(r.config), r.status, r.binary) for r in rows]  # a re-census replaces rows in place
        changed = sign != getattr(self, "_census_sign", None)
        self.census_rows, self._census_sign = rows, sign
        names = devices(rows)
        opts = [("none", None)] + [(n, n) for n in names]
        if list(self.census.options) == opts:
            if changed and self.census.value is not None:
                self.redraw()
            return
        keep = self.census.value if self.census.value in names else None
        if keep is None and names:
            measured = self.frame()[1]
            here = set(measured["device"]) if measured is not None and "device" in measured else set()
            keep = next((n for n in names if n in here), names[0])
        self._programmatic = True
        try:
            self.census.options = opts
            self.census.value = keep
        finally:
            self._programmatic = False
        self.redraw()

    def set_shapes(self, labels) -> None:
        self._programmatic = True
        try:
            self.shape.options = list(labels)
            self.shape.value = self.selected if self.selected in labels else None
        finally:
            self._programmatic = False

    def add_shape(self, label: str) -> None:
        if label not in self.shape.options:
            self.set_shapes(list(self.shape.options) + [label])

    def _picked(self, change) -> None:
        if not self._programmatic and change["new"]:
            self.select(change["new"], pin=True)

    def _heat_picked(self, _) -> None:
        if not self._programmatic:
            self._heat_chosen = True

    def select(self, label: str, pin: bool = True) -> None:
        self.selected, self.pinned = label, pin
        if label not in self.shape.options:
            self.add_shape(label)
        self._programmatic = True
        try:
            self.shape.value = label
        finally:
            self._programmatic = False
        self.redraw()

    def follow(self, label: str | None) -> None:
        """A sweep event for ``label``: redraw if it is the shape shown, or show it if the user has not picked."""
        if label is not None and not self.pinned and label != self.selected:
            self.select(label, pin=False)
        elif label is None or label == self.selected:
            self.redraw()

    def clear(self) -> None:
        self.selected, self.pinned = None, False
        self._heat_chosen = False
        self.set_shapes([])
        self.influence.value = ""

    def _choices(self, frame) -> None:
        ks = knobs(frame)
        self._programmatic = True
        try:
            if list(self.x.options) != [RANK, ORDER] + ks:
                keep = self.x.value if self.x.value in ks else RANK
                self.x.options = [RANK, ORDER] + ks
                self.x.value = keep
            from flytune_nb.analysis.resources import COLOURS

            extra = [c for c in COLOURS if c in frame.columns]
            colour_opts = [("status", None)] + [(k, k) for k in ks + extra]
            if list(self.colour.options) != colour_opts:
                keep = self.colour.value if self.colour.value in ks + extra else (ks[0] if ks else None)
                self.colour.options = colour_opts
                self.colour.value = keep
            facet_opts = [("none", None)] + [(k, k) for k in ks]
            if list(self.facet.options) != facet_opts:
                keep = self.facet.value if self.facet.value in ks else None
                self.facet.options = facet_opts
                self.facet.value = keep
            # the heat map offers every knob; by default the two that vary (one that varies against a fixed one
            # when only one does: a knob against itself says nothing)
            every = ks + [k for k in knobs(frame, varying=False) if k not in ks]
            keep = self._heat_chosen and self.heat_x.value in every
            hx = self.heat_x.value if keep else (every[0] if every else None)
            hy = self.heat_y.value if keep and self.heat_y.value in every and self.heat_y.value != hx else next(
                (k for k in every if k != hx), hx)
            if list(self.heat_x.options) != every:
                self.heat_x.options, self.heat_y.options = every, every
            if (self.heat_x.value, self.heat_y.value) != (hx, hy):
                self.heat_x.value, self.heat_y.value = hx, hy
        finally:
            self._programmatic = False

    def frame(self):
        r = self.source(self.selected) if (self.source is not None and self.selected) else None
        if r is None:
            return None, None
        df = trials_frame([r])
        if self.spec is not None and self.spec.bytes is not None:
            from flytune_nb.measure.roofline import bandwidth_fraction

            df["bw"] = [bandwidth_fraction(self.spec, r.shape, r.dtype, v, r.device.name) if ok else None
                        for v, ok in zip(df["p50"], df["ok"])]
        if self.census.value is not None and self.census_rows:
            from flytune_nb.analysis.resources import annotate

            df = annotate(df, self.census_rows, self.census.value)
        return r, df

    def redraw(self) -> None:
        if self._programmatic:
            return
        r, df = self.frame()
        if df is None or df.empty:
            return
        self._choices(df)
        inf = knob_influence(df)
        percent = self.metric.value == "roofline" and "bw" in df and df["bw"].notna().any()
        no_ceiling = ""
        if self.metric.value == "roofline" and not percent:  # the toggle must not look as if it had switched
            no_ceiling = error_html(f"no measured copy bandwidth for {r.device.name} (or no traffic model for this "
                                    f"kernel): showing latency") + "<br>"
        self.influence.value = no_ceiling + (
            "<small>which knob matters (best p50 at its worst value / at its best value): "
            + ", ".join(f"<b>{html.escape(k)}</b> {v:.2f}x" for k, v in inf[:6]) + "</small>" if inf else "")
        if not plotly_ready():
            return
        from flytune_nb.ui.notebook.figures import explorer_figure, heat_figure, parallel_figure

        plot = df
        title = self.selected + (" (partial)" if r.stopped else "")
        if percent:
            plot = df.copy()  # y = % of copy bandwidth: higher is faster
            for c in ("p20", "p50", "p80"):
                plot[c] = [b * 100 if b is not None and b == b else math.nan for b in df["bw"]]
        self.slot.show(explorer_figure(plot, self.x.value, self.colour.value, self.facet.value,
                                       baselines=None if percent else r.baselines, title=title, percent=percent))
        if len(knobs(df)) >= 1:
            self.parallel.show(parallel_figure(df))
        if self.heat_x.value and self.heat_y.value:
            self.heat.show(heat_figure(heat_table(df, self.heat_x.value, self.heat_y.value)))


class ResultsTable(W.VBox):
    """Every trial: filter by shape and status, sort by any column either way, in a scroll area; reasons whole;
    CSV of what is shown (or of everything)."""

    MAX_ROWS = 500  # rendered; the CSV has them all

    def __init__(self, csv_path: str = "trials.csv") -> None:
        self.shape = W.Dropdown(description="shape", options=[("all shapes", None)], layout=W.Layout(width="300px"))
        self.status = W.Dropdown(description="status", options=["all", "passed", "failed"], value="all",
                                 layout=W.Layout(width="200px"))
        self.sort = W.Dropdown(options=["p50", "status", "config", "rel_error", "order"], value="p50",
                               description="sort by", layout=W.Layout(width="220px"))
        self.descending = W.ToggleButton(value=False, description="descending", icon="sort",
                                         layout=W.Layout(width="120px"))
        self.csv_button = W.Button(description="CSV", icon="download", tooltip="write and download the rows shown")
        self.csv_path = csv_path
        self.link = W.HTML()
        self.html = W.HTML()
        self.frame = None
        super().__init__([W.HBox([self.shape, self.status, self.sort, self.descending, self.csv_button]),
                          self.link, self.html])
        for w in (self.shape, self.status, self.sort, self.descending):
            w.observe(lambda _: self.render(), "value")
        self.csv_button.on_click(lambda _: self.write_csv())

    def update(self, results) -> None:
        self.frame = trials_frame(results)
        labels = list(dict.fromkeys(self.frame["shape_label"])) if len(self.frame) else []
        opts = [("all shapes", None)] + [(l, l) for l in labels]
        if list(self.shape.options) != opts:
            keep = self.shape.value if self.shape.value in labels else None
            self.shape.options = opts
            self.shape.value = keep
        self.render()

    def shown(self):
        df = self.frame
        if df is None or df.empty:
            return df
        if self.shape.value:
            df = df[df["shape_label"] == self.shape.value]
        if self.status.value == "passed":
            df = df[df["ok"]]
        elif self.status.value == "failed":
            df = df[~df["ok"]]
        return df.sort_values(self.sort.value, ascending=not self.descending.value, na_position="last",
                              kind="stable")

    def render(self) -> None:
        df = self.shown()
        if df is None or df.empty:
            self.html.value = "<i>no trials yet</i>" if self.frame is None or self.frame.empty else "<i>none shown</i>"
            return
        unit, per = unit_for(df["p50"])
        head = ["shape", "config", "status", f"p50 ({unit})", f"p20 ({unit})", f"p80 ({unit})", "rel error", "",
                "reason"]
        body = []
        for _, r in df.head(self.MAX_ROWS).iterrows():
            mark = ("default " if r["is_default"] else "") + ("best" if r["is_best"] else "")
            cells = [r["shape_label"] + (" (partial)" if r["partial"] else ""), r["config"], r["status"],
                     *(f"{in_unit(r[c], per):.4g}" if r["ok"] else "-" for c in ("p50", "p20", "p80")),
                     f"{r['rel_error']:.1e}" if r["rel_error"] == r["rel_error"] else "-", mark.strip(), r["reason"]]
            body.append(f"<tr{'' if r['ok'] else ' class=failed'}>"
                        + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
        more = (f"<small>showing {self.MAX_ROWS} of {len(df)} rows: filter, or take the CSV</small>"
                if len(df) > self.MAX_ROWS else f"<small>{len(df)} rows</small>")
        self.html.value = (TABLE_CSS + more + f"<div style='{SCROLL}'><table class='flytune-table'><tr>"
                           + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>" + "".join(body)
                           + "</table></div>")

    def csv_text(self) -> str:
        df = self.shown()
        if df is None or df.empty:
            return ""
        cols = [c for c in df.columns if c not in ("ok",)]
        return df[cols].to_csv(index=False)

    def write_csv(self) -> Path | None:
        text = self.csv_text()
        if not text:
            self.link.value = "<i>nothing to write</i>"
            return None
        path = Path(self.csv_path)
        try:
            path.write_text(text)
        except OSError as e:
            self.link.value = error_html(f"cannot write {path}: {e}")
            return None
        data = base64.b64encode(text.encode()).decode() if len(text) < 5 << 20 else ""
        self.link.value = (f"wrote <code>{html.escape(str(path.resolve()))}</code>"
                           + (f" &middot; <a download='{html.escape(path.name)}' href='data:text/csv;base64,{data}'>"
                              f"download</a>" if data else ""))
        return path


class CompareView(W.VBox):
    """Per shape: heuristic default vs searched best, torch baselines; heat map of the speed-up; regret over the
    complete shapes (a stopped shape is marked partial and left out)."""

    def __init__(self) -> None:
        self.summary = W.HTML("<i>no finished shapes yet</i>")
        self.table = W.HTML()
        self.heat = FigureSlot(300)
        super().__init__([self.summary, self.table, self.heat])

    def update(self, results) -> None:
        from flytune_nb.analysis.overview import overview_frame, worst_shape
        from flytune_nb.analysis.scores import regret

        if not results:
            self.summary.value = "<i>no finished shapes yet</i>"
            self.table.value = ""
            return
        df = overview_frame(results, next(iter(results[0].shape)))
        whole = df[~df["partial"] & df["best_ms"].notna() & df["default_ms"].notna()]
        failing = int(whole["default_ms"].map(math.isinf).sum())
        reg = regret(whole["speedup"]) if len(whole) else math.nan
        # a search's fastest that re-timing did not confirm is not the best: the shape's pick is (what exports ship)
        unconfirmed = int((df["fastest"] != "").sum()) if "fastest" in df else 0
        worst = worst_shape(whole)
        partial = int(df["partial"].sum())
        self.summary.value = (f"<b>heuristic regret</b> (geomean default / best over {len(whole)} shapes): "
                              + (f"<b>inf: the heuristic default fails on {failing} shape(s)</b>" if failing
                                 else f"<b>{reg:.3f}x</b>" if reg == reg else "-")
                              + (f"; worst at {html.escape(worst['label'])}: {worst['speedup']:.2f}x"
                                 if worst is not None and math.isfinite(worst["speedup"]) else "")
                              + (f"; {partial} partial shape(s) left out" if partial else "")
                              + (f"; on {unconfirmed} shape(s) the search's fastest lost its lead when re-timed "
                                 f"and the pick is another config" if unconfirmed else ""))
        base_cols = [c for c in df.columns if c.endswith("_ms") and c.startswith("torch")]
        named_cols = [c for c in df.columns if c.startswith("named:")]  # SGLang's shipped entry, ...
        head = (["shape", "default", "default p50"] + [f"{c[6:-3]} p50" for c in named_cols]
                + ["best", "best p50", "speed-up"] + [f"best vs {c[6:-3]}" for c in named_cols]
                + [c[:-3] for c in base_cols])
        rows = []
        for _, r in df.iterrows():
            named = [(r[c] if isinstance(r[c], float) else math.nan) for c in named_cols]
            cells = [r["label"] + (" (partial)" if r["partial"] else ""), r["default"],
                     fmt_time(r["default_ms"]) if math.isfinite(r["default_ms"]) else "fails"]
            cells += [fmt_time(v) if math.isfinite(v) else ("fails" if math.isinf(v) else "-") for v in named]
            cells += [r["best"] or "-", fmt_time(r["best_ms"]),
                      f"{r['speedup']:.2f}x" if math.isfinite(r["speedup"]) else "-"]
            cells += [f"{v / r['best_ms']:.2f}x" if math.isfinite(v) and r["best_ms"] == r["best_ms"] else "-"
                      for v in named]
            cells += [fmt_time(r[c]) for c in base_cols]
            rows.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
        self.table.value = (TABLE_CSS + f"<div style='{SCROLL}'><table class='flytune-table'><tr>"
                            + "".join(f"<th>{h}</th>" for h in head) + "</tr>" + "".join(rows) + "</table></div>")
        if plotly_ready():
            from flytune_nb.ui.notebook.figures import speedup_heatmap

            fig = speedup_heatmap(results)
            if fig is not None:
                self.heat.show(fig)


class RunsView(W.VBox):
    """Two runs side by side: store A and store B (B empty: the same store), each narrowed to one device /
    toolchain; per shape the speed-up of A's best over B's and whether the winning config changed."""

    def __init__(self, store_getter, kernel_getter) -> None:
        self.store_getter, self.kernel_getter = store_getter, kernel_getter
        self.db_a = W.Text(description="store A", placeholder="this workbench's store", layout=W.Layout(width="45%"))
        self.db_b = W.Text(description="store B", placeholder="empty: the same store", layout=W.Layout(width="45%"))
        self.side_a = W.Dropdown(description="A runs", options=[], layout=W.Layout(width="45%"))
        self.side_b = W.Dropdown(description="B runs", options=[], layout=W.Layout(width="45%"))
        self.load_button = W.Button(description="Load", icon="folder-open")
        self.compare_button = W.Button(description="Compare", icon="balance-scale")
        self.summary = W.HTML()
        self.table = W.HTML()
        self.slot = FigureSlot(380)
        self._frames = {}
        super().__init__([W.HBox([self.db_a, self.db_b]), W.HBox([self.side_a, self.side_b]),
                          W.HBox([self.load_button, self.compare_button]), self.summary, self.slot, self.table])
        self.load_button.on_click(lambda _: self.load())
        self.compare_button.on_click(lambda _: self.compare())

    def _frame(self, path: str):
        """(trials, selections) of the kernel in the store ``path`` names (empty: this workbench's)."""
        from flytune_nb.engine.store import Store

        if not path.strip():
            store = self.store_getter()
            if store is None:
                raise UsageError("sweep first, or name a store")
            return (store.on_search_clock(store.frame(self.kernel_getter())),
                    store.frame(self.kernel_getter(), table="selections"))
        store = Store(Path(path.strip()).expanduser(), readonly=True)
        try:
            return (store.on_search_clock(store.frame(self.kernel_getter())),
                    store.frame(self.kernel_getter(), table="selections"))
        finally:
            store.close()

    def load(self, keep_sides: bool = False) -> bool:
        """Read both stores as the boxes name them now; False (and the reason shown) when one cannot be read."""
        from flytune_nb.analysis.compare import sides

        try:
            self._frames = {"a": self._frame(self.db_a.value), "b": self._frame(self.db_b.value)}
        except Exception as e:  # noqa: BLE001 - a missing / foreign store: one line
            self._frames = {}  # what was read before is not what the boxes name now
            self.summary.value, self.table.value = error_html(str(e)), ""
            return False
        chosen = (self.side_a.value, self.side_b.value)
        a, b = sides(self._frames["a"][0]), sides(self._frames["b"][0])
        self.side_a.options, self.side_b.options = a, b
        if keep_sides and chosen[0] in a and chosen[1] in b:
            self.side_a.value, self.side_b.value = chosen
        else:
            if a:
                self.side_a.value = a[0]
            if b:
                self.side_b.value = b[-1] if len(b) > 1 and not self.db_b.value.strip() else b[0]
        self.summary.value = (f"A: {len(a)} device/toolchain group(s), B: {len(b)}; pick one each and Compare"
                              if a and b else "<i>no trials of this kernel in one of the stores</i>")
        return True

    def compare(self):
        from flytune_nb.analysis.compare import best_per_shape, compare

        # Read again on every Compare: a store named after the last Load, or trials a sweep added since, would
        # otherwise be compared as they were then, under the names the boxes show now.
        if not self.load(keep_sides=True):
            return None
        if self.side_a.value is None or self.side_b.value is None:
            self.table.value = ""
            return None
        (trials_a, picks_a), (trials_b, picks_b) = self._frames["a"], self._frames["b"]
        df = compare(best_per_shape(trials_a, self.side_a.value, selections=picks_a),
                     best_per_shape(trials_b, self.side_b.value, selections=picks_b))
        if df.empty:
            self.summary.value = "<i>no shape measured on both sides</i>"
            self.table.value = ""
            return df
        from flytune_nb.analysis.scores import geomean

        changed = int(df["changed"].sum())
        self.summary.value = (f"{len(df)} shapes on both sides: B is <b>{geomean(df['speedup']):.3f}x</b> A's speed "
                              f"(geomean of A best / B best); the winning config changed on <b>{changed}</b>")
        rows = "".join(
            f"<tr><td>{html.escape(' '.join(str(r[c]) for c in df.columns[:list(df.columns).index('kernel')]))} "
            f"{r['dtype']}</td><td>{fmt_time(r['a_ms'])}</td><td><code>{html.escape(r['a_config'])}</code></td>"
            f"<td>{fmt_time(r['b_ms'])}</td><td><code>{html.escape(r['b_config'])}</code></td>"
            f"<td>{r['speedup']:.2f}x</td><td>{'changed' if r['changed'] else ''}</td></tr>"
            for _, r in df.iterrows())
        self.table.value = (TABLE_CSS + f"<div style='{SCROLL}'><table class='flytune-table'><tr><th>shape</th>"
                            f"<th>A best</th><th>A config</th><th>B best</th><th>B config</th><th>A / B</th><th></th>"
                            f"</tr>{rows}</table></div>")
        if plotly_ready():
            from flytune_nb.ui.notebook.figures import compare_figure

            self.slot.show(compare_figure(df, self.side_a.value, self.side_b.value))
        return df


def _notices(caught) -> str:
    """What an export said beside its files (entries left out, stale sources), once each: a button's callback has no
    cell output a warning would reach."""
    said = dict.fromkeys(str(w.message) for w in caught)
    return "".join(f"<p style='color:#a15c00'>&#9888; {html.escape(m)}</p>" for m in said)


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
        """(store, export dir), or a UsageError saying what is missing: no sweep yet, or no folder to write to (an
        empty box would mean the notebook's own folder)."""
        store = self.store_getter()
        if store is None:
            raise UsageError("sweep first: there is nothing to export yet")
        if not self.out.value.strip():
            raise UsageError("choose a folder to export to")
        return store, str(Path(self.out.value.strip()).expanduser())  # a box is read as a shell would read it

    def refresh(self) -> list:
        from flytune_nb.artifacts.export import preview

        if self.store_getter() is None:  # the normal state before the first run: a hint, not an error
            self.html.value = "<i>sweep first</i>"
            return []
        try:
            store, out = self._target()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
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
                         f"<pre style='font-size:11px;max-height:300px;overflow:auto'>{html.escape(diff)}</pre>")
        self.html.value = _notices(caught) + ("".join(parts)
                                              or "<i>nothing to export (no finished shape with passing trials)</i>")
        return files

    def write(self) -> None:
        from flytune_nb.artifacts.export import export

        try:
            store, out = self._target()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                written = export(store, out, kernel=self.kernel_getter(), paths=self.paths)
            self.html.value = _notices(caught) + ("wrote:<br>" + "<br>".join(
                f"<code>{html.escape(str(p))}</code>" for p in written) if written else
                "<i>nothing written: no finished shape with passing trials to export</i>")
        except Exception as e:  # noqa: BLE001
            self.html.value = error_html(str(e))

    def clear(self) -> None:
        self.html.value = ""
