"""Two runs side by side: two results stores, or two devices / toolchains inside one store (H200 against MI300X,
Triton 3.6 against 3.9). Per shape: each side's best, the speed-up of one over the other and whether the winning
config changed. Headless (pandas); the workbench's compare tab draws it."""
from __future__ import annotations

import json
import math

import pandas as pd

def sides(frame: pd.DataFrame) -> list[str]:
    """The run groups a store's trials frame holds, as labels "NVIDIA_H200 · triton 3.6.0 · torch 2.9.0"."""
    if frame.empty:
        return []
    return sorted(_with_side(frame)["side"].unique())


def _with_side(frame: pd.DataFrame) -> pd.DataFrame:
    tool = frame["toolchain"].map(lambda s: json.loads(s) if isinstance(s, str) and s else {})
    out = frame.copy()
    out["triton"] = tool.map(lambda d: d.get("triton", "?"))
    out["torch"] = tool.map(lambda d: d.get("torch", "?"))
    out["side"] = out["device"].astype(str) + " · triton " + out["triton"] + " · torch " + out["torch"]
    return out


def best_per_shape(frame: pd.DataFrame, side: str | None = None,
                   selections: pd.DataFrame | None = None) -> pd.DataFrame:
    """From ``Store.frame()``: per (kernel, shape, dtype) the winner (of one ``side`` when given), with the
    heuristic default's time beside it. Where ``selections`` (``Store.frame(table="selections")``) holds the
    selection stage's decision for the shape's key, the winner is its pick and both times are its re-timed medians
    (what an export ships: a search's fastest whose lead the re-timing undid is not the winner); elsewhere the
    fastest passing full-fidelity trial and the default's search p50."""
    if frame.empty:
        return pd.DataFrame(columns=["kernel", "shape", "dtype", "best_ms", "config", "default_ms", "default"])
    df = _with_side(frame)
    if side is not None:
        df = df[df["side"] == side]
    df = df[df["fidelity"] == "full"]
    decided = {}
    if selections is not None and not selections.empty:
        for _, row in selections.sort_values("id").iterrows():  # the latest decision of a key wins
            decided[row["key"]] = row
    rows = []
    for (kernel, shape, dtype), part in df.groupby(["kernel", "shape", "dtype"], sort=False):
        ok = part[part["status"] == "ok"]
        dflt = part[part["is_default"] == 1]
        best = ok.loc[ok["p50"].idxmin()] if len(ok) else None
        row = {"kernel": kernel, "shape": shape, "dtype": dtype,
               "best_ms": float(best["p50"]) if best is not None else math.nan,
               "config": best["config"] if best is not None else "",
               "default_ms": (float(dflt["p50"].iloc[0]) if dflt["status"].iloc[0] == "ok" else math.inf)
               if len(dflt) else math.nan,
               "default": dflt["config"].iloc[0] if len(dflt) else ""}
        # the key measured last in this group (a kernel edited between runs gives one key per source version)
        sel = decided.get(part.loc[part["id"].idxmax(), "key"]) if decided else None
        if sel is not None:
            summary = json.loads(sel["summary"] or "{}")
            failed = {_canon_one(c) for c in json.loads(sel["failed"] or "{}")}
            won = summary.get("winner_p50_ms")
            # a winner that failed a round is vouched for by nothing (the search's fastest stands, as SearchResult.pick
            # falls back); a default that failed one is a loss, as SearchResult.time_of counts it
            if won is not None and math.isfinite(won) and _canon_one(sel["winner"]) not in failed:
                row.update(config=sel["winner"], best_ms=float(won))
                d = summary.get("default_p50_ms")
                if _canon_one(sel["default_config"]) in failed:
                    row["default_ms"] = math.inf
                elif d is not None and math.isfinite(d):
                    row["default_ms"] = float(d)
        rows.append(row)
    return pd.DataFrame(rows)


def compare(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Shapes both sides measured (``best_per_shape`` frames): ``a_ms``, ``b_ms``, ``speedup`` = a / b (> 1: b is
    faster), ``a_config``, ``b_config``, ``changed`` (the winners differ), plus the shape's axes as columns."""
    cols = ["kernel", "shape", "dtype", "a_ms", "b_ms", "speedup", "a_config", "b_config", "changed"]
    if a.empty or b.empty:
        return pd.DataFrame(columns=cols)
    m = a.merge(b, on=["kernel", "shape", "dtype"], suffixes=("_a", "_b"))
    out = pd.DataFrame({"kernel": m["kernel"], "shape": m["shape"], "dtype": m["dtype"], "a_ms": m["best_ms_a"],
                        "b_ms": m["best_ms_b"], "a_config": m["config_a"], "b_config": m["config_b"]})
    out["speedup"] = out["a_ms"] / out["b_ms"]
    out["changed"] = _canon(out["a_config"]) != _canon(out["b_config"])
    axes = pd.DataFrame([json.loads(s) for s in out["shape"]], index=out.index) if len(out) else pd.DataFrame()
    out = pd.concat([axes, out], axis=1)
    return out[list(axes.columns) + cols]


def _canon_one(config: str) -> str:
    return json.dumps(json.loads(config), sort_keys=True) if config else ""


def _canon(configs: pd.Series) -> pd.Series:
    return configs.map(_canon_one)
