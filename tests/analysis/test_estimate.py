"""The grid preview's time estimate: what a sweep costs beside its trials' own compile and timing, and how a trial's
time is carried from the stored shapes to the grid's."""
import json
import math
import random

import pandas as pd
import pytest

from flytune_nb.analysis.estimate import START_S, estimate, trial_seconds, work_of
from flytune_nb.core.registry import get_kernel
from flytune_nb.core.device import current_device
from flytune_nb.engine.store import Store
from flytune_nb.engine.sweep import Sweep


def test_the_estimate_counts_the_sweeps_start_and_each_shapes_re_timing_beside_its_trials(tmp_path):
    """On the interpreter a preview of 65 trials at 0.02 s said "~1 s" for a Run that took 4.1 s: the worker's start
    (~2 s) and each shape's selection rounds were left out. Both are in the estimate, and the line says so."""
    db = tmp_path / "e.db"
    Sweep("rmsnorm", "M=2 N=256", ["fp32"], db=db, isolate=False, baselines=()).run()
    store = Store(db)
    dev = current_device()
    est = estimate(store, "rmsnorm", dev.name, dev.is_gpu)
    kind = "gpu" if dev.is_gpu else "interpreter"
    retimes = store.frame("rmsnorm", table="retimes")
    stage = sum(trial_seconds(0.0, p, r, dev.is_gpu) for p, r in zip(retimes["p50"], retimes["reps"]))
    assert len(retimes) and stage > 0  # the interpreter's rule re-timed the shape's best against its default
    assert est.start_s == START_S[kind] and abs(est.per_shape_s - stage) < 1e-9
    plan = [({"M": 2, "N": 256}, "fp32", 30), ({"M": 2, "N": 256}, "fp16", 35)]  # the stored size: nothing scaled
    assert est.seconds(plan) == pytest.approx((START_S[kind] + 2 * stage + 65 * est.per_trial_s,) * 2, rel=1e-9)
    said = est.describe(plan)
    assert f"{START_S[kind]:.2g} s to start the worker" in said and "s a shape re-timing its pick" in said
    assert est.seconds([]) == (0, 0)  # nothing to run: nothing to start


def test_a_shape_decided_again_by_a_later_run_counts_one_stage_not_two(tmp_path):
    """Retimes are appended: a second run that decides the same shape again (here: asked to re-time one more
    candidate) leaves the first run's rows beside its own. A shape's re-timing cost is one stage's, not the sum."""
    db = tmp_path / "e.db"
    Sweep("rmsnorm", "M=2 N=256", ["fp32"], db=db, isolate=False, baselines=()).run()
    Sweep("rmsnorm", "M=2 N=256", ["fp32"], db=db, isolate=False, baselines=(), selection={"top": 2, "rounds": 3}).run()
    store = Store(db)
    dev = current_device()
    retimes = store.frame("rmsnorm", table="retimes")
    stages = [sum(trial_seconds(0.0, p, r, dev.is_gpu) for p, r in zip(g["p50"], g["reps"]))
              for _, g in retimes.groupby("run_id")]
    assert len(stages) == 2, retimes[["run_id", "round", "config"]]
    est = estimate(store, "rmsnorm", dev.name, dev.is_gpu)
    assert min(stages) - 1e-9 <= est.per_shape_s <= max(stages) + 1e-9 < sum(stages)


class _Stored:
    """A store's trials frame, each trial's time given as its compile_s (no timed reps), no selection stages."""

    def __init__(self, times: dict, dtype: str = "fp32") -> None:
        self.df = pd.DataFrame([{"device": "dev", "shape": json.dumps(shape), "dtype": dtype, "compile_s": t,
                                 "p50": math.nan, "reps": 3} for shape, ts in times for t in ts])

    def frame(self, kernel, table="trials"):
        return self.df if table == "trials" else pd.DataFrame()


def _times(m, n, t):
    return ({"M": m, "N": n}, [t * f for f in (0.9, 1.0, 1.1)])  # the shape's median is t


def test_a_trial_is_scaled_from_the_nearest_stored_size_by_the_slope_fitted_over_them():
    """rmsnorm's flops grow with M: times stored at three sizes on t = c M^b are carried to the grid's larger shapes
    as c M^b, and the line says it extrapolated, by how much, from which sizes."""
    spec = get_kernel("rmsnorm")
    c, b, n = random.uniform(0.01, 0.1), random.uniform(0.2, 0.9), random.choice((256, 1024))
    store = _Stored([_times(m, n, c * m ** b) for m in (1, 2, 4)])
    est = estimate(store, "rmsnorm", "dev", False, work=work_of(spec))
    assert est.trials.slope == pytest.approx(b)
    big = random.choice((16, 32, 64))
    plan = [({"M": big, "N": n}, "fp32", 20), ({"M": 2, "N": n}, "fp32", 7)]
    want = START_S["interpreter"] + 20 * c * big ** b + 7 * c * 2 ** b
    assert est.seconds(plan) == pytest.approx((want, want))
    said = est.describe(plan)
    assert f"scaled as FLOPs^{b:.2f}, fitted over 3 stored sizes (M=1 N={n} fp32 to M=4 N={n} fp32)" in said
    assert f"extrapolated: the grid's largest shape has {big / 4:.3g}x the FLOPs of the largest measured" in said
    inside = [({"M": 2, "N": n}, "fp32", 5)]  # a stored size: its own time, nothing extrapolated
    assert est.seconds(inside)[0] == pytest.approx(START_S["interpreter"] + 5 * c * 2 ** b)
    assert "extrapolated" not in est.describe(inside)


def test_one_stored_size_gives_a_range_not_a_guessed_slope():
    """From one size the growth is unknown: the estimate runs from not growing to growing in proportion to work,
    and says so; a grid of that size alone is one number."""
    spec = get_kernel("rmsnorm")
    t, m, n = random.uniform(0.01, 0.1), random.choice((1, 2)), random.choice((256, 512))
    est = estimate(_Stored([_times(m, n, t)]), "rmsnorm", "dev", False, work=work_of(spec))
    k = random.choice((8, 16, 32))
    lo, hi = est.seconds([({"M": m * k, "N": n}, "fp32", 10)])
    start = START_S["interpreter"]
    assert lo == pytest.approx(start + 10 * t) and hi == pytest.approx(start + 10 * t * k)
    said = est.describe([({"M": m * k, "N": n}, "fp32", 10)])
    assert f"at the one size measured, M={m} N={n} fp32" in said and f"span {k:.3g}x to {k:.3g}x its FLOPs" in said
    assert "from not growing to growing in proportion" in said and " to ~" in said
    same = est.seconds([({"M": m, "N": n}, "fp32", 10)])
    assert same[0] == same[1] == pytest.approx(START_S["interpreter"] + 10 * t)


def test_without_a_work_model_the_estimate_is_not_scaled_and_says_so():
    t = random.uniform(0.01, 0.1)
    est = estimate(_Stored([_times(1, 256, t), _times(64, 256, 40 * t)]), "k", "dev", False, work=None)
    plan = [({"M": 128, "N": 256}, "fp32", 4)]
    assert est.seconds(plan)[0] == pytest.approx(START_S["interpreter"] + 4 * est.per_trial_s)
    assert "not scaled with shape size: the kernel declares neither flops nor bytes" in est.describe(plan)
    guess = estimate(None, "k", "dev", False, work=None)
    assert "a guess: nothing measured yet for this kernel here" in guess.describe(plan)


def test_a_stage_whose_every_re_timing_failed_adds_nothing_and_the_rest_still_scale():
    """A selection stage whose contenders all failed their re-timings (p50 NULL) took no timed time: it is no point
    of the stages' fit (its 0 s has no logarithm), and the stage that ran is scaled as any other."""
    spec = get_kernel("rmsnorm")

    class Store_(_Stored):
        def frame(self, kernel, table="trials"):
            if table == "trials":
                return self.df
            return pd.DataFrame([{"device": "dev", "round": 0, "key": k, "run_id": "r", "dtype": "fp32",
                                  "shape": json.dumps({"M": m, "N": 256}), "p50": p, "reps": 3}
                                 for k, m, p in (("a", 1, math.nan), ("b", 4, 0.5))])

    est = estimate(Store_([_times(1, 256, 0.1), _times(4, 256, 0.4)]), "rmsnorm", "dev", False, work=work_of(spec))
    stage = trial_seconds(0.0, 0.5, 3, False)
    plan = [({"M": 16, "N": 256}, "fp32", 5)]
    lo, hi = est.seconds(plan)
    assert est.per_shape_s == pytest.approx(stage)
    assert lo == pytest.approx(START_S["interpreter"] + 5 * 0.1 * 16 + stage)
    assert hi == pytest.approx(START_S["interpreter"] + 5 * 0.1 * 16 + stage * 4)  # one stage size: a range
    assert "s a shape re-timing its pick" in est.describe(plan)


def test_sizes_too_close_for_a_slope_are_not_called_one_size():
    """Two stored sizes 1.25x apart in work leave the slope to timing noise, so a range is given as for one size; the
    line says how many sizes there are and why they give no slope, not that one size was measured."""
    spec = get_kernel("rmsnorm")
    est = estimate(_Stored([_times(4, 256, 0.1), _times(5, 256, 0.12)]), "rmsnorm", "dev", False,
                   work=work_of(spec))
    plan = [({"M": 64, "N": 256}, "fp32", 10)]
    lo, hi = est.seconds(plan)
    assert lo == pytest.approx(START_S["interpreter"] + 10 * 0.12)
    assert hi == pytest.approx(START_S["interpreter"] + 10 * 0.12 * 64 / 5)
    said = est.describe(plan)
    assert "one size" not in said and "a second size" not in said, said
    assert "at M=5 N=256 fp32, the nearest of 2 stored sizes within 1.5x of each other in FLOPs" in said, said
