"""Search strategies. Each is one function ``search(space, evaluate, budget) -> list[Trial]``.

``evaluate(config)`` measures one config and returns its Trial (``score`` is inf for anything that failed);
``budget`` caps the number of evaluations (None: no cap). Strategies never touch a GPU themselves, which is what lets
them be tested on replayed timings.
"""
from .exhaustive import exhaustive

STRATEGIES = {"exhaustive": exhaustive}


def get_strategy(name: str):
    try:
        return STRATEGIES[name]
    except KeyError:
        raise ValueError(f"unknown strategy {name!r}; choose from {', '.join(sorted(STRATEGIES))}") from None
