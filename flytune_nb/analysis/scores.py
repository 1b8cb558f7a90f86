"""Scores behind the workbench views: the heuristic default against the searched best per shape, and regret over a
grid. Plain functions over SearchResults; the notebook only displays them."""
from __future__ import annotations

import math



def geomean(xs) -> float:
    xs = [x for x in xs if x and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else math.nan


def regret(ratios) -> float:
    """Geomean of pick / best over shapes; inf when the pick failed on any of them (geomean alone would drop those
    and let a heuristic look better by failing)."""
    ratios = list(ratios)
    return math.inf if any(math.isinf(r) for r in ratios) else geomean(ratios)


def speedup_rows(results) -> list[dict]:
    """One row per (shape, dtype): default vs best, baselines, speed-up — the heuristic-vs-best table. The best is
    the shape's pick (the selection stage's winner where it ran) and both times are re-timed where it re-timed them
    (``SearchResult.time_of``); ``search_best`` is the search's fastest, whose lead the re-timing may not have
    confirmed."""
    rows = []
    for r in results:
        b, fastest = r.pick, r.best
        eager = (r.baselines.get("torch_eager") or {}).get("p50", math.nan)
        comp = (r.baselines.get("torch_compile") or {}).get("p50", math.nan)
        rows.append({**r.shape, "dtype": r.dtype, "default": str(r.default),
                     # inf: the heuristic's config fails (a loss that regret must show); nan: never measured
                     "default_ms": r.default_ms, "best": str(b.config) if b else "",
                     "best_ms": r.pick_ms, "speedup": r.speedup, "search_best": str(fastest.config) if fastest else "",
                     "search_speedup": r.search_speedup, "torch_eager_ms": eager, "torch_compile_ms": comp})
    return rows
