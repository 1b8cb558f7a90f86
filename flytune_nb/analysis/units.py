"""Latencies for people: one unit per view, chosen from the data (ns / µs / ms / s), always written "µs".

Trials store milliseconds (p20/p50/p80). A table printing ``2.03e+03`` µs beside a tab in ms and a plot axis of
"1.5M us" would make one sweep read three ways, so every view formats through here.
"""
from __future__ import annotations

import math
import statistics

UNITS = (("ns", 1e-6), ("µs", 1e-3), ("ms", 1.0), ("s", 1e3))  # name, milliseconds per unit


def unit_for(values_ms) -> tuple[str, float]:
    """(name, ms per unit) that shows the median of the finite, positive ``values_ms`` between 1 and 1000."""
    xs = [v for v in values_ms if v is not None and isinstance(v, (int, float)) and math.isfinite(v) and v > 0]
    if not xs:
        return "µs", 1e-3
    mid = statistics.median(xs)
    for name, per in UNITS:
        if mid < per * 1000:
            return name, per
    return UNITS[-1]


def in_unit(value_ms: float, per: float) -> float:
    """``value_ms`` in the unit of ``per`` ms; nan for a failed (inf) or missing value."""
    if value_ms is None or not math.isfinite(value_ms):
        return math.nan
    return value_ms / per


def fmt_time(value_ms: float, digits: int = 3) -> str:
    """One latency with its own unit, ``digits`` significant: 0.00085 -> "850 ns", 2.034 -> "2.03 ms"; "-" when
    there is no measurement (a failed trial's inf)."""
    if value_ms is None or not math.isfinite(value_ms):
        return "-"
    name, per = unit_for([value_ms])
    return f"{_sig(value_ms / per, digits)} {name}"


def _sig(x: float, digits: int) -> str:
    if x == 0:
        return "0"
    decimals = max(0, digits - 1 - int(math.floor(math.log10(abs(x)))))
    return f"{x:.{decimals}f}"
