"""All shapes of a sweep at a glance: per shape the searched best against the heuristic default, along the batch
axis. Headless (pandas); the workbench's overview draws it.

A shape whose search was stopped is ``partial``: its "best" is the best of the few configs measured, so it is shown
but left out of regret (counted, a stopped shape with 2 of 39 trials would read "best = default, 1.00x").
"""
from __future__ import annotations

import math

import pandas as pd

from flytune_nb.analysis.explore import shape_label
from flytune_nb.analysis.scores import regret
from flytune_nb.core.shapes import shape_text


def overview_frame(results, batch_axis: str) -> pd.DataFrame:
    """One row per (shape, dtype): the axes, ``dtype``, ``series`` (the other axes, e.g. "N=4096": one line per
    series along the batch axis), ``batch`` (the batch-axis value), ``best_ms``, ``default_ms`` (inf: the default
    fails; NaN: not measured), ``speedup`` (default / best), ``named:<label>_ms`` per reference config the spec names
    (SGLang's shipped entry, ...), ``best`` and ``default`` configs, ``changed`` (the best
    is not the default), ``trials``, ``failed``, ``partial``, ``band`` and ``margin`` (the tie band the selection
    decided with and its deciding candidate's lead over the default; NaN where nothing was re-timed against the
    default), the torch baselines' p50 (ms), ``label``.
    "Best" is the shape's pick (``SearchResult.pick``: the selection stage's winner, what an export ships), its time
    and the default's re-timed where the stage re-timed them; ``fastest`` is the search's fastest config when it is
    another (a lead the re-timing did not confirm), else ""."""
    rows = []
    for r in results:
        b, fastest = r.pick, r.best
        default_ms = r.default_ms
        best_ms = r.pick_ms
        series = shape_text({k: v for k, v in r.shape.items() if k != batch_axis}) or "all"
        row = {**r.shape, "dtype": r.dtype, "series": series, "batch": r.shape.get(batch_axis),
               "label": shape_label(r.shape, r.dtype), "best_ms": best_ms, "default_ms": default_ms,
               "speedup": r.speedup if b is not None and math.isfinite(default_ms) else
               (math.inf if b is not None and math.isinf(default_ms) else math.nan),
               "best": str(b.config) if b is not None else "", "default": str(r.default),
               "fastest": str(fastest.config) if fastest is not None and b is not None
               and fastest.config != b.config else "",
               "changed": b is not None and b.config != r.default, "trials": len(r.trials),
               "failed": sum(not t.ok for t in r.trials), "partial": bool(getattr(r, "stopped", False))}
        decided = r.selection.deciding if getattr(r, "selection", None) is not None else None
        row["band"], row["margin"] = ((decided.band, decided.margin) if decided is not None and decided.ratios
                                      else (math.nan, math.nan))
        for name, base in (r.baselines or {}).items():
            row[f"{name}_ms"] = base.get("p50", math.nan) if base.get("status") == "ok" else math.nan
        for name, t in (getattr(r, "named_trials", None) or {}).items():  # reference configs the spec names
            row[f"named:{name}_ms"] = math.nan if t is None else (r.time_of(t.config) if t.ok else math.inf)
        rows.append(row)
    df = pd.DataFrame(rows)
    if not df.empty:
        df = df.sort_values(["dtype", "series", "batch"], kind="stable").reset_index(drop=True)
    return df


def worst_shape(whole: pd.DataFrame) -> pd.Series | None:
    """The row of ``whole`` (complete shapes of ``overview_frame``) whose default is slowest against its pick, or
    None where no default is slower than its pick (a regret of 1.000x has no worst shape to name)."""
    speedup = whole["speedup"] if len(whole) else pd.Series(dtype=float)
    if not speedup.notna().any():
        return None
    row = whole.loc[speedup.idxmax()]
    return row if row["speedup"] > 1.0 else None


def regret_by_dtype(frame: pd.DataFrame) -> dict:
    """dtype -> {"regret": geomean default / best over its complete shapes (inf when the default fails on one),
    "shapes": complete shapes counted, "partial": shapes left out, "worst": the label with the largest speed-up,
    "" where no default is slower than its pick}."""
    out = {}
    for dtype, part in frame.groupby("dtype", sort=False):
        whole = part[~part["partial"] & part["best_ms"].notna() & part["default_ms"].notna()]
        worst = worst_shape(whole)
        out[dtype] = {"regret": regret(whole["speedup"]) if len(whole) else math.nan,
                      "shapes": len(whole), "partial": int(part["partial"].sum()),
                      "worst": "" if worst is None else worst["label"]}
    return out
