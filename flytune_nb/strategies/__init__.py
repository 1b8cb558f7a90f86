"""Search strategies. Each is one function ``search(space, evaluate, budget, **options) -> list[Trial]``.

``evaluate(config, fidelity="full")`` measures one config and returns its Trial (``score`` is inf for anything that
failed); ``budget`` caps the number of evaluations (None: no cap). Strategies never touch a GPU themselves, which is
what lets them be tested on replayed timings.
"""
from flytune_nb.errors import UsageError
from flytune_nb.strategies.exhaustive import exhaustive
from flytune_nb.strategies.halving import halving
from flytune_nb.strategies.random import random_search
from flytune_nb.strategies.surrogate import surrogate

STRATEGIES = {"exhaustive": exhaustive, "random": random_search, "halving": halving, "surrogate": surrogate}
SEEDED = {"random", "halving", "surrogate"}


def get_strategy(name: str):
    try:
        return STRATEGIES[name]
    except KeyError:
        raise UsageError(f"unknown strategy {name!r}; choose from {', '.join(sorted(STRATEGIES))}") from None
