"""A spec's named_configs: measured right after the default, in the budget but never cut by it, kept by label in
the result, in-process search and the sweep engine alike (the workbench shows them beside the heuristic and the
best)."""
import dataclasses

from flytune_nb.core.registry import get_kernel
from flytune_nb.engine.sweep import Sweep
from flytune_nb.strategies.loop import search
from tests.conftest import PLUGINS


def _with_named(spec, pick):
    def named(shape, dtype, device):
        return pick(spec.configs(shape, dtype, device), spec.default(shape, dtype, device))

    return dataclasses.replace(spec, named_configs=named)


def test_named_configs_are_measured_after_the_default_and_kept(dev, cpu_timer):
    toy = get_kernel("toy", [PLUGINS])
    shape = {"N": 100}
    space = toy.configs(shape, "fp32", dev)
    default = toy.default(shape, "fp32", dev)
    other = next(c for c in space if c != default and c["MODE"] == 0)  # MODE 0 is the toy's correct mode
    spec = _with_named(toy, lambda sp, d: {"engine": other, "same as default": d})
    r = search(spec, shape, "fp32", dev, cpu_timer, budget=3)
    assert r.named == {"engine": other}  # one naming the default itself is the default: not measured twice
    assert [t.config for t in r.trials[:2]] == [default, other] and len(r.trials) == 3
    assert r.named_trials["engine"] is r.trials[1] and r.named_trials["engine"].ok
    one = search(spec, shape, "fp32", dev, cpu_timer, budget=1)
    assert [t.config for t in one.trials] == [default, other]  # past the budget: always measured
    plain = search(toy, shape, "fp32", dev, cpu_timer, budget=3)
    assert plain.named == {} and plain.named_trials == {} and len(plain.trials) == 3
    from flytune_nb.ui.report import summary_table

    head = summary_table([r]).splitlines()[0]
    assert "engine p50" in head and "engine p50" not in summary_table([plain])  # the CLI's summary shows them


def test_the_sweep_engine_measures_and_keeps_them_too(tmp_path, dev):
    toy = get_kernel("toy", [PLUGINS])
    spec = _with_named(toy, lambda sp, d: {"engine": next(c for c in sp if c != d and c["MODE"] == 0)})
    [r] = Sweep(spec, "N=100", ["fp32"], db=tmp_path / "r.db", isolate=False, budget=2, baselines=()).run()
    want = spec.named({"N": 100}, "fp32", dev)
    assert r.named == want and r.trials[1].config == want["engine"] and len(r.trials) == 2
    # a re-run replays both from the store
    [again] = Sweep(spec, "N=100", ["fp32"], db=tmp_path / "r.db", isolate=False, budget=2, baselines=()).run()
    assert [t.config for t in again.trials] == [t.config for t in r.trials]
