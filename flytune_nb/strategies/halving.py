"""Successive halving: time every candidate cheaply (``fidelity="quick"``: a few reps), then time the best
1/``eta`` of them properly. ``budget`` caps the quick round.

Quick timings are noisier but rank well for memory-bound kernels whose configs differ by 10-50%; the full round
fixes the order among the survivors. A config that fails the quick round never reaches the full one.
"""
from __future__ import annotations

import math
import random as _random
from typing import Callable, Sequence


def halving(space: Sequence, evaluate: Callable, budget: int | None = None, eta: int = 4, seed: int = 0) -> list:
    pool = list(space)
    if budget is not None and budget < len(pool):
        pool = _random.Random(seed).sample(pool, max(0, int(budget)))
    quick = [evaluate(c, "quick") for c in pool]
    ranked = sorted((t for t in quick if t.ok), key=lambda t: t.p50)
    keep = ranked[: max(1, math.ceil(len(pool) / eta))] if ranked else []
    return quick + [evaluate(t.config, "full") for t in keep]
