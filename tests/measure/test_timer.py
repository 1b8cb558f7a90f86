import time

import pytest

from flytune_nb.measure.timer import CpuTimer, make_timer, quantile, summarise


def test_quantile_matches_linear_interpolation():
    s = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert quantile(s, 0.5) == 3.0 and quantile(s, 0.2) == pytest.approx(1.8) and quantile(s, 0.8) == pytest.approx(4.2)
    t = summarise([5.0, 1.0, 3.0], "wall")
    assert (t.p20, t.p50, t.p80, t.reps) == (pytest.approx(1.8), 3.0, pytest.approx(4.2), 3)


def test_cpu_timer_measures_wall_time_and_runs_setup_before_every_rep():
    calls = []
    timer = CpuTimer(reps=4, warmup=1)
    t = timer.measure(lambda: (calls.append("run"), time.sleep(0.02)), setup=lambda: calls.append("setup"))
    assert calls == ["setup", "run"] * 5
    assert 19.0 <= t.p20 <= t.p50 <= t.p80 < 500.0 and t.method == "wall"  # loose top: CI may be loaded


def test_make_timer_on_the_interpreter_is_the_cpu_timer(dev):
    if dev.is_gpu:
        pytest.skip("interpreter only")
    assert isinstance(make_timer(dev, reps=5), CpuTimer) and make_timer(dev, reps=5).reps == 5


def test_gpu_timer_warm_up_follows_the_rep_budget():
    """do_bench's 25 ms warm-up by default; a shorter rep budget (`--rep-ms 25`, the committed-config sweeps) gets a
    quarter of it rather than a warm-up as long as the timing; an explicit warm-up wins. (No GPU touched: no flush.)"""
    from flytune_nb.measure.timer import GpuTimer
    from tests.conftest import H200 as gpu
    assert GpuTimer(gpu, flush=False).warmup_ms == 25.0
    assert GpuTimer(gpu, rep_ms=25, flush=False).warmup_ms == 6.25
    assert GpuTimer(gpu, rep_ms=25, warmup_ms=1, flush=False).warmup_ms == 1


def test_cpu_timer_graph_mode_times_inner_calls_per_sample_with_setup_before_each():
    """The graph mode's shape on the CPU: each sample is ``inner`` back-to-back calls (a replay), divided by
    ``inner``; the in-place setup runs once per sample, never between the captured calls."""
    calls = []
    timer = CpuTimer(reps=2, warmup=0, graph=True, inner=3)
    t = timer.measure(lambda: (calls.append("run"), time.sleep(0.02)), setup=lambda: calls.append("setup"))
    assert calls == ["setup", "run", "run", "run"] * 2
    assert 19.0 <= t.p50 < 55.0 and t.reps == 2  # per call, not per replay of 3 (>= 60 ms)
    from flytune_nb.core.device import interpreter_device

    assert make_timer(interpreter_device(), graph=True).graph and not make_timer(interpreter_device()).graph
