"""Strategies on replayed timings: a real H200 sweep (tests/fixtures/h200_sweeps.json), no GPU needed."""
import json
import math

import pytest

from flytune_nb.core.config import Config
from flytune_nb.measure.trial import Trial
from flytune_nb.strategies import exhaustive, halving, random_search, surrogate
from tests.conftest import FIXTURES

FIXTURE = json.loads((FIXTURES / "h200_sweeps.json").read_text())
SWEEPS = FIXTURE["sweeps"]


class Replay:
    """evaluate(config, fidelity) from recorded p50s. Quick timings get a deterministic +-4% error, about what an
    eighth of the timing budget costs in precision."""

    def __init__(self, sweep):
        self.p50 = {Config.from_json(k): v for k, v in sweep["p50_ms"].items()}
        self.calls = []

    @property
    def space(self):
        return list(self.p50)

    @property
    def true_best(self):
        return min(v for v in self.p50.values() if v is not None)

    def __call__(self, config, fidelity="full"):
        self.calls.append((config, fidelity))
        p = self.p50[config]
        if p is None:
            return Trial("k", {}, "bf16", config, "compile_error", "replayed failure", fidelity=fidelity)
        if fidelity == "quick":
            p *= 1 + 0.04 * math.sin(hash(str(config)) % 1000)
        return Trial("k", {}, "bf16", config, "ok", p20=p, p50=p, p80=p, fidelity=fidelity)


def _best(trials):
    full = [t for t in trials if t.ok and t.fidelity == "full"]
    return min(t.p50 for t in full)


def test_fixture_is_a_real_h200_sweep():
    assert FIXTURE["device"] == "NVIDIA_H200" and FIXTURE["arch"] == "sm_90" and len(SWEEPS) >= 8
    assert all(len(s["p50_ms"]) >= 47 for s in SWEEPS)


@pytest.mark.parametrize("sweep", SWEEPS, ids=lambda s: f"{s['kernel']}-{s['shape']['M']}x{s['shape']['N']}")
def test_exhaustive_finds_the_true_best(sweep):
    r = Replay(sweep)
    trials = exhaustive(r.space, r)
    assert len(r.calls) == len(r.space) and _best(trials) == r.true_best


def test_random_respects_budget_is_seeded_and_never_repeats():
    r = Replay(SWEEPS[0])
    a = random_search(r.space, r, budget=10, seed=7)
    assert len(a) == 10 == len({t.config for t in a})
    r2 = Replay(SWEEPS[0])
    b = random_search(r2.space, r2, budget=10, seed=7)
    assert [t.config for t in a] == [t.config for t in b]
    r3 = Replay(SWEEPS[0])
    assert [t.config for t in random_search(r3.space, r3, budget=10, seed=8)] != [t.config for t in a]


@pytest.mark.parametrize("sweep", SWEEPS, ids=lambda s: f"{s['kernel']}-{s['shape']['M']}x{s['shape']['N']}")
def test_halving_times_all_quickly_then_the_top_quarter_fully(sweep):
    r = Replay(sweep)
    trials = halving(r.space, r, eta=4)
    quick = [c for c, f in r.calls if f == "quick"]
    full = [c for c, f in r.calls if f == "full"]
    assert len(quick) == len(r.space) and len(full) == math.ceil(len(r.space) / 4)
    # With +-4% quick noise the true best survives the cut, or the survivor found is within 4% of it.
    assert _best(trials) <= 1.04 * r.true_best


def test_surrogate_gets_close_with_a_third_of_the_evaluations():
    """Geomean over the recorded shapes: within 3% of the exhaustive best using 1/3 of the evaluations.
    (The issue's target, within 2% using 10% on a >= 500-config GEMM space, needs the GEMM kernel.)"""
    ratios, used = [], []
    for sweep in SWEEPS:
        r = Replay(sweep)
        budget = len(r.space) // 3
        trials = surrogate(r.space, r, budget=budget, seed=0)
        assert len(trials) == budget == len({t.config for t in trials})  # distinct evaluations, exactly the budget
        ratios.append(_best(trials) / r.true_best)
        used.append(budget / len(r.space))
    geomean = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
    assert geomean <= 1.03, (geomean, ratios)


def test_surrogate_beats_random_at_the_same_budget_on_average():
    s_ratios, r_ratios = [], []
    for sweep in SWEEPS:
        budget = len(sweep["p50_ms"]) // 5
        for seed in range(3):
            r = Replay(sweep)
            s_ratios.append(_best(surrogate(r.space, r, budget=budget, seed=seed)) / r.true_best)
            r = Replay(sweep)
            r_ratios.append(_best(random_search(r.space, r, budget=budget, seed=seed)) / r.true_best)
    gm = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))  # noqa: E731
    assert gm(s_ratios) <= gm(r_ratios) * 1.01, (gm(s_ratios), gm(r_ratios))


GEMM = json.loads((FIXTURES / "h200_gemm_sweeps.json").read_text())


def test_surrogate_finds_near_best_at_a_tenth_of_the_replayed_h200_gemm_spaces():
    """The surrogate's target (best within a few % at a tenth of the evaluations), on the real thing replayed: exhaustive H200 matmul sweeps (N=K=4096, M=256/1024/4096,
    618/932/1126 configs), 10% of the evaluations, the sweep's default seed: within 2% of the exhaustive best,
    geomean over the shapes. Random search at the same budget is the control (it does not make it on these)."""
    assert GEMM["device"] == "NVIDIA_H200" and all(len(s["p50_ms"]) >= 500 for s in GEMM["sweeps"])
    s_ratios, r_ratios = [], []
    for sweep in GEMM["sweeps"]:
        r = Replay(sweep)
        budget = round(0.10 * len(r.space))
        trials = surrogate(r.space, r, budget=budget, seed=0)
        assert len(trials) == budget == len({t.config for t in trials})
        s_ratios.append(_best(trials) / r.true_best)
        r = Replay(sweep)
        r_ratios.append(_best(random_search(r.space, r, budget=budget, seed=0)) / r.true_best)
    gm = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))  # noqa: E731
    assert gm(s_ratios) <= 1.02, s_ratios
    assert gm(s_ratios) < gm(r_ratios), (s_ratios, r_ratios)


def test_a_warm_start_from_a_neighbouring_shapes_winner_helps_a_small_budget():
    """explore(warm=...) on the replayed H200 GEMM sweeps: each shape first measures the exhaustive winner of a
    neighbouring M (256 <-> 1024 <-> 4096), and the surrogate is told every trial measured before it. At 12
    evaluations (~1% of the space) over 8 seeds and 4 pairs the best found is closer to the true best than a cold
    start's (replayed: 1.097x against 1.150x geomean), and the budget is never exceeded."""
    from flytune_nb.strategies.loop import explore

    sweeps = GEMM["sweeps"]

    def winner(sweep):
        r = Replay(sweep)
        return min((c for c in r.space if r.p50[c] is not None), key=lambda c: r.p50[c])

    cold, warm = [], []
    for target, neighbour in ((1, 0), (2, 1), (0, 1), (1, 2)):
        for seed in range(8):
            for warm_configs, out in (((), cold), ((winner(sweeps[neighbour]),), warm)):
                r = Replay(sweeps[target])
                strategy = lambda s, e, b, **kw: surrogate(s, e, b, seed=seed, **kw)  # noqa: E731
                explore(r.space[0], r.space, r, strategy, 12, warm=warm_configs)
                measured = [c for c, _ in r.calls]
                assert len(measured) == len(set(measured)) == 12
                if warm_configs and warm_configs[0] in r.p50 and warm_configs[0] != r.space[0]:
                    assert measured[1] == warm_configs[0]  # right after the default
                out.append(min(r.p50[c] for c in measured if r.p50[c] is not None) / r.true_best)
    gm = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))  # noqa: E731
    assert gm(warm) < gm(cold), (gm(warm), gm(cold))


def test_the_surrogate_is_told_what_was_measured_before_it():
    """Trials handed in as ``known`` are never measured again and count toward TPE's start-up: on the replayed
    GEMM sweep, a known set holding the space's true best leaves the best found at the true best."""
    r = Replay(GEMM["sweeps"][1])
    best = min((c for c in r.space if r.p50[c] is not None), key=lambda c: r.p50[c])
    known = [r(best)]
    r.calls.clear()
    rest = [c for c in r.space if c != best]
    trials = surrogate(rest, r, budget=10, seed=0, known=known)
    assert best not in {c for c, _ in r.calls} and len(trials) == 10
    assert min([t.p50 for t in trials if t.ok] + [known[0].p50]) == r.true_best


def test_a_strategy_whose_extra_is_missing_is_one_line_before_the_sweep(monkeypatch, capsys, tmp_path):
    """Without optuna (the `search` extra) a surrogate sweep stops at set-up with the install line, exit 2, and
    writes no store; before, the ImportError came from inside the running sweep."""
    import importlib.util

    from flytune_nb.strategies import get_strategy
    from flytune_nb.ui.cli import main

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "optuna" else real(name, *a))
    with pytest.raises(ValueError, match=r"the surrogate strategy needs optuna, which is not installed: "
                                         r"pip install 'flytune_nb\[search\]'"):
        get_strategy("surrogate")
    assert get_strategy("random") is random_search  # the others need nothing extra
    db = tmp_path / "s.db"
    assert main(["sweep", "rmsnorm", "--grid", "M=1 N=64", "--dtype", "fp32", "--strategy", "surrogate",
                 "--db", str(db), "--no-isolate"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "needs optuna" in err and "exhaustive, halving, random" in err, err
    assert not db.exists()
