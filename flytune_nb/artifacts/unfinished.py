"""Which shapes of a results store a sweep left mid-search, so that no export takes their fastest config.

A sweep stopped or killed while it searched a shape leaves the trials it timed and no selection (the stage that
re-times the shortlist against the default): that fastest median is of part of the search and vetted by nothing. A
shape is unfinished when all of these hold:
- its kernel has selections in this store, or a run that timed it recorded a selection rule that was on: stores
  written before the selection stage have neither, and their runs were often never marked finished, so lacking a
  selection says nothing there; a run that recorded its rule says it would have made one (the first shape of a fresh
  store, cut off mid-search or mid-selection, has no other shape's selection to vouch for the store);
- it has no selection under its tuning key;
- every run that timed it or had it in its grid is recorded as never finished (killed, or stopped: a stopped run
  is not marked finished);
- no finished run of its kernel had it in its grid (a run that resumed it and finished, with selection off).
Running the same sweep again resumes such a shape, finishes it, and clears every condition but the first.

A run that timed configs it was given (the heuristic editor's Measure missing) searched no space: it neither finishes
a shape nor takes the trials it re-measured out of the cut-off search, unless such runs are all that timed the shape.
"""
from __future__ import annotations

import json

from flytune_nb.engine.store import LISTED_CONFIGS


def unfinished_keys(store, kernel: str | None = None) -> set[str]:
    """The tuning keys of the shapes in ``store`` (of ``kernel``, or every kernel) that a sweep left mid-search."""
    sels = store.frame(kernel, table="selections")
    runs = store.frame(kernel, table="runs")
    if runs.empty or "finished" not in runs.columns:
        return set()
    trials = store.frame(kernel)
    if trials.empty:
        return set()
    done = runs["finished"].notna() & (runs["finished"] != "")
    stopped = set(runs.loc[~done, "run_id"])
    listed = set(runs.loc[runs["strategy"].astype(str).str.startswith(LISTED_CONFIGS), "run_id"]) \
        if "strategy" in runs.columns else set()
    selecting = set(runs.loc[runs["selection"].map(_selects), "run_id"]) if "selection" in runs.columns else set()
    gridded: dict[tuple, set] = {}  # (kernel, shape, dtype) -> the runs that searched the space with it in their grid
    for _, r in runs[~runs["run_id"].isin(listed)].iterrows():
        for shape in json.loads(r["grid"] or "[]"):
            for dtype in json.loads(r["dtypes"] or "[]"):
                gridded.setdefault((r["kernel"], _canon(shape), dtype), set()).add(r["run_id"])
    finished = set(runs.loc[done, "run_id"])
    judged = set(sels["kernel"]) if len(sels) else set()
    selected = set(sels["key"]) if len(sels) else set()
    out = set()
    for (kname, shape, dtype, key), g in trials.groupby(["kernel", "shape", "dtype", "key"]):
        where = (kname, _canon(shape), dtype)
        # a listed run re-measuring a config takes its trial row over: the search it came from is named by the grid
        runs_of = (set(g["run_id"]) - listed) | gridded.get(where, set()) or set(g["run_id"])
        if (kname in judged or runs_of & selecting) and key not in selected and runs_of <= stopped \
                and not gridded.get(where, set()) & finished:
            out.add(key)
    return out


def _selects(rule) -> bool:
    """Whether a run's recorded rule (Rule.to_dict as JSON; None for runs from before runs recorded it) was on."""
    if not isinstance(rule, str) or not rule:
        return False
    try:
        return int(json.loads(rule).get("top", 0)) > 0
    except (ValueError, AttributeError, TypeError):
        return False


def _canon(shape) -> tuple:
    """A shape as a comparable value, from a trial's compact JSON or a run's grid entry."""
    return tuple(sorted((json.loads(shape) if isinstance(shape, str) else shape).items()))
