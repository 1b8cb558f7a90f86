"""Timing one launch: device events per rep, L2 flushed between reps, median with p20/p80.

GPU: warm up for ``warmup_ms`` (clocks ramp from idle: the H200 reads 345 MHz idle and 1980 MHz under load; 5 ms
when a measure finished less than 0.2 s ago, as between a sweep's trials), size
the rep count from a short estimate, then per rep: run ``setup`` (restore in-place inputs), zero a flush buffer twice
the device's L2 (so every rep reads from HBM, as the first call of a real step does), hold the GPU in a short spin
(``torch.cuda._sleep``) while the host enqueues the launch, and record events around ``fn`` alone. All events are read
after one synchronise.

Why the spin: a Triton launch costs the host ~20-30 us of Python. Without it the GPU finishes the flush, runs the
start event, then idles until the launch arrives, and that idle time lands inside the measurement. Measured on the
H200, rmsnorm M=1 N=4096 without the spin: p20 12 us, p80 35 us, 7 repeats of the median spread 82%;
do_bench (whose 256 MiB flush is long enough to hide most of the host time) read 5.6 us.

``graph=True`` (the "graph" timing mode: ``Sweep(timing="graph")``, ``flytune sweep --timing graph``) captures
``inner`` calls in one CUDA graph and times replays, per call (SGLang's tuner does this with 10): closer to how an
engine serves decode, where launches come from a graph and the previous call left part of the data in L2. The L2 is
flushed before each replay, so of the ``inner`` calls only the first reads from HBM. A kernel with in-place state
gets its ``setup`` (restore the snapshot, zero the accumulators) before each replay, outside the timed region: the
captured calls run back to back on the state the previous one left, as consecutive engine steps do, and that state
never drifts further than ``inner`` calls from the snapshot.

CPU (Triton interpreter): a wall-clock timer with few reps; those numbers are labelled interpreter timings and only
good for exercising the machinery. Its graph mode times ``inner`` back-to-back calls per sample (what a replay
runs), with ``setup`` before each sample, so the mode's plumbing is exercised without a GPU.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

from flytune_nb._compat.torch import gpu_sleep, has_gpu_sleep
from flytune_nb.core.device import DeviceInfo


_LAST_END = [-math.inf]  # when any GpuTimer of this process last finished measuring (perf_counter seconds)


@dataclass(frozen=True)
class Timing:
    p20: float  # milliseconds
    p50: float
    p80: float
    reps: int
    method: str  # "events" | "graph" | "wall"


def quantile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated quantile of an already sorted list (numpy's default method)."""
    if not sorted_values:
        return math.nan
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summarise(samples: list[float], method: str) -> Timing:
    s = sorted(samples)
    return Timing(quantile(s, 0.2), quantile(s, 0.5), quantile(s, 0.8), len(s), method)


class CpuTimer:
    """Wall clock for the interpreter: an interpreted launch of 64x1024 costs ~0.1 s, so 1 warm-up + 3 reps.
    ``graph``: each sample is ``inner`` back-to-back calls (what a graph replay runs), divided by ``inner``."""

    def __init__(self, reps: int = 3, warmup: int = 1, graph: bool = False, inner: int = 10) -> None:
        self.reps, self.warmup = reps, warmup
        self.graph, self.inner = graph, max(1, int(inner))

    def measure(self, fn: Callable[[], object], setup: Callable[[], object] | None = None) -> Timing:
        per_sample = self.inner if self.graph else 1
        for _ in range(self.warmup):
            if setup:
                setup()
            fn()
        samples = []
        for _ in range(self.reps):
            if setup:
                setup()
            t0 = time.perf_counter()
            for _ in range(per_sample):
                fn()
            samples.append((time.perf_counter() - t0) * 1e3 / per_sample)
        return summarise(samples, "wall")


class GpuTimer:
    def __init__(self, device: DeviceInfo, *, warmup_ms: float | None = None, rep_ms: float = 100.0, min_reps: int = 20,
                 max_reps: int = 1000, flush: bool = True, graph: bool = False, inner: int = 10) -> None:
        import torch

        self.device = device
        # do_bench's 25 ms by default; a shorter rep budget (--rep-ms 25) gets a quarter of it, not a warm-up longer
        # than the timing it prepares.
        self.warmup_ms = min(25.0, rep_ms / 4) if warmup_ms is None else warmup_ms
        self.rep_ms = rep_ms
        self.min_reps, self.max_reps = min_reps, max_reps
        self.graph, self.inner = graph, inner
        self._torch = torch
        self._cycles_us: float | None = None
        self._flush_cost_us: float | None = None
        # 2x L2 so that the flush evicts everything even with an adaptive replacement policy; 32 MiB floor when the
        # driver does not report L2. AMD Instinct reports only its L2 (4 MiB on MI300X) but keeps a 256 MiB Infinity
        # Cache behind it, so HIP gets a 512 MiB floor.
        floor = (512 << 20) if device.backend == "hip" else (32 << 20)
        n_bytes = max(2 * device.l2_bytes, floor) if flush else 0
        self._flush = torch.empty(n_bytes // 4, dtype=torch.int32, device=device.torch_device) if flush else None

    def _flush_l2(self) -> None:
        if self._flush is not None:
            self._flush.zero_()

    def measure(self, fn: Callable[[], object], setup: Callable[[], object] | None = None) -> Timing:
        torch = self._torch
        if self.graph:  # setup (if any) stays: it runs before each replay, outside the events
            fn = self._capture(fn, setup)
            per_call = self.inner
        else:
            per_call = 1
        # Warm-up by time; estimate one call (device time) and the host's cost of enqueueing it.
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        # Clocks ramp from idle (345 MHz on the H200) and the full warm-up is for that. Back to back, as in a sweep
        # (the previous measure ended moments ago, the correctness launch in between), the GPU is still at speed:
        # 3 calls and 5 ms do, which saves ~20 ms of every trial after the first.
        warmup_ms = self.warmup_ms if t0 - _LAST_END[0] > 0.2 else min(self.warmup_ms, 5.0)
        n_warm, host_s = 0, 0.0
        while True:
            if setup:
                setup()
            self._flush_l2()
            start.record()
            h0 = time.perf_counter()
            fn()
            host_s = max(host_s, time.perf_counter() - h0) if n_warm else 0.0  # first call may compile
            end.record()
            end.synchronize()
            n_warm += 1
            if n_warm >= 3 and (time.perf_counter() - t0) * 1e3 >= warmup_ms:
                break
        est = max(start.elapsed_time(end), 1e-3)
        # Cover twice the host's enqueue time (+10 us for the event records), capped at 1 ms. The L2 flush is
        # enqueued first and the GPU runs it while the host enqueues the launch, so it covers that much already
        # and the spin is only the rest: on the H200 the 120 MiB flush takes ~35 us, more than a tuned launch's
        # host time, and a spin on top of it would make each rep of a 22 us rmsnorm ~170 us (1000 reps: 0.17 s).
        flush_us = self._flush_us()
        spin_us = max(0.0, min(1000.0, 2e6 * host_s + 10.0) - flush_us) if has_gpu_sleep() else 0.0
        spin = int(spin_us * self._cycles_per_us()) if spin_us else 0
        # rep_ms is the time the reps may take, as in triton.testing.do_bench: each costs the flush, the spin and the
        # call on the GPU, or the host's enqueue of them, whichever is longer.
        per_rep_ms = max(est + (flush_us + spin_us) * 1e-3, host_s * 1e3 + 0.015)
        reps = int(min(self.max_reps, max(self.min_reps, self.rep_ms / per_rep_ms)))
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for i in range(reps):
            if setup:
                setup()
            self._flush_l2()
            if spin:
                gpu_sleep(spin)
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        _LAST_END[0] = time.perf_counter()
        samples = [s.elapsed_time(e) / per_call for s, e in zip(starts, ends)]
        return summarise(samples, "graph" if self.graph else "events")

    def _flush_us(self) -> float:
        """How long one L2 flush takes on the GPU, microseconds (measured once, on a warm GPU: the caller's warm-up)."""
        if self._flush_cost_us is None:
            torch = self._torch
            if self._flush is None:
                self._flush_cost_us = 0.0
            else:
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                self._flush_l2()
                s.record()
                for _ in range(5):
                    self._flush_l2()
                e.record()
                e.synchronize()
                self._flush_cost_us = s.elapsed_time(e) * 1e3 / 5
        return self._flush_cost_us

    def _cycles_per_us(self) -> float:
        """How many ``torch.cuda._sleep`` cycles make a microsecond on this GPU (measured once: clocks vary)."""
        if self._cycles_us is None:
            torch = self._torch
            gpu_sleep(1000)
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            gpu_sleep(1_000_000)
            e.record()
            e.synchronize()
            self._cycles_us = 1_000_000 / max(s.elapsed_time(e) * 1e3, 1e-3)
        return self._cycles_us

    def _capture(self, fn: Callable[[], object], setup: Callable[[], object] | None) -> Callable[[], object]:
        torch = self._torch
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fn()  # compile + allocate outside the capture
        torch.cuda.current_stream().wait_stream(stream)
        if setup is not None:
            setup()  # the warm-up call above changed the in-place state
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(self.inner):
                fn()
        return g.replay


def make_timer(device: DeviceInfo, **kwargs):
    """The right timer for the device; GPU kwargs are ignored by the interpreter timer and vice versa (``graph`` and
    ``inner`` go to both)."""
    if device.is_gpu:
        return GpuTimer(device, **{k: v for k, v in kwargs.items() if k != "reps"})
    return CpuTimer(reps=kwargs.get("reps", 3), graph=bool(kwargs.get("graph", False)),
                    inner=kwargs.get("inner", 10))
