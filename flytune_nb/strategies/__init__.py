"""Search strategies. Each is one function ``search(space, evaluate, budget, **options) -> list[Trial]``.

``evaluate(config, fidelity="full")`` measures one config and returns its Trial (``score`` is inf for anything that
failed); ``budget`` caps the number of evaluations (None: no cap). Strategies never touch a GPU themselves, which is
what lets them be tested on replayed timings.
"""
from .exhaustive import exhaustive
from .halving import halving
from .random import random_search
from .surrogate import surrogate

STRATEGIES = {"exhaustive": exhaustive, "random": random_search, "halving": halving, "surrogate": surrogate}
SEEDED = {"random", "halving", "surrogate"}


def get_strategy(name: str):
    try:
        return STRATEGIES[name]
    except KeyError:
        raise ValueError(f"unknown strategy {name!r}; choose from {', '.join(sorted(STRATEGIES))}") from None
