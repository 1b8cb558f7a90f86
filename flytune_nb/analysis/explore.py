"""The config space of one shape as data: every trial with its knobs as columns, latency ranks, and knob x knob
tables of the best latency per cell. Headless (pandas); the workbench's explorer only draws these.

Latencies are milliseconds as stored (units.py formats them); a failed trial has NaN latencies and keeps its status
and reason, so a view can place it and say why.
"""
from __future__ import annotations

import math

import pandas as pd

from flytune_nb.core.shapes import shape_text

RANK = "latency rank"  # the x choice that is not a knob: configs ordered fastest first
ORDER = "order measured"


def shape_label(shape: dict, dtype: str) -> str:
    return f"{shape_text(shape)} {dtype}"


def trials_frame(results) -> pd.DataFrame:
    """One row per trial of ``results`` (SearchResults): the shape's axes, ``dtype``, ``shape_label``, ``config``
    (text), one column per knob, ``status``, ``ok``, ``p20``/``p50``/``p80`` (ms; NaN unless ok), ``rel_error``,
    ``reason``, ``fidelity``, ``is_default``, ``is_best`` (the shape's pick: the selection stage's winner, which
    need not be its fastest search timing), ``partial`` (its shape was stopped), ``order`` (position measured),
    ``named`` (the label of a reference config the spec names, e.g. "SGLang shipped", else "") and ``rank``
    (1 = fastest passing config of its shape by its search timing; NaN for a failure). ``frame.attrs["knobs"]``
    lists the knob columns in first-seen order."""
    rows, knobs = [], {}
    for r in results:
        best = r.pick  # the shape's winner as an export ships it, not a search lead the re-timing undid
        label = shape_label(r.shape, r.dtype)
        named = {c: name for name, c in (getattr(r, "named", None) or {}).items()}  # e.g. "SGLang shipped"
        for i, t in enumerate(r.trials):
            d = t.config.to_dict()
            for k in d:
                knobs.setdefault(k, None)
            ok = t.ok
            rows.append({**r.shape, "dtype": r.dtype, "shape_label": label, "config": str(t.config), **d,
                         "status": t.status, "ok": ok, "p20": t.p20 if ok else math.nan,
                         "p50": t.p50 if ok else math.nan, "p80": t.p80 if ok else math.nan,
                         "rel_error": t.rel_error, "reason": t.reason, "fidelity": t.fidelity,
                         "is_default": t.config == r.default, "is_best": t is best, "named": named.get(t.config, ""),
                         "partial": bool(getattr(r, "stopped", False)), "order": i, "device": t.device})
    df = pd.DataFrame(rows)
    if not df.empty:
        df["rank"] = df.groupby("shape_label")["p50"].rank(method="first")
    df.attrs["knobs"] = list(knobs)
    return df


def knobs(frame: pd.DataFrame, varying: bool = True) -> list[str]:
    """The knob columns (those that take more than one value, with ``varying``), in first-seen order."""
    names = [k for k in frame.attrs.get("knobs", []) if k in frame.columns]
    if varying:
        names = [k for k in names if frame[k].dropna().nunique() > 1]
    return names


def axis_values(series: pd.Series) -> list:
    """A knob's distinct values in numeric order (never as strings: N=512 before N=1024); absent (NaN) last."""
    vals = series.dropna().unique().tolist()
    return sorted(vals, key=lambda v: (not isinstance(v, (int, float)), v))


def heat_table(frame: pd.DataFrame, x: str, y: str) -> dict:
    """Knob ``x`` by knob ``y``: the best p50 (ms) over the passing configs in each cell (NaN: none passed), how many
    configs each cell holds and how many failed, and the best cell's config. Rows and columns in numeric order."""
    xs, ys = axis_values(frame[x]), axis_values(frame[y])
    best = pd.DataFrame(math.nan, index=ys, columns=xs)
    count = pd.DataFrame(0, index=ys, columns=xs)
    failed = pd.DataFrame(0, index=ys, columns=xs)
    config = pd.DataFrame("", index=ys, columns=xs)
    for (yv, xv), cell in frame.groupby([y, x]):
        count.loc[yv, xv] = len(cell)
        failed.loc[yv, xv] = int((~cell["ok"]).sum())
        ok = cell[cell["ok"]]
        if len(ok):
            i = ok["p50"].idxmin()
            best.loc[yv, xv] = ok.loc[i, "p50"]
            config.loc[yv, xv] = ok.loc[i, "config"]
    return {"x": x, "y": y, "xs": xs, "ys": ys, "best": best, "count": count, "failed": failed, "config": config}


def knob_influence(frame: pd.DataFrame) -> list[tuple[str, float]]:
    """Which knob matters: for each varying knob, how much the best p50 moves between its values (max over min of
    the per-value best), largest first. 1.0: the knob does not matter once the others are chosen well."""
    ok = frame[frame["ok"]]
    out = []
    for k in knobs(frame):
        per = ok.groupby(k)["p50"].min()
        if len(per) > 1 and per.min() > 0:
            out.append((k, float(per.max() / per.min())))
    return sorted(out, key=lambda kv: -kv[1])
