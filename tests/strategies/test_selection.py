"""The selection stage's tie band (strategies/selection.py), on replayed H200 timings with seeded noise and on
constructed timings that pin the rule down. No GPU, no process."""
import json
import math
import random
import statistics

import pytest

from flytune_nb.core.config import Config
from flytune_nb.errors import UsageError
from flytune_nb.measure.trial import Trial
from flytune_nb.strategies.selection import Rule, compare, decide, schedule, select, shortlist
from tests.conftest import FIXTURES

SWEEPS = json.loads((FIXTURES / "h200_sweeps.json").read_text())["sweeps"]


def _trial(config, p50, status="ok", fidelity="full"):
    return Trial("k", {}, "bf16", config, status, "" if status == "ok" else "replayed failure", p50, p50, p50,
                 fidelity=fidelity)


def _c(n):
    return Config({"BLOCK": n})


class Noisy:
    """A config's timing as an H200 gives it: its true p50 times lognormal noise (sigma 3%), and in 5% of the
    timings a slow burst of +10-40% (what the check's confirmation rounds are for)."""

    def __init__(self, truth, seed, sigma=0.03, burst=0.05):
        self.truth, self.rng, self.sigma, self.burst = truth, random.Random(seed), sigma, burst

    def __call__(self, config, *_):
        t = self.truth[config] * math.exp(self.rng.gauss(0, self.sigma))
        if self.rng.random() < self.burst:
            t *= 1 + self.rng.uniform(0.1, 0.4)
        return _trial(config, t)


def _search_and_select(truth, default, seed, rule=Rule()):
    """One noisy exhaustive search (one timing per config), then the selection stage on fresh noisy timings."""
    timing = Noisy(truth, seed)
    trials = [timing(c) for c in truth]
    naive = min(trials, key=lambda t: t.p50).config
    sel = select(default, shortlist(trials, default, rule), timing, rule)
    return sel, naive


def _cases(gap):
    """(truth, default) per recorded H200 sweep, the default being the config whose true p50 is nearest to
    ``gap`` x the best (the fixture records timings, not which config was the heuristic's)."""
    for sw in SWEEPS:
        truth = {Config.from_json(k): v for k, v in sw["p50_ms"].items() if v is not None}
        best = min(truth.values())
        yield truth, min(truth, key=lambda c: abs(truth[c] - gap * best))


def test_a_default_within_noise_of_the_best_survives_a_rerun_where_the_plain_minimum_does_not():
    """The problem the stage solves: on the 9 recorded H200 sweeps, with the default within 1% of the true best,
    20 noisy runs each: the stage keeps a pick within 2% of the other runs' (>= 95%: the issue's target), the
    search's plain minimum does not (it is a different config, often > 2% apart, in many runs), and no pick is ever
    truly slower than the default by more than the 2% floor."""
    stable, naive_stable, harm, runs = 0, 0, 0, 0
    for truth, default in _cases(1.01):
        picks, naives = [], []
        for seed in range(20):
            sel, naive = _search_and_select(truth, default, seed)
            picks.append(sel.winner)
            naives.append(naive)
            harm += truth[sel.winner] > 1.02 * truth[default]
        for a, b in zip(picks, picks[1:]):
            stable += abs(truth[a] / truth[b] - 1) <= 0.02
        for a, b in zip(naives, naives[1:]):
            naive_stable += abs(truth[a] / truth[b] - 1) <= 0.02
        runs += len(picks) - 1
    assert harm == 0
    assert stable / runs >= 0.95, stable / runs
    assert naive_stable / runs < 0.9 * stable / runs, (naive_stable / runs, stable / runs)


def test_a_candidate_that_is_really_faster_replaces_the_default():
    """A default 15% slower than the best: the stage picks a candidate in >= 90% of noisy runs, and what it picks
    is within 5% of the true best on average (the band never swallows a real win of that size)."""
    chose, regrets = 0, []
    for truth, default in _cases(1.15):
        for seed in range(10):
            sel, _ = _search_and_select(truth, default, seed)
            chose += not sel.chose_default
            regrets.append(truth[sel.winner] / min(truth.values()))
    assert chose / len(regrets) >= 0.9, chose / len(regrets)
    assert statistics.mean(regrets) <= 1.05, statistics.mean(regrets)


def test_the_rule_on_constructed_timings():
    rule = Rule(rounds=5)
    d, a, b = _c(1), _c(2), _c(3)
    # 5% faster every round, quiet: beyond the 2% floor
    sel = decide(d, [a], {d: [1.0] * 5, a: [0.95] * 5}, rule)
    assert sel.winner == a and sel.deciding.band == 0.02 and sel.deciding.margin == pytest.approx(0.05)
    # 1.5% faster, quiet: inside the floor, the default is kept
    assert decide(d, [a], {d: [1.0] * 5, a: [0.985] * 5}, rule).chose_default
    # 5% faster on the median, but the rounds spread +-8%: the band is 3 standard errors of that median, wider
    ratios = [0.87, 0.95, 0.95, 1.03, 0.91]
    c = compare(a, ratios, [1.0] * 5, rule)
    mad = statistics.median(abs(r - 0.95) for r in ratios)
    assert c.median == pytest.approx(0.95) and c.spread == pytest.approx(1.4826 * mad)
    assert c.band == pytest.approx(3 * 1.2533 * c.spread / math.sqrt(5)) and c.band > 0.05 and not c.qualifies
    # two slow bursts of the default in five rounds move neither the median nor the spread much: still a win
    sel = decide(d, [a], {d: [1.0, 1.3, 1.0, 1.35, 1.0], a: [0.9] * 5}, rule)
    assert sel.winner == a
    # two qualifiers: the smaller median wins
    sel = decide(d, [a, b], {d: [1.0] * 5, a: [0.9] * 5, b: [0.8] * 5}, rule)
    assert sel.winner == b and sel.summary()["margin"] == pytest.approx(0.2) and sel.summary()["repeats"] == 5


def test_the_kept_defaults_line_says_what_the_re_timing_showed():
    """Kept because the best candidate is within the band: the line names the band. Kept because the candidate is
    slower once re-timed: the line says how much slower and claims no band."""
    rule = Rule(rounds=5)
    d, a = _c(1), _c(2)
    near = decide(d, [a], {d: [1.0] * 5, a: [0.985] * 5}, rule).line()
    assert "1.5% less time than the default, inside the 2.0% band" in near, near
    slower = decide(d, [a], {d: [1.0] * 5, a: [1.16] * 5}, rule).line()
    assert "16.0% more time than the default" in slower and "band" not in slower, slower


def test_failures_when_re_timed():
    rule = Rule(rounds=3)
    d, a, b = _c(1), _c(2), _c(3)
    # a candidate that fails one round cannot win, however fast it was
    outcomes = {d: [1.0] * 3, a: [0.5, None, 0.5], b: [0.9] * 3}

    def retime(config, i):
        v = outcomes[config][i]
        return _trial(config, math.inf, "wrong") if v is None else _trial(config, v)

    sel = select(d, [a, b], retime, rule)
    assert sel.winner == b and a in sel.failed and "wrong" in sel.failed[a]
    # the default failing: the fastest candidate that did not
    outcomes = {d: [None] * 3, a: [0.5] * 3, b: [0.9] * 3}
    sel = select(d, [a, b], retime, rule)
    assert sel.winner == a and "default failed" in sel.reason


def test_an_ambiguous_winner_gets_more_rounds_once():
    """Faster than the floor but not beyond its band after 5 rounds: 5 more, decided on all 10."""
    d, a = _c(1), _c(2)
    seq = iter([0.90, 1.0, 0.99, 0.93, 0.96] + [0.96] * 5)
    calls = []

    def retime(config, i):
        calls.append((config, i))
        return _trial(config, 1.0 if config == d else next(seq))

    sel = select(d, [a], retime, Rule(rounds=5))
    assert len(calls) == 20 and sel.repeats == 10
    assert [i for c, i in calls if c == a] == list(range(10))
    calls.clear()
    seq = iter([0.90, 1.0, 0.99, 0.93, 0.96])
    assert select(d, [a], retime, Rule(rounds=5, extend=False)).repeats == 5 and len(calls) == 10


def test_shortlist_and_schedule():
    d = _c(0)
    trials = [_trial(d, 1.0), _trial(_c(1), 0.8), _trial(_c(2), 0.81), _trial(_c(3), 0.85), _trial(_c(4), 0.9),
              _trial(_c(5), 1.1), _trial(_c(6), 0.5, "wrong"), _trial(_c(7), 0.7, fidelity="quick")]
    # the fastest distinct binaries faster than the default; failures and quick timings never
    assert shortlist(trials, d, Rule(top=3)) == [_c(1), _c(2), _c(3)]
    # c2 is c1's twin, c4 the default's: one measurement each
    twins = {_c(2): _c(1), _c(4): d}
    assert shortlist(trials, d, Rule(top=3), lambda c: twins.get(c, c)) == [_c(1), _c(3)]
    assert shortlist([_trial(d, 0.5)] + trials[1:], d, Rule()) == []  # nothing beat the default
    # every contender once per round, the order rotated by one each round
    assert schedule(["d", "a", "b"], 3) == [(0, "d"), (0, "a"), (0, "b"), (1, "a"), (1, "b"), (1, "d"),
                                           (2, "b"), (2, "d"), (2, "a")]


def test_no_candidates_means_no_timing_and_the_default():
    sel = select(_c(1), [], lambda c, i: pytest.fail("timed"), Rule())
    assert sel.chose_default and sel.repeats == 0 and "no candidate" in sel.reason
    with pytest.raises(UsageError, match="top >= 0"):
        Rule(rounds=0)
    with pytest.raises(UsageError, match="at most 1000, got rounds=100000000000000000000"):
        Rule(rounds=10**20)  # a sweep that would never end, refused before it starts
    assert Rule(rounds=1000, top=1000).rounds == 1000
