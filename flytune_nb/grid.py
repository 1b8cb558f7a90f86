"""Shape grids: ``"M=1,64,4096 N=4096,8192"`` -> the cartesian product as shape dicts.

Presets: ``M=sglang`` expands to SGLang's default tuning batch sizes. Any mistake gives one GridError line that says
what was expected.
"""
from __future__ import annotations

import itertools
import re

SGLANG_BATCH_SIZES = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096)
PRESETS = {"sglang": SGLANG_BATCH_SIZES}


class GridError(ValueError):
    pass


def parse_values(axis: str, text: str) -> list[int]:
    text = text.strip()
    if text.lower() in PRESETS:
        return list(PRESETS[text.lower()])
    values = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        if not re.fullmatch(r"\d+", part):
            raise GridError(f"axis {axis}: {part!r} is not a positive integer (write e.g. {axis}=1,64,4096)")
        v = int(part)
        if v < 1:
            raise GridError(f"axis {axis}: sizes must be >= 1, got {v}")
        values.append(v)
    if not values:
        raise GridError(f"axis {axis} has no values (write e.g. {axis}=1,64,4096)")
    return list(dict.fromkeys(values))


def parse_grid(text: str | dict, axes: tuple[str, ...]) -> list[dict[str, int]]:
    """Grid text or ``{axis: [values]}`` -> list of shapes, every axis present exactly once."""
    if isinstance(text, dict):
        per_axis = {str(a): parse_values(str(a), ",".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v))
                    for a, v in text.items()}
    else:
        per_axis = {}
        for token in str(text).replace(";", " ").split():
            axis, sep, values = token.partition("=")
            if not sep or not axis:
                raise GridError(f"grid term {token!r} is not AXIS=v1,v2,... (e.g. \"M=1,64 N=4096\")")
            if axis in per_axis:
                raise GridError(f"axis {axis} given twice in the grid")
            per_axis[axis] = parse_values(axis, values)
    unknown = [a for a in per_axis if a not in axes]
    missing = [a for a in axes if a not in per_axis]
    if unknown or missing:
        raise GridError(f"grid must set each of the kernel's axes {list(axes)}; "
                        f"{'missing ' + str(missing) if missing else ''}{' ' if missing and unknown else ''}"
                        f"{'unknown ' + str(unknown) if unknown else ''}")
    combos = itertools.product(*(per_axis[a] for a in axes))
    return [dict(zip(axes, c)) for c in combos]
