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


# strategies built on an optional extra: checked when a sweep is set up, not found missing mid-run by a worker
NEEDS = {"surrogate": ("optuna", "flytune_nb[search]")}


def get_strategy(name: str):
    try:
        strategy = STRATEGIES[name]
    except KeyError:
        raise UsageError(f"unknown strategy {name!r}; choose from {', '.join(sorted(STRATEGIES))}") from None
    if name in NEEDS:
        import importlib.util

        module, extra = NEEDS[name]
        if importlib.util.find_spec(module) is None:
            raise UsageError(f"the {name} strategy needs {module}, which is not installed: pip install '{extra}' "
                             f"(or choose another strategy: {', '.join(sorted(set(STRATEGIES) - set(NEEDS)))})")
    return strategy
