"""The grid preview's time estimate: what a sweep costs beside its trials' own compile and timing."""
from flytune_nb.analysis.estimate import START_S, estimate, trial_seconds
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
    assert abs(est.seconds(65, 2) - (START_S[kind] + 2 * stage + 65 * est.per_trial_s)) < 1e-9
    said = est.describe(65, 2)
    assert f"{START_S[kind]:.2g} s to start the worker" in said and "s a shape re-timing its pick" in said
    assert est.seconds(0, 0) == 0  # nothing to run: nothing to start


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
