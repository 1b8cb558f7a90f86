"""What a compile census says about the configs a sweep timed: census rows (flytune_nb.measure.census) joined onto
a trials frame (analysis.explore.trials_frame) by shape, dtype and config, so a view can colour, filter or annotate
each point with the registers, occupancy, spills and load widths its binary has on a target; ``census_frame``, a
store's census table as one DataFrame. Headless (pandas).

A census row and a trial meet on the config itself, not on the device: the point of a census of a GPU that is not
here (an MI300X seen from a CPU laptop) is to read it beside trials timed elsewhere. ``annotate`` takes one target's
rows and names that target in the description it adds; nothing here claims that the binary timed is the one censused
unless the devices match.
"""
from __future__ import annotations

import json

import pandas as pd

from flytune_nb.errors import UsageError
from flytune_nb.measure.census import describe, same_binary

# The columns annotate() adds (the explorer offers the first four as colours): every one starts with "census " so that
# none can shadow a knob of the kernel's.
OCCUPANCY = "census occupancy"
SPILLS = "census spills"
NARROW = "census loads"
LIMITER = "census limiter"
REGISTERS = "census registers"
RESOURCES = "census"  # one line of text: what the hover shows
COLOURS = (OCCUPANCY, SPILLS, NARROW, LIMITER)

# What the census tab can show on its own, each a test on a CensusRow.
FILTERS = {
    "every config": lambda r, dup: True,
    "spill to scratch": lambda r, dup: r.spills,
    "no 16-byte loads": lambda r, dup: r.narrow,
    "over the LDS / shared-memory limit": lambda r, dup: r.smem_over_limit,
    "did not compile": lambda r, dup: not r.ok,
    "same binary as another": lambda r, dup: r.config in dup,
    "heuristic default": lambda r, dup: r.is_default,
}


def census_frame(store, kernel: str | None = None, *, shape: dict | None = None, dtype: str | None = None,
                 device: str | None = None):
    """The census rows of a results store (a Store or its path) as a pandas DataFrame, one row per config: the
    store's columns (status, error, registers, spills, scratch_bytes, shared_bytes, occupancy, widest_load, mma, ...),
    the shape's axes and the config's knobs as columns of their own, so a plot can colour or filter configs by
    them and join them to the trials on ``config`` (the same JSON) and ``key``. ``device``: a device name
    (AMD_Instinct_MI300X) or a target name (mi300x)."""
    from flytune_nb.engine.store import Store

    own = not isinstance(store, Store)
    s = Store(store, readonly=True) if own else store
    try:
        df = s.frame(kernel, table="census")
    finally:
        if own:
            s.close()
    if device is not None:
        from flytune_nb.core.targets import TARGETS

        name = TARGETS[device.lower()].device_name if device.lower() in TARGETS else device
        df = df[df["device"] == name]
    if dtype is not None:
        df = df[df["dtype"] == dtype]
    if shape is not None:
        want = {k: int(v) for k, v in shape.items()}
        df = df[[json.loads(t) == want for t in df["shape"]]]
    if df.empty:
        return df.reset_index(drop=True)
    knobs = pd.DataFrame([json.loads(c) for c in df["config"]], index=df.index)
    knobs = knobs[[c for c in knobs.columns if c not in df.columns]]
    return pd.concat([df, knobs], axis=1).reset_index(drop=True)


def devices(rows) -> list[str]:
    """The targets the rows were taken for, in first-seen order (AMD_Instinct_MI300X, NVIDIA_H200, ...)."""
    return list(dict.fromkeys(r.device for r in rows))


def rows_for(rows, shape: dict, dtype: str, device: str) -> list:
    """One shape's rows on one target (the last stored per config wins, as in the store)."""
    want = _shape_key(shape)
    out = {r.config: r for r in rows if r.device == device and r.dtype == dtype and _shape_key(r.shape) == want}
    return list(out.values())


def duplicates(rows) -> dict:
    """Config -> the first config (in ``rows``' order, the heuristic default first) that built the same binary, for
    every config that is not that first one."""
    ordered = sorted(rows, key=lambda r: not r.is_default)
    first = {id(r): g[0].config for g in same_binary(ordered) for r in g[1:]}
    # in the rows' order, not the groups': a config with rows under two tuning keys keeps its later duplicate's answer
    return {r.config: first[id(r)] for r in ordered if id(r) in first}


def annotate(frame: pd.DataFrame, rows, device: str) -> pd.DataFrame:
    """``frame`` (a trials frame) with the census columns of ``device``'s rows for each trial's shape, dtype and
    config: occupancy (an int; "not censused" / "did not compile" / "unknown" otherwise), spills ("spills" /
    "no spills"), loads ("narrow" / "16-byte"), the occupancy limiter, registers, and the one-line description.
    Configs the census has no row for read "not censused", so a colour shows what is missing rather than hiding it."""
    out = frame.copy()
    if out.empty:
        for c in (*COLOURS, REGISTERS, RESOURCES):
            out[c] = []
        return out
    axes = sorted({a for r in rows for a in r.shape})
    keys = [(tuple(sorted((a, int(t[a])) for a in axes if a in t and t[a] == t[a])), t["dtype"])
            for _, t in out.iterrows()]
    shown = set(keys)  # the frame's shapes: rows of other shapes are never looked at
    index: dict = {}
    groups: dict = {}
    for r in rows:
        k = (_shape_key(r.shape), r.dtype)
        if r.device == device and k in shown:
            index[(*k, str(r.config))] = r
            groups.setdefault(k, []).append(r)
    same_as = {k: duplicates(g) for k, g in groups.items()}
    found = [index.get((*k, t["config"])) for k, (_, t) in zip(keys, out.iterrows())]
    label = "not censused"
    # occupancy as a number where the census has one, else why not: a colour by it must not drop those points
    out[OCCUPANCY] = [label if r is None else "did not compile" if not r.ok else
                      r.occupancy if r.occupancy is not None else "unknown" for r in found]
    out[SPILLS] = [label if r is None else ("did not compile" if not r.ok else "spills" if r.spills else "no spills")
                   for r in found]
    out[NARROW] = [label if r is None else ("did not compile" if not r.ok else "narrow" if r.narrow else
                                            "16-byte" if r.widest_load is not None else "no global loads")
                   for r in found]
    out[LIMITER] = [label if r is None else (r.occupancy_limiter or "-") for r in found]
    out[REGISTERS] = [r.registers if r is not None else None for r in found]
    out[RESOURCES] = ["" if r is None else f"{device}: " + describe(
        r, same_as.get((_shape_key(r.shape), r.dtype), {}).get(r.config)) for r in found]
    return out


def table(rows, trials: pd.DataFrame | None = None, *, show: str = "every config", sort: str = "occupancy"):
    """The census tab's rows for one shape and target: a DataFrame with config, status, registers, occupancy,
    limiter, LDS / shared KiB, scratch bytes, widest load, MMA, same binary as, resources, default, and, where
    ``trials`` (that shape's trials frame) timed the config, its p50 (ms) and status. ``show``: a FILTERS key."""
    if show not in FILTERS:
        raise UsageError(f"unknown census filter {show!r}; one of {', '.join(FILTERS)}")
    dup = duplicates(rows)
    timed = {}
    if trials is not None and not trials.empty:
        for _, t in trials.iterrows():
            timed[t["config"]] = (t["p50"], t["status"])
    recs = []
    for r in rows:
        if not FILTERS[show](r, dup):
            continue
        p50, status = timed.get(str(r.config), (float("nan"), ""))
        recs.append({"config": str(r.config), "status": r.status, "registers": r.registers,
                     "occupancy": r.occupancy, "limiter": r.occupancy_limiter,
                     "shared KiB": None if r.shared_bytes is None else round(r.shared_bytes / 1024, 1),
                     "scratch B": r.scratch_bytes if r.spills else 0, "widest load B": r.widest_load,
                     "mma": " ".join(f"{n}x {k}" for k, n in r.mma.items()), "same binary as":
                     str(dup[r.config]) if r.config in dup else "", "default": r.is_default,
                     "spills": r.spills, "narrow": r.narrow, "error": r.error,
                     "measured p50": p50, "measured": status, "resources": describe(r, dup.get(r.config))})
    df = pd.DataFrame(recs)
    if df.empty:
        return df
    key = {"occupancy": ("occupancy", False), "registers": ("registers", True), "scratch": ("scratch B", False),
           "measured p50": ("measured p50", True), "config": ("config", True)}
    col, ascending = key.get(sort, ("occupancy", False))
    return df.sort_values(col, ascending=ascending, na_position="last", kind="stable").reset_index(drop=True)


def _shape_key(shape) -> tuple:
    if isinstance(shape, str):
        shape = json.loads(shape)
    return tuple(sorted((k, int(v)) for k, v in shape.items()))
