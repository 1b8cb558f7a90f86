"""Correctness per trial and failures-as-data, on a plugin whose configs misbehave on purpose (tests/plugins/toy)."""
import math

import pytest
import torch

from flytune_nb.core.config import Config
from flytune_nb.core.registry import get_kernel
from flytune_nb.core.events import ShapeDone, TrialDone, TrialFailed, TrialStarted
from flytune_nb.measure import correctness as check
from flytune_nb.strategies.loop import NoValidConfig, search
from tests.conftest import PLUGINS


@pytest.fixture
def toy():
    return get_kernel("toy", [PLUGINS])


def test_rel_error_basics():
    ref = torch.randn(1000, dtype=torch.float64)
    assert check.rel_error(ref.float(), ref) < 1e-7
    noisy = ref + 1e-3 * torch.randn_like(ref)
    assert 5e-4 < check.rel_error(noisy, ref) < 2e-3
    assert check.rel_error(ref.clone().index_fill_(0, torch.tensor([3]), math.nan), ref) == math.inf
    assert check.rel_error(ref.clone().index_fill_(0, torch.tensor([3]), math.inf), ref) == math.inf
    assert check.rel_error(ref[:10], ref) == math.inf


def test_search_records_every_failure_mode_and_never_picks_a_wrong_config(toy, dev, cpu_timer):
    events = []
    r = search(toy, {"N": 300}, "fp32", dev, cpu_timer, listener=events.append)
    by_mode = {}
    for t in r.trials:
        by_mode.setdefault(t.config["MODE"], set()).add(t.status)
    assert by_mode == {0: {"ok"}, 1: {"wrong"}, 2: {"launch_error"}, 3: {"wrong"}}
    wrong_value = next(t for t in r.trials if t.config["MODE"] == 1)
    assert 0.4 < wrong_value.rel_error < 0.6  # 3x instead of 2x: ||x|| / ||2x|| = 0.5
    unwritten = next(t for t in r.trials if t.config["MODE"] == 3)
    assert "NaN/Inf" in unwritten.reason and "150 of 300" in unwritten.reason
    raised = next(t for t in r.trials if t.config["MODE"] == 2)
    assert "simulated out of memory" in raised.reason and raised.score == math.inf
    assert r.best.config["MODE"] == 0 and r.best.ok
    assert all(t.score == math.inf for t in r.trials if not t.ok)
    # Events: one start per trial, one done/failed per trial, then the shape.
    starts = [e for e in events if isinstance(e, TrialStarted)]
    ends = [e for e in events if isinstance(e, (TrialDone, TrialFailed))]
    assert len(starts) == len(ends) == len(r.trials) == 8
    assert sum(isinstance(e, TrialDone) for e in ends) == 2
    assert isinstance(events[-1], ShapeDone) and events[-1].result is r
    assert starts[0].config == r.default  # the heuristic default is measured first


def test_no_valid_config_names_the_reasons_and_the_untuned_path(toy, dev, cpu_timer):
    bad = [Config({"BLOCK": 64, "MODE": 1}, num_warps=1), Config({"BLOCK": 64, "MODE": 2}, num_warps=1)]
    r = search(toy, {"N": 100}, "fp32", dev, cpu_timer, configs=bad)
    r.trials = [t for t in r.trials if t.config in bad]  # drop the (passing) default
    with pytest.raises(NoValidConfig, match="none of 2 configs passed.*untuned path"):
        r.require_best()


def test_error_in_our_side_propagates(toy, dev, cpu_timer):
    class BrokenTimer:
        def measure(self, fn, setup=None):
            raise ZeroDivisionError("bug in the timer")

    with pytest.raises(ZeroDivisionError):
        search(toy, {"N": 100}, "fp32", dev, BrokenTimer())


def test_a_raising_listener_is_detached_not_fatal(toy, dev, cpu_timer):
    calls = []

    def bad_listener(event):
        calls.append(event)
        raise RuntimeError("widget bug")

    with pytest.warns(RuntimeWarning, match="detached"):
        r = search(toy, {"N": 100}, "fp32", dev, cpu_timer, listener=bad_listener)
    assert len(calls) == 1 and r.best is not None


def test_bad_shape_and_dtype_are_clear(toy, dev, cpu_timer):
    with pytest.raises(ValueError, match="positive integer"):
        search(toy, {"N": 0}, "fp32", dev, cpu_timer)
    with pytest.raises(ValueError, match="missing"):
        search(toy, {"M": 4}, "fp32", dev, cpu_timer)
    with pytest.raises(ValueError, match="supports fp32, bf16"):
        search(toy, {"N": 4}, "fp16", dev, cpu_timer)
    with pytest.raises(ValueError, match="unknown dtype"):
        search(toy, {"N": 4}, "float8", dev, cpu_timer)


def test_elementwise_bound_catches_one_bad_row_that_the_norm_averages_away():
    ref = torch.randn(40000, 8, dtype=torch.float64)
    # Row 123 gets a typical row's norm (sqrt 8): a random row in the chi-square tail would let the norm alone catch
    # it now and then (one failure in ~20 full runs), and only the elementwise bound may catch it here.
    ref[123] *= 8 ** 0.5 / ref[123].norm()
    out = ref.to(torch.bfloat16)
    out[123] = 0  # one unwritten / misplaced row of 40000
    norm_only = check.compare(out, ref, 8e-3)
    assert norm_only.ok  # the norm alone misses it: 1/sqrt(40000) = 5e-3 < 8e-3
    both = check.compare(out, ref, 8e-3, (1.6e-2, 1.6e-2))
    assert not both.ok and "first at (123," in both.reason


@pytest.mark.parametrize("field, says", [("run", r"run\(inputs, config\) returned NoneType"),
                                         ("reference", r"reference\(inputs\) returned NoneType")])
def test_a_run_or_reference_returning_no_tensor_names_the_function(toy, dev, cpu_timer, field, says):
    import dataclasses

    from flytune_nb.core.spec import SpecError
    from flytune_nb.measure.trial import evaluate

    real = getattr(toy, field)
    # a launcher that forgot `return out`: the kernel still runs
    broken = dataclasses.replace(toy, **{field: lambda *a: (real(*a), None)[1]})
    with pytest.raises(SpecError, match=f"toy: {says}; it must return the output tensor"):
        evaluate(broken, {"N": 64}, "fp32", broken.default({"N": 64}, "fp32", dev), dev, cpu_timer)
