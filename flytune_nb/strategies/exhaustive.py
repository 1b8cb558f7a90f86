"""Every config in the (already pruned) space, in order; ``budget`` keeps the first N."""
from __future__ import annotations

from typing import Callable, Sequence


def exhaustive(space: Sequence, evaluate: Callable, budget: int | None = None) -> list:
    chosen = list(space) if budget is None else list(space)[: max(0, int(budget))]
    return [evaluate(c) for c in chosen]
