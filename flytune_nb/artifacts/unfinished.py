"""Which shapes of a results store a sweep left mid-search, so that no export takes their fastest config.

A sweep stopped or killed while it searched a shape leaves the trials it timed and no selection (the stage that
re-times the shortlist against the default): that fastest median is of part of the search and vetted by nothing. A
shape is unfinished when all of these hold:
- its kernel has selections in this store: stores written before the selection stage have none, and their runs were
  often never marked finished, so lacking one says nothing there;
- it has no selection under its tuning key;
- every run that timed it is recorded as never finished (killed, or stopped: a stopped run is not marked finished);
- no finished run of its kernel had it in its grid (a run that resumed it and finished, with selection off).
Running the same sweep again resumes such a shape, finishes it, and clears every condition but the first.
"""
from __future__ import annotations

import json


def unfinished_keys(store, kernel: str | None = None) -> set[str]:
    """The tuning keys of the shapes in ``store`` (of ``kernel``, or every kernel) that a sweep left mid-search."""
    sels = store.frame(kernel, table="selections")
    if sels.empty:
        return set()
    runs = store.frame(kernel, table="runs")
    if runs.empty or "finished" not in runs.columns:
        return set()
    trials = store.frame(kernel)
    if trials.empty:
        return set()
    done = runs["finished"].notna() & (runs["finished"] != "")
    stopped = set(runs.loc[~done, "run_id"])
    covered = {(r["kernel"], _canon(shape), dtype) for _, r in runs[done].iterrows()
               for shape in json.loads(r["grid"] or "[]") for dtype in json.loads(r["dtypes"] or "[]")}
    judged, selected = set(sels["kernel"]), set(sels["key"])
    out = set()
    for (kname, shape, dtype, key), g in trials.groupby(["kernel", "shape", "dtype", "key"]):
        if kname in judged and key not in selected and set(g["run_id"]) <= stopped \
                and (kname, _canon(shape), dtype) not in covered:
            out.add(key)
    return out


def _canon(shape) -> tuple:
    """A shape as a comparable value, from a trial's compact JSON or a run's grid entry."""
    return tuple(sorted((json.loads(shape) if isinstance(shape, str) else shape).items()))
