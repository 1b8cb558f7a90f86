"""How long a sweep will take, from what this store has measured of the kernel on this device.

A trial's wall time is its first launch (compile + the correctness run: ``compile_s``) plus its timed reps (``reps``
x p50, and the warm-up: one more launch on the interpreter's wall-clock timer, a quarter of the budget on a GPU). A
flat 0.05 s a trial would promise "12 s" for a matmul grid that takes hours, so the estimate comes from the store;
without any history the guess below is said to be a guess.

Beside the trials a sweep pays a fixed start (``START_S``) and, per shape, its selection stage's re-timings (the
store's ``retimes`` rows, each a launch of ``reps`` + 1). Measured on the 2-core CPU box through the interpreter
(rmsnorm, N = 256-1024): a trial's wall time as the sweep's caller sees it (TrialStarted to TrialDone) is the model
above plus 1 ms (median; 5-60 ms mean at M = 16-64), so trials alone were not what a preview missed; the start was:
a workbench grid of 65 trials at 0.02 s took 4.1 s against the 1.3 s the trials alone promised.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

# Guesses with no history, per trial: a GPU compile is ~1 s (a Triton GEMM, H200 host) plus 100 ms of timing; the
# interpreter runs a small shape's ~5 launches in ~0.3 s on the 2-core CPU box.
GUESS_S = {"gpu": 1.2, "interpreter": 0.3}
# Before a sweep's first trial: its timing worker starts and describes every shape. Interpreter: 2.0-2.3 s after
# Sweep.run for 1 to 8 rmsnorm shapes on the 2-core box (the number of shapes barely moves it). GPU, with the worker
# server started (the workbench starts it as it opens): describe ~0.3 s and the first trial's CUDA context and
# launcher ~0.7 s (docs/guide.md, section 7); the first compile is in that trial's compile_s.
START_S = {"gpu": 1.0, "interpreter": 2.0}


@dataclass(frozen=True)
class Estimate:
    per_trial_s: float
    basis: int  # how many stored trials it comes from (0: a guess)
    start_s: float = 0.0  # once a sweep (START_S)
    per_shape_s: float = 0.0  # the selection stage's re-timings of a shape, from the store's (0: none stored)

    def seconds(self, trials: int, shapes: int = 0) -> float:
        return (self.start_s if trials else 0.0) + shapes * self.per_shape_s + trials * self.per_trial_s

    def describe(self, trials: int, shapes: int = 0) -> str:
        how = (f"from {self.basis} trials this store measured" if self.basis else
               "a guess: nothing measured yet for this kernel here")
        shape = f", {self.per_shape_s:.2g} s a shape re-timing its pick" if self.per_shape_s and shapes else ""
        start = f", {self.start_s:.2g} s to start the worker" if self.start_s and trials else ""
        return f"~{duration(self.seconds(trials, shapes))} ({self.per_trial_s:.2g} s a trial, {how}{shape}{start})"


def trial_seconds(compile_s: float, p50_ms: float, reps: int, is_gpu: bool) -> float:
    first = compile_s if compile_s == compile_s else 0.0  # NaN: a trial that failed before launching
    if not (p50_ms == p50_ms and math.isfinite(p50_ms)):
        return first
    timed = (reps or 3) * p50_ms / 1e3
    return first + (timed * 1.25 if is_gpu else timed + p50_ms / 1e3)


def estimate(store, kernel: str, device_name: str, is_gpu: bool, limit: int = 2000) -> Estimate:
    """Median trial time of ``kernel`` on ``device_name`` in ``store`` (a results Store or None)."""
    samples = []
    if store is not None:
        try:
            rows = store.recent_trials(kernel, device_name, limit) if hasattr(store, "recent_trials") else None
        except Exception:  # noqa: BLE001 - an estimate never fails the preview
            rows = None
        if rows is None:
            try:
                df = store.frame(kernel)
                df = df[df["device"] == device_name].tail(limit)
                rows = list(zip(df["compile_s"], df["p50"], df["reps"]))
            except Exception:  # noqa: BLE001
                rows = []
        for compile_s, p50, reps in rows:
            samples.append(trial_seconds(_f(compile_s), _f(p50), int(reps or 0), is_gpu))
    samples = [s for s in samples if s > 0]
    start = START_S["gpu" if is_gpu else "interpreter"]
    if samples:
        return Estimate(statistics.median(samples), len(samples), start, _per_shape(store, kernel, device_name, is_gpu))
    return Estimate(GUESS_S["gpu" if is_gpu else "interpreter"], 0, start)


def _per_shape(store, kernel: str, device_name: str, is_gpu: bool) -> float:
    """Median over the stored selection stages (one per tuning key and run: retimes are appended, and a shape
    decided again by a later run keeps its earlier stage's rows) of their re-timings' wall time; 0 without any."""
    try:
        df = store.frame(kernel, table="retimes")
        df = df[(df["device"] == device_name) & (df["round"] >= 0)]  # round -1: the editor's timings, not a stage
    except Exception:  # noqa: BLE001 - an older store without the table: no per-shape cost known
        return 0.0
    if df.empty:
        return 0.0
    per_key = [sum(trial_seconds(0.0, _f(p), int(r or 0), is_gpu) for p, r in zip(g["p50"], g["reps"]))
               for _, g in df.groupby(["key", "run_id"])]
    return statistics.median(per_key)


def _f(v) -> float:
    try:
        return float("nan") if v is None else float(v)
    except (TypeError, ValueError):
        return float("nan")


def duration(seconds: float) -> str:
    """ "45 s", "3 min 20 s", "2 h 5 min"."""
    if not math.isfinite(seconds):
        return "?"
    s = int(round(seconds))
    if s < 60:
        return f"{max(s, 1)} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"
