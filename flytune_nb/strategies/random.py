"""``budget`` configs drawn uniformly without replacement. Seeded, so re-running the same sweep draws the same
configs and the results store can skip the ones already measured."""
from __future__ import annotations

import random as _random
from typing import Callable, Sequence


def random_search(space: Sequence, evaluate: Callable, budget: int | None = None, seed: int = 0) -> list:
    n = len(space) if budget is None else min(len(space), max(0, int(budget)))
    chosen = _random.Random(seed).sample(list(space), n)
    return [evaluate(c) for c in chosen]
