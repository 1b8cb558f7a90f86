"""The search loop for one shape: the heuristic default first, then a strategy over the rest of the space, and the
result (every trial, the best, the default's standing)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Sequence

from flytune_nb.core.config import Config
from flytune_nb.core.device import DeviceInfo
from flytune_nb.core.events import Emitter, ShapeDone, TrialDone, TrialFailed, TrialStarted
from flytune_nb.errors import RunError
from flytune_nb.measure.trial import Trial, evaluate


class NoValidConfig(RunError):
    """Every candidate failed; the message lists why, and points at the untuned path."""


@dataclass
class SearchResult:
    kernel: str
    shape: dict
    dtype: str
    device: DeviceInfo
    default: Config
    trials: list = field(default_factory=list)

    baselines: dict = field(default_factory=dict)  # name -> {"status", "p50", ...}: torch_eager, torch_compile
    stopped: bool = False
    named: dict = field(default_factory=dict)  # label -> Config: the spec's named_configs, measured after the default
    # The selection stage's decision (strategies/selection.py: the shortlist re-timed, the tie band), when it ran
    selection: object = None

    @property
    def named_trials(self) -> dict:
        """label -> the full-fidelity Trial of that named config (None if it was not measured: a stopped sweep)."""
        return {label: next((t for t in self.trials if t.config == c and t.fidelity == "full"), None)
                for label, c in self.named.items()}

    @property
    def best(self) -> Trial | None:
        """Fastest correct trial; full-fidelity timings win over quick ones (successive halving's first round)."""
        ok = [t for t in self.trials if t.ok and t.fidelity == "full"] or [t for t in self.trials if t.ok]
        return min(ok, key=lambda t: t.p50) if ok else None

    @property
    def pick(self) -> Trial | None:
        """The trial of the config this shape's winner is: the selection's when the stage ran (the default unless
        a candidate beat it beyond the tie band), else the fastest (``best``).

        A winner whose search trial failed but which passed every selection round (a default that failed once in the
        search) is still the winner: the rounds vouch for it, as an export takes it, and the search's fastest is the
        candidate the selection turned down. Only a winner that failed its rounds too falls back to ``best``."""
        if self.selection is None:
            return self.best
        w = self.selection.winner
        full = [t for t in self.trials if t.config == w and t.fidelity == "full"]
        ok = next((t for t in full if t.ok), None)
        if ok is not None:
            return ok
        if full and w not in self.selection.failed:
            return full[0]
        return self.best

    @property
    def default_trial(self) -> Trial | None:
        return next((t for t in self.trials if t.config == self.default and t.fidelity == "full"), None)

    def time_of(self, config) -> float:
        """``config``'s latency (ms) as this result knows it best, every config on one footing: the median of its
        re-timed rounds where the selection stage timed it (unbiased: the search's fastest of many noisy timings is
        low by its luck); inf where it failed a round (a config that fails now and then is a loss); else its search
        p50 (the quick round's where it passed no full one), scaled by the default's re-timed / search ratio where
        both exist, so that a config never re-timed is not compared on another clock (re-timing with fresh inputs
        reads a few percent off the search). inf where it failed, nan where it was never measured."""
        sel = self.selection
        if sel is not None and config in sel.failed:
            return math.inf
        if sel is not None and config in sel.timings:
            t = sel.p50(config)
            if math.isfinite(t):
                return t
        t = self._search_p50(config)
        if sel is not None and math.isfinite(t) and config != self.default:
            d_search, d_rounds = self._search_p50(self.default), self.time_of(self.default)
            if math.isfinite(d_search) and math.isfinite(d_rounds) and d_search > 0:
                t *= d_rounds / d_search
        return t

    def _search_p50(self, config) -> float:
        full = [t for t in self.trials if t.config == config and t.fidelity == "full"]
        if full:
            return full[0].p50 if full[0].ok else math.inf
        quick = [t for t in self.trials if t.config == config and t.ok]
        return quick[0].p50 if quick else math.nan

    @property
    def pick_ms(self) -> float:
        """The pick's latency (``time_of``), nan when nothing passed."""
        p = self.pick
        return self.time_of(p.config) if p is not None else math.nan

    @property
    def default_ms(self) -> float:
        return self.time_of(self.default)

    @property
    def speedup(self) -> float:
        """default / pick, each timed as ``time_of`` says: 1.0 where the selection kept the default, the re-timed
        ratio where a candidate beat it. A shape's searched fastest whose lead did not survive re-timing gives no
        speed-up: what an export ships, and a user gets, is the pick. nan where the default failed or nothing
        passed."""
        p, d = self.pick, self.default_ms
        if p is None or not math.isfinite(d):
            return math.nan
        return 1.0 if p.config == self.default else d / self.time_of(p.config)

    @property
    def search_speedup(self) -> float:
        """default p50 / best p50 as the search timed each once (>= 1 when it found something faster), before any
        re-timing: the search's view, which the selection stage then checks."""
        b, d = self.best, self.default_trial
        if b is None or d is None or not d.ok:
            return math.nan
        return d.p50 / b.p50

    def require_best(self) -> Trial:
        if self.best is None:
            reasons = sorted({f"{t.status}: {t.reason}" for t in self.trials})[:5]
            raise NoValidConfig(
                f"{self.kernel} {self.shape} {self.dtype}: none of {len(self.trials)} configs passed "
                f"({'; '.join(reasons)}). Try the untuned path: spec.run(inputs, spec.default(shape, dtype, device)).")
        return self.best


def on_footing(trial: Trial, default_then: float, default_now: float) -> Trial:
    """``trial``, timed beside a default that read ``default_then`` ms, on the clock of a timing of the same default
    that read ``default_now`` (its times scaled by now / then): a config timed minutes later under another load (4x
    on a busy CPU) is compared with the search's by its ratio to the default, which the load leaves. Unscaled where
    it failed or either default timing is not a time (a failed or missing default)."""
    f = default_now / default_then if 0 < default_then < math.inf and 0 < default_now < math.inf else math.nan
    if not trial.ok or not math.isfinite(f) or f == 1.0:
        return trial
    return replace(trial, p20=trial.p20 * f, p50=trial.p50 * f, p80=trial.p80 * f)


def search(spec, shape: dict, dtype: str, device: DeviceInfo, timer, *, configs: Sequence[Config] | None = None,
           strategy: Callable | None = None, budget: int | None = None, inputs: dict | None = None,
           restore: bool = True, listener: Callable | None = None) -> SearchResult:
    """Search ``spec``'s space for one shape. The heuristic default is always measured too (first), so every result
    can say how far the heuristic is from the best."""
    from flytune_nb.strategies.exhaustive import exhaustive

    shape = spec.check_shape(shape)
    dtype = spec.check_dtype(dtype)
    default = spec.default(shape, dtype, device)
    space = configs if configs is not None else spec.configs(shape, dtype, device)
    emit = listener if isinstance(listener, Emitter) else Emitter([listener] if listener else [])
    result = SearchResult(spec.name, shape, dtype, device, default, named=spec.named(shape, dtype, device))
    total = planned(space, default, budget, result.named.values())

    def run_one(config: Config, fidelity: str = "full") -> Trial:
        i = len(result.trials)
        emit(TrialStarted(spec.name, shape, dtype, config, i, total))
        trial = evaluate(spec, shape, dtype, config, device, timer, inputs=inputs, restore=restore)
        result.trials.append(trial)
        emit((TrialDone if trial.ok else TrialFailed)(spec.name, trial, i, total, result.best))
        return trial

    explore(default, space, run_one, strategy or exhaustive, budget, result.named.values())
    emit(ShapeDone(spec.name, result))
    return result


def planned(space: Sequence[Config], default: Config, budget: int | None, named: Iterable[Config] = ()) -> int:
    first = list(dict.fromkeys([default, *named]))
    n = len(set(space) | set(first))
    return n if budget is None else min(n, max(len(first), budget))


def explore(default: Config, space: Sequence[Config], evaluate: Callable, strategy: Callable,
            budget: int | None, named: Iterable[Config] = (), warm: Iterable[Config] = ()) -> None:
    """The heuristic default is always measured first (so every result can say how far it is from the best), then
    the named configs (SGLang's shipped entry, ...), then ``warm`` (the winners of neighbouring shapes: see
    Sweep's ``warm_start``) as far as the budget allows; the strategy then searches the rest of the space with what
    is left of the budget. The named configs count against the budget but are measured even past it. A strategy
    that takes ``known`` (the surrogate) is told every trial measured before it, so its model starts from them."""
    first = list(dict.fromkeys([default, *named]))
    known = [evaluate(config) for config in first]
    left = None if budget is None else max(0, budget - len(first))
    in_space = set(space)
    warm = [c for c in dict.fromkeys(warm) if c in in_space and c not in first][:left]
    known += [evaluate(config) for config in warm]
    rest = [c for c in dict.fromkeys(space) if c not in first and c not in warm]
    left = None if left is None else left - len(warm)
    if _takes_known(strategy):
        strategy(rest, evaluate, left, known=known)
    else:
        strategy(rest, evaluate, left)


def _takes_known(strategy: Callable) -> bool:
    import inspect

    try:
        params = inspect.signature(strategy).parameters
    except (TypeError, ValueError):  # a builtin or a C callable: the plain three-argument call
        return False
    return "known" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())

