"""Plotly figures for the workbench and the static reports: pure functions from the analysis frames to a
``go.Figure`` (the live views copy them into FigureWidgets; papermill shows them as they are, with a PNG beside).

Conventions kept by every figure: latencies in one unit per figure chosen from the data (analysis.units, written
"µs"); failed configs drawn as large red crosses in a band above the passing ones, never hidden; the heuristic
default a star, the best a ring; torch baselines as labelled dashed lines; ordered axes in numeric order.
"""
from __future__ import annotations

import html
import math

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from flytune_nb.analysis.explore import ORDER, RANK, axis_values, knobs
from flytune_nb.analysis.units import fmt_time, in_unit, unit_for
from flytune_nb.core.shapes import shape_text

OK = "#2a9d8f"
WRONG = "#f77f00"
FAILED = "#d00000"
DEFAULT = "#264653"
BEST = "#e9c46a"
PALETTE = ("#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f", "#ff7f0e",
           "#393b79", "#637939", "#843c39")
BASELINE_STYLE = {"torch_eager": ("torch eager", "#6c757d"), "torch_compile": ("torch.compile", "#7209b7")}
MAX_FACETS = 6  # more columns than this are unreadable at notebook width: the rest are dropped, and the title says so


def _template(fig: go.Figure, height: int) -> go.Figure:
    fig.update_layout(template="plotly_white", height=height, margin=dict(l=70, r=20, t=70, b=50),
                      legend=dict(orientation="h", y=1.02, yanchor="bottom", x=1, xanchor="right"),
                      hoverlabel=dict(align="left"))
    return fig


def _hover(row, unit, per, spec=None) -> str:
    parts = [f"<b>{html.escape(row['config'])}</b>", f"status: {row['status']}"]
    if row["ok"] and unit != "%":  # a percentage of copy bandwidth is said by the bw line below
        parts.append(f"p50 {in_unit(row['p50'], per):.4g} {unit} (p20 {in_unit(row['p20'], per):.4g}, "
                     f"p80 {in_unit(row['p80'], per):.4g})")
    if isinstance(row.get("rel_error"), float) and math.isfinite(row["rel_error"]):
        parts.append(f"rel error {row['rel_error']:.1e}")
    if row.get("reason"):
        reason = row["reason"]
        parts.append("reason: " + "<br>".join(html.escape(reason[i:i + 90]) for i in range(0, min(len(reason), 450), 90)))
    if row.get("bw") is not None and isinstance(row.get("bw"), float) and math.isfinite(row["bw"]):
        parts.append(f"{row['bw'] * 100:.3g}% of copy bandwidth")  # a decode shape's 0.04% is not "0%"
    if row.get("census"):  # a compile census of this config (flytune_nb.analysis.resources.annotate)
        text = row["census"]
        parts.append("<br>".join(html.escape(text[i:i + 90]) for i in range(0, min(len(text), 360), 90)))
    if row.get("is_default"):
        parts.append("<i>heuristic default</i>")
    if row.get("is_best"):
        parts.append("<i>best</i>")
    return "<br>".join(parts)


def _positions(part, x: str) -> list[float]:
    """x positions: a knob's values as evenly spaced categories in numeric order, the configs sharing a value
    spread across the category by latency (so overlapping points stay visible); or the rank / order itself."""
    if x == RANK:
        return [float(v) if v == v else math.nan for v in part["rank"]]
    if x == ORDER:
        return [float(v) for v in part["order"]]
    values = axis_values(part[x])
    index = {v: i for i, v in enumerate(values)}
    pos = []
    groups = part.groupby(x)
    spread = {}
    for v, g in groups:
        order = g["p50"].fillna(math.inf).rank(method="first")
        n = len(g)
        for i, r in zip(g.index, order):
            spread[i] = (r - (n + 1) / 2) / max(n, 1) * 0.7
    for i, v in zip(part.index, part[x]):
        pos.append(index.get(v, math.nan) + spread.get(i, 0.0) if v == v else math.nan)
    return pos


def explorer_figure(frame, x: str = RANK, colour: str | None = None, facet: str | None = None, *,
                    baselines: dict | None = None, title: str = "", log_y: bool | None = None,
                    height: int = 430, percent: bool = False) -> go.Figure:
    """One shape's configs: y = p50 with p20..p80 error bars, x = a knob (or latency rank / order measured), colour
    = another knob, one column per value of a third (``facet``). ``frame``: analysis.explore.trials_frame rows of
    one shape (a ``bw`` column, fraction of copy bandwidth, shows on hover when present). ``percent``: its p20 / p50
    / p80 hold percentages of copy bandwidth instead of milliseconds (higher is better)."""
    if percent:
        unit, per = "%", 1.0
    else:
        unit, per = unit_for(frame["p50"]) if len(frame) else ("µs", 1e-3)
    facets = axis_values(frame[facet]) if facet and facet in frame else [None]
    dropped = max(0, len(facets) - MAX_FACETS)
    facets = facets[:MAX_FACETS]
    fig = make_subplots(rows=1, cols=len(facets), shared_yaxes=True, horizontal_spacing=0.03,
                        subplot_titles=[f"{facet}={v}" for v in facets] if facet else None)
    ok = frame[frame["ok"]] if len(frame) else frame
    top = in_unit(ok["p80"].max(), per) if len(ok) else 1.0
    bottom = in_unit(ok["p20"].min(), per) if len(ok) else 1.0
    if log_y is None:
        log_y = bool(len(ok)) and bottom > 0 and top / bottom > 20
    band = top * (1.6 if log_y else 1.12) if len(ok) else 1.0  # where failures sit: above every passing point
    colours = axis_values(frame[colour]) if colour and colour in frame else [None]
    legend_seen = set()
    for col, fv in enumerate(facets, start=1):
        part = frame if fv is None else frame[frame[facet] == fv]
        if part.empty:
            continue
        xs = dict(zip(part.index, _positions(part, x)))
        for ci, cv in enumerate(colours):
            sel = part[part["ok"]] if cv is None else part[part["ok"] & (part[colour] == cv)]
            if sel.empty:
                continue
            name = "passed" if cv is None else f"{colour}={cv}"
            fig.add_scatter(
                x=[xs[i] for i in sel.index], y=[in_unit(v, per) for v in sel["p50"]], mode="markers", name=name,
                legendgroup=name, showlegend=name not in legend_seen, row=1, col=col,
                marker=dict(color=OK if cv is None else PALETTE[ci % len(PALETTE)], size=8, opacity=0.85),
                error_y=dict(type="data", symmetric=False, thickness=1, width=0,
                             array=[in_unit(a - b, per) for a, b in zip(sel["p80"], sel["p50"])],
                             arrayminus=[in_unit(b - a, per) for a, b in zip(sel["p20"], sel["p50"])]),
                hovertext=[_hover(r, unit, per) for _, r in sel.iterrows()], hoverinfo="text",
                customdata=list(sel["config"]))
            legend_seen.add(name)
        for status, colour_, symbol, label in (("wrong", WRONG, "x", "wrong result"),
                                               ("failed", FAILED, "x", "failed")):
            bad = part[part["status"] == "wrong"] if status == "wrong" else part[~part["ok"] & (part["status"] != "wrong")]
            if bad.empty:
                continue
            n = int((frame["status"] == "wrong").sum()) if status == "wrong" else int(
                (~frame["ok"] & (frame["status"] != "wrong")).sum())
            name = f"{label} ({n})"
            fig.add_scatter(x=[xs[i] for i in bad.index], y=[band] * len(bad), mode="markers", name=name,
                            legendgroup=name, showlegend=name not in legend_seen, row=1, col=col,
                            marker=dict(color=colour_, symbol=symbol, size=13, line=dict(width=2, color=colour_)),
                            hovertext=[_hover(r, unit, per) for _, r in bad.iterrows()], hoverinfo="text",
                            customdata=list(bad["config"]))
            legend_seen.add(name)
        for flag, name, marker in (("is_default", "heuristic default",
                                    dict(symbol="star", size=17, color=DEFAULT, line=dict(width=1, color="white"))),
                                   ("is_best", "best", dict(symbol="circle-open", size=20, color=BEST,
                                                            line=dict(width=3, color=BEST)))):
            mark = part[part[flag]]
            if mark.empty:
                continue
            y = [in_unit(v, per) if ok_ else band for v, ok_ in zip(mark["p50"], mark["ok"])]
            fig.add_scatter(x=[xs[i] for i in mark.index], y=y, mode="markers", name=name, legendgroup=name,
                            showlegend=name not in legend_seen, row=1, col=col, marker=marker,
                            hovertext=[_hover(r, unit, per) for _, r in mark.iterrows()], hoverinfo="text")
            legend_seen.add(name)
        if "named" in part:  # reference configs the spec names (SGLang's shipped entry, ...)
            for label in sorted({n for n in part["named"] if n}):
                mark = part[part["named"] == label]
                name = f"{label}"
                y = [in_unit(v, per) if ok_ else band for v, ok_ in zip(mark["p50"], mark["ok"])]
                fig.add_scatter(x=[xs[i] for i in mark.index], y=y, mode="markers", name=name, legendgroup=name,
                                showlegend=name not in legend_seen, row=1, col=col,
                                marker=dict(symbol="square-open", size=16, color="#e76f51", line=dict(width=2)),
                                hovertext=[_hover(r, unit, per) + f"<br><i>{html.escape(label)}</i>"
                                           for _, r in mark.iterrows()], hoverinfo="text")
                legend_seen.add(name)
        if x not in (RANK, ORDER):
            values = axis_values(part[x])
            fig.update_xaxes(tickvals=list(range(len(values))), ticktext=[str(v) for v in values], row=1, col=col)
        fig.update_xaxes(title_text=x, row=1, col=col)
    for name, b in (baselines or {}).items():
        if b.get("status") == "ok" and math.isfinite(b.get("p50", math.inf)):
            label, colour_ = BASELINE_STYLE.get(name, (name, "#6c757d"))
            y = in_unit(b["p50"], per)
            fig.add_hline(y=y, line=dict(dash="dash", color=colour_, width=1.5),
                          annotation_text=f"{label} {fmt_time(b['p50'])}", annotation_position="top left")
    if len(ok) and len(frame) > len(ok):
        fig.add_hrect(y0=band * (0.93 if not log_y else 0.8), y1=band * (1.07 if not log_y else 1.25),
                      fillcolor=FAILED, opacity=0.06, line_width=0)
    fig.update_yaxes(title_text="% of measured copy bandwidth" if percent else f"p50 ({unit})",
                     type="log" if log_y else "linear", row=1, col=1)
    n_fail = int((~frame["ok"]).sum()) if len(frame) else 0
    text = title or "configs"
    text += f": {len(frame)} configs" + (f", <span style='color:{FAILED}'>{n_fail} failed</span>" if n_fail else "")
    if len(ok):
        text += f", best {ok['p50'].max():.3g}%" if percent else f", best {fmt_time(ok['p50'].min())}"
    if dropped:
        text += f" ({dropped} more {facet} values not shown)"
    fig.update_layout(title=dict(text=text, x=0.01, xanchor="left", y=0.98))
    return _template(fig, height)


def parallel_figure(frame, height: int = 360) -> go.Figure:
    """Knobs -> latency: one line per passing config across the varying knobs, coloured by p50 (fast = yellow)."""
    ok = frame[frame["ok"]] if len(frame) else frame
    unit, per = unit_for(ok["p50"]) if len(ok) else ("µs", 1e-3)
    dims = []
    for k in knobs(frame):
        values = axis_values(frame[k])
        index = {v: i for i, v in enumerate(values)}
        dims.append(dict(label=k, values=[index.get(v, -1) for v in ok[k]], tickvals=list(range(len(values))),
                         ticktext=[str(v) for v in values], range=[-0.2, len(values) - 0.8 if len(values) > 1 else 0.2]))
    lat = [in_unit(v, per) for v in ok["p50"]]
    dims.append(dict(label=f"p50 ({unit})", values=lat))
    fig = go.Figure(go.Parcoords(dimensions=dims, line=dict(color=lat, colorscale="Viridis_r", showscale=True,
                                                            colorbar=dict(title=unit))))
    n_fail = len(frame) - len(ok)
    fig.update_layout(title=dict(text=f"knobs → latency ({len(ok)} passing configs"
                                      + (f"; {n_fail} failed, not drawn" if n_fail else "") + ")", x=0.01))
    return _template(fig, height)


def heat_figure(table: dict, height: int | None = None) -> go.Figure:
    """analysis.explore.heat_table: best p50 per knob x knob cell; "failed" where every config of a cell failed,
    empty where the space has no such config."""
    best = table["best"]
    unit, per = unit_for(best.values.ravel())
    z = [[in_unit(v, per) if v == v else None for v in row] for row in best.values]
    text, hover = [], []
    for yi, yv in enumerate(table["ys"]):
        trow, hrow = [], []
        for xi, xv in enumerate(table["xs"]):
            v, n, f = best.iat[yi, xi], table["count"].iat[yi, xi], table["failed"].iat[yi, xi]
            trow.append(fmt_time(v) if v == v else ("failed" if n else ""))
            hrow.append(f"{table['x']}={xv}, {table['y']}={yv}<br>"
                        + (f"best {fmt_time(v)}: {html.escape(table['config'].iat[yi, xi])}<br>" if v == v else "")
                        + f"{n} configs, {f} failed")
        text.append(trow)
        hover.append(hrow)
    fig = go.Figure(go.Heatmap(z=z, x=[str(v) for v in table["xs"]], y=[str(v) for v in table["ys"]], text=text,
                               texttemplate="%{text}", hovertext=hover, hoverinfo="text", colorscale="Viridis_r",
                               colorbar=dict(title=f"best p50 ({unit})")))
    fig.update_xaxes(title_text=table["x"], type="category")
    fig.update_yaxes(title_text=table["y"], type="category")
    fig.update_layout(title=dict(text=f"best latency per {table['x']} × {table['y']} cell", x=0.01))
    return _template(fig, height or min(700, 160 + 42 * len(table["ys"])))


def overview_figure(frame, batch_axis: str, height: int = 620) -> go.Figure:
    """All shapes: best (solid) and default (dashed) p50 against the batch axis, one colour per dtype and series,
    log axes; under it the speed-up of the best over the default. A partial shape is an open marker. Points carry
    their shape label in customdata (a click opens that shape)."""
    unit, per = unit_for(list(frame["best_ms"]) + list(frame["default_ms"])) if len(frame) else ("µs", 1e-3)
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08, row_heights=[0.62, 0.38],
                        subplot_titles=(f"best and heuristic default p50 against {batch_axis}",
                                        "speed-up of the pick over the default"))
    groups = list(frame.groupby(["dtype", "series"], sort=False)) if len(frame) else []
    for i, ((dtype, series), part) in enumerate(groups):
        colour = PALETTE[i % len(PALETTE)]
        name = f"{series} {dtype}"
        symbols = ["circle-open" if p else "circle" for p in part["partial"]]
        hover = [f"<b>{html.escape(r['label'])}</b>{' (partial)' if r['partial'] else ''}<br>"
                 f"best {fmt_time(r['best_ms'])}: {html.escape(r['best'])}<br>"
                 f"default {fmt_time(r['default_ms']) if math.isfinite(r['default_ms']) else 'FAILS'}: "
                 f"{html.escape(r['default'])}<br>speed-up {r['speedup']:.2f}x<br>{r['failed']} of {r['trials']} "
                 f"failed<br><i>click to open</i>" for _, r in part.iterrows()]
        fig.add_scatter(x=part["batch"], y=[in_unit(v, per) for v in part["best_ms"]], mode="lines+markers",
                        name=f"best {name}", legendgroup=name, line=dict(color=colour, width=2),
                        marker=dict(symbol=symbols, size=9), customdata=list(part["label"]), hovertext=hover,
                        hoverinfo="text", row=1, col=1)
        dflt = [in_unit(v, per) for v in part["default_ms"]]
        fig.add_scatter(x=part["batch"], y=dflt, mode="lines+markers", name=f"default {name}", legendgroup=name,
                        line=dict(color=colour, width=1.5, dash="dash"), marker=dict(symbol="star", size=9),
                        customdata=list(part["label"]), hovertext=hover, hoverinfo="text", row=1, col=1)
        fails = part[part["default_ms"].map(lambda v: math.isinf(v))]
        if len(fails):
            fig.add_scatter(x=fails["batch"], y=[in_unit(v, per) for v in fails["best_ms"]], mode="markers",
                            name=f"default fails {name}", legendgroup=name,
                            marker=dict(symbol="x", size=14, color=FAILED, line=dict(width=2, color=FAILED)),
                            customdata=list(fails["label"]), hoverinfo="text",
                            hovertext=[f"{html.escape(l)}: the heuristic default FAILS here" for l in fails["label"]],
                            row=1, col=1)
        sp = [v if math.isfinite(v) else None for v in part["speedup"]]
        fig.add_scatter(x=part["batch"], y=sp, mode="lines+markers", name=f"speed-up {name}", legendgroup=name,
                        showlegend=False, line=dict(color=colour), marker=dict(symbol=symbols, size=9),
                        customdata=list(part["label"]), hovertext=hover, hoverinfo="text", row=2, col=1)
    fig.add_hline(y=1.0, line=dict(color="#999", dash="dot", width=1), row=2, col=1)
    fig.update_xaxes(type="log", row=1, col=1)
    fig.update_xaxes(type="log", title_text=batch_axis, row=2, col=1)
    fig.update_yaxes(type="log", title_text=f"p50 ({unit})", row=1, col=1)
    fig.update_yaxes(title_text="default / best", row=2, col=1)
    fig.update_layout(title=dict(text=f"all shapes: {len(frame)}" + (
        f" ({int(frame['partial'].sum())} partial)" if len(frame) and frame["partial"].any() else ""), x=0.01))
    return _template(fig, height)


def _column_key(label: str):
    """ "N=1024 K=512 bf16" -> ((N, 1024), (K, 512), bf16): numeric order, never string order."""
    parts = label.split()
    out = []
    for p in parts:
        k, sep, v = p.partition("=")
        out.append((k, int(v)) if sep and v.isdigit() else (p, -1))
    return tuple(out)


def speedup_heatmap(results) -> go.Figure | None:
    """default / best over the grid: rows = batch size (numeric order), columns = the other axes and dtype (numeric
    order); a cell without a measured pair is left empty, a partial shape says so."""
    if not results:
        return None
    batch = next(iter(results[0].shape))
    col_of = lambda r: shape_text({k: v for k, v in r.shape.items() if k != batch}) + f" {r.dtype}"  # noqa: E731
    cols = sorted({col_of(r) for r in results}, key=_column_key)
    rows = sorted({r.shape[batch] for r in results})
    z = [[None] * len(cols) for _ in rows]
    text = [[""] * len(cols) for _ in rows]
    for r in results:
        i, j = rows.index(r.shape[batch]), cols.index(col_of(r))
        if math.isfinite(r.speedup) and not r.stopped:
            z[i][j], text[i][j] = r.speedup, f"{r.speedup:.2f}x"
        elif r.stopped:
            text[i][j] = "partial"
        elif r.best is not None and r.default_trial is not None and not r.default_trial.ok:
            text[i][j] = "default fails"
    fig = go.Figure(go.Heatmap(z=z, x=cols, y=[f"{batch}={m}" for m in rows], text=text, texttemplate="%{text}",
                               colorscale="Viridis", colorbar_title="default / best", hoverongaps=False))
    fig.update_xaxes(type="category")
    fig.update_yaxes(type="category")
    fig.update_layout(title=dict(text="speed-up of the pick (the selection's winner) over the heuristic default", x=0.01))
    return _template(fig, min(800, 150 + 34 * len(rows)))


def compare_figure(frame, a: str, b: str, height: int = 380) -> go.Figure:
    """analysis.compare.compare: per shape, a's best / b's best (> 1: b faster); a changed winner is a diamond."""
    fig = go.Figure()
    if len(frame):
        labels = [shape_text(__import__("json").loads(s)) + f" {d}"
                  for s, d in zip(frame["shape"], frame["dtype"])]
        for changed, symbol, name in ((False, "circle", "same winning config"), (True, "diamond", "winner changed")):
            sel = [i for i, c in enumerate(frame["changed"]) if bool(c) == changed]
            if not sel:
                continue
            fig.add_scatter(x=[labels[i] for i in sel], y=[frame["speedup"].iloc[i] for i in sel], mode="markers",
                            name=name, marker=dict(symbol=symbol, size=11),
                            hovertext=[f"{html.escape(labels[i])}<br>A {fmt_time(frame['a_ms'].iloc[i])}: "
                                       f"{html.escape(frame['a_config'].iloc[i])}<br>B {fmt_time(frame['b_ms'].iloc[i])}"
                                       f": {html.escape(frame['b_config'].iloc[i])}" for i in sel], hoverinfo="text")
    fig.add_hline(y=1.0, line=dict(color="#999", dash="dot"))
    fig.update_yaxes(title_text="A best / B best (> 1: B faster)", type="log")
    fig.update_layout(title=dict(text=f"A = {html.escape(a)}<br>B = {html.escape(b)}", x=0.01, font=dict(size=12)))
    return _template(fig, height)
