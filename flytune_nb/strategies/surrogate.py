"""Surrogate search with Optuna's TPE sampler (a tree-structured Parzen estimator), not a home-made optimiser.

Every knob of the space (BLOCK_N, num_warps, ...) becomes an integer parameter over the index of its sorted values: the
knobs are ordinal (tile sizes, warps and stages are powers of two or small counts, and the latency surface is smooth
along them), and an ordinal parameter lets TPE's Parzen estimator carry what it learned to the neighbouring values,
which a categorical one does not. Replayed on the H200's exhaustive matmul sweeps (618-1126 configs) at 10% of the
evaluations, the best found is 1.005x the exhaustive best (10 seeds; geomean of 3 shapes,
benchmarks/results/NVIDIA_H200/surrogate_gemm.md) against 1.031x with categorical knobs (5 seeds), and on the row
kernels' fixture 1.004x against 1.009x at a third of the evaluations. A combination that is not in the pruned space is told to the sampler as a failure
and costs no evaluation; a repeat is answered from memory. After ``budget`` distinct evaluations it stops. The first
quarter of the budget is random start-up, as TPE needs; trials measured before the search (``known``: the
heuristic default, a shipped entry, neighbouring shapes' winners) are told to the sampler first and count toward
that start-up, so its model begins where they are instead of at 5 random draws of a 1920-config MoE space.
"""
from __future__ import annotations

import math
import random as _random
from typing import Callable, Sequence

PENALTY = 1e9  # what a failing config scores for the sampler (TPE wants finite values)


def surrogate(space: Sequence, evaluate: Callable, budget: int | None = None, seed: int = 0,
              known: Sequence = ()) -> list:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = list(space)
    n = len(space) if budget is None else min(len(space), max(0, int(budget)))
    if n == 0:
        return []
    dicts = [c.to_dict() for c in space]
    knobs = sorted({k for d in dicts for k in d})
    # an absent knob (an optional one such as BLOCK_M, an unset waves_per_eu) means the kernel's smallest setting
    choices = {k: sorted({d.get(k) for d in dicts}, key=lambda v: (v is not None, v)) for k in knobs}
    by_combo = {tuple(d.get(k) for k in knobs): c for d, c in zip(dicts, space)}
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=max(3, n // 4), multivariate=True)
    study = optuna.create_study(direction="minimize", sampler=sampler)
    distributions = {k: optuna.distributions.IntDistribution(0, len(v) - 1) for k, v in choices.items() if len(v) > 1}
    for trial in known:  # measured already (not counted in ``budget``): the sampler learns from them
        d = trial.config.to_dict()
        try:
            params = {k: choices[k].index(d.get(k)) for k in distributions}
        except ValueError:  # a knob value outside this space (an explicit default): nothing to place it at
            continue
        if any(d.get(k) != choices[k][0] for k in choices if k not in distributions):
            continue
        score = trial.score
        study.add_trial(optuna.trial.create_trial(params=params, distributions=distributions,
                                                  value=score if math.isfinite(score) else PENALTY))
    seen: dict = {}
    out = []
    for _ in range(50 * n):  # bounded: proposals outside the space are cheap but must not loop forever
        if len(out) >= n:
            break
        t = study.ask()
        combo = tuple(choices[k][t.suggest_int(k, 0, len(choices[k]) - 1)] if len(choices[k]) > 1 else choices[k][0]
                      for k in knobs)
        config = by_combo.get(combo)
        if config is None:
            study.tell(t, state=optuna.trial.TrialState.FAIL)
            continue
        if config not in seen:
            seen[config] = evaluate(config)
            out.append(seen[config])
        score = seen[config].score
        study.tell(t, score if math.isfinite(score) else PENALTY)
    rest = [c for c in space if c not in seen]  # the sampler got stuck (tiny space): fill the budget at random
    for c in _random.Random(seed).sample(rest, min(len(rest), n - len(out))):
        out.append(evaluate(c))
    return out
