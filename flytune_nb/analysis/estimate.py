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

A trial's time grows with its shape: on the interpreter rmsnorm (N = 256) took 0.006, 0.009, 0.045, 0.067 and 0.14 s
a trial at M = 1, 2, 16, 32 and 64, so one median over the stored shapes promised an M = 16-64 grid 27x too little
from M = 1-2 trials. Each stored (shape, dtype) is a point (its work: the kernel's ``flops``, else ``bytes``; the
median of its trials' times), and a shape of the grid takes the time of the stored point nearest in work, scaled by
(work / that point's work) ** b. ``b`` is the slope of log time against log work fitted over the stored points,
kept within [0, 1]: a trial is never faster on a larger shape, nor slower than in proportion to its work (a fixed
compile or launch cost is why it is below 1; the GPU timer's fixed budget of reps makes it near 0 there). From the
five points above, M = 1 and 2 alone give b = 0.6: M = 16-64 then read 1.5x low instead of 27x. Sizes close together
leave b to timing noise (M = 1, 2, 4 gave 0.64-0.72 alone, but 0 once beside other work on the 2-core box), so the
further the stored sizes spread, the better it holds; the line names them and how far it extrapolates. With a single
stored size no slope is known: the time is given as a range, from not growing at all to growing in proportion to
work. A kernel that declares neither flops nor bytes is not scaled, and the line says so.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Callable, Sequence

# Guesses with no history, per trial: a GPU compile is ~1 s (a Triton GEMM, H200 host) plus 100 ms of timing; the
# interpreter runs a small shape's ~5 launches in ~0.3 s on the 2-core CPU box.
GUESS_S = {"gpu": 1.2, "interpreter": 0.3}
# Before a sweep's first trial: its timing worker starts and describes every shape. Interpreter: 2.0-2.3 s after
# Sweep.run for 1 to 8 rmsnorm shapes on the 2-core box (the number of shapes barely moves it). GPU, with the worker
# server started (the workbench starts it as it opens): describe ~0.3 s and the first trial's CUDA context and
# launcher ~0.7 s (docs/guide.md, section 7); the first compile is in that trial's compile_s.
START_S = {"gpu": 1.0, "interpreter": 2.0}


# Stored works closer than this (max / min) give no slope: two sizes 1.2x apart leave it to timing noise.
MIN_SPREAD = 1.5
# A range whose ends are within this of each other is said as one number.
ONE_NUMBER = 1.2


@dataclass(frozen=True)
class Work:
    """What a shape's trial time is scaled by: the kernel's flops or bytes model."""

    fn: Callable
    unit: str  # "FLOPs" or "bytes"

    def __call__(self, shape: dict, dtype: str) -> float | None:
        try:
            w = float(self.fn(dict(shape), dtype))
        except Exception:  # noqa: BLE001 - a model that cannot answer for this shape: that shape is not scaled
            return None
        return w if w > 0 and math.isfinite(w) else None


def work_of(spec) -> Work | None:
    """The kernel's flops model, else its bytes model; None when it declares neither (no basis for scaling)."""
    for attr, unit in (("flops", "FLOPs"), ("bytes", "bytes")):
        fn = getattr(spec, attr, None)
        if fn is not None:
            return Work(fn, unit)
    return None


@dataclass(frozen=True)
class Point:
    work: float | None  # None: the kernel has no work model, or it did not answer for this shape
    seconds: float  # median over the stored samples of this (shape, dtype)
    label: str  # "M=2 N=256 fp32"


@dataclass(frozen=True)
class Scaling:
    """Seconds against work, from stored points: ``at(work)`` is (low, high), equal unless one size is known."""

    points: tuple = ()

    @property
    def sized(self) -> tuple:
        return tuple(sorted((p for p in self.points if p.work is not None), key=lambda p: p.work))

    @property
    def slope(self) -> float | None:
        """The fitted exponent, or None with fewer than two distinct sizes (then ``at`` gives a range)."""
        pts = self.sized
        if len(pts) < 2 or pts[-1].work / pts[0].work < MIN_SPREAD:
            return None
        xs, ys = [math.log(p.work) for p in pts], [math.log(p.seconds) for p in pts]
        mx, my = statistics.fmean(xs), statistics.fmean(ys)
        b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
        return min(1.0, max(0.0, b))

    def flat(self) -> float:
        return statistics.median(p.seconds for p in self.points) if self.points else 0.0

    def nearest(self, work: float) -> Point:
        return min(self.sized, key=lambda p: abs(math.log(work / p.work)))

    def at(self, work: float | None) -> tuple[float, float]:
        if work is None or not self.sized:
            t = self.flat()
            return t, t
        p, b = self.nearest(work), self.slope
        ratio = work / p.work
        if b is not None:
            t = p.seconds * ratio ** b
            return t, t
        return p.seconds * min(1.0, ratio), p.seconds * max(1.0, ratio)


@dataclass(frozen=True)
class Estimate:
    trials: Scaling  # per-trial seconds (empty: a guess, ``guess_s``)
    basis: int  # how many stored trials it comes from (0: a guess)
    start_s: float = 0.0  # once a sweep (START_S)
    stages: Scaling = field(default_factory=Scaling)  # the selection stage's re-timings of a shape (empty: none)
    work: Work | None = None
    guess_s: float = 0.0

    @property
    def per_trial_s(self) -> float:
        """The median over the stored shapes, unscaled (the guess without any)."""
        return self.trials.flat() if self.basis else self.guess_s

    @property
    def per_shape_s(self) -> float:
        return self.stages.flat()

    def _work(self, shape, dtype):
        return self.work(shape, dtype) if self.work is not None else None

    def seconds(self, plan: Sequence) -> tuple[float, float]:
        """(low, high) seconds for ``plan``: (shape, dtype, trials) per shape of the sweep."""
        lo = hi = self.start_s if any(n for _, _, n in plan) else 0.0
        for shape, dtype, n in plan:
            w = self._work(shape, dtype)
            t = self.trials.at(w) if self.basis else (self.guess_s, self.guess_s)
            s = self.stages.at(w) if self.stages.points else (0.0, 0.0)
            lo += n * t[0] + s[0]
            hi += n * t[1] + s[1]
        return lo, hi

    def describe(self, plan: Sequence) -> str:
        lo, hi = self.seconds(plan)
        when = f"~{duration(hi)}" if hi <= lo * ONE_NUMBER else f"~{duration(lo)} to ~{duration(hi)}"
        trials = sum(n for _, _, n in plan)
        extra = []
        if self.stages.points and plan:
            stage = statistics.fmean(self.stages.at(self._work(sh, d))[1] for sh, d, _ in plan)
            extra.append(f"{stage:.2g} s a shape re-timing its pick")
        if self.start_s and trials:
            extra.append(f"{self.start_s:.2g} s to start the worker")
        return f"{when} ({self._how(plan)}" + (f"; plus {' and '.join(extra)}" if extra else "") + ")"

    def _how(self, plan: Sequence) -> str:
        if not self.basis:
            return f"{self.guess_s:.2g} s a trial, a guess: nothing measured yet for this kernel here"
        measured = f"from {self.basis} trials this store measured"
        sized = self.trials.sized
        works = [w for w in (self._work(s, d) for s, d, _ in plan) if w is not None]
        if self.work is None or not sized or not works:
            why = ("the kernel declares neither flops nor bytes" if self.work is None else
                   "its work model gives no size for these shapes")
            return f"{self.trials.flat():.2g} s a trial {measured}; not scaled with shape size: {why}"
        unit, b = self.work.unit, self.trials.slope
        small, large = sized[0], sized[-1]
        if b is None:
            p = self.trials.nearest(max(works))
            n = len({q.work for q in sized})  # two dtypes of one shape are one size
            at, known, narrows = (
                (f"at the one size measured, {p.label}", "with one size", "a second size measured") if n == 1 else
                (f"at {p.label}, the nearest of {n} stored sizes within {MIN_SPREAD:g}x of each other in {unit}",
                 "with sizes that close", "a size measured further from them"))
            return (f"{p.seconds:.2g} s a trial {at}, {measured}; {known} the growth with {unit} is unknown: the "
                    f"grid's shapes span {_times(min(works) / p.work)} to {_times(max(works) / p.work)} its {unit}, "
                    f"so the range runs from not growing to growing in proportion; {narrows} narrows it")
        span = f"{small.label} to {large.label}"
        said = f"per trial time scaled as {unit}^{b:.2f}, fitted over {len(sized)} stored sizes ({span}), {measured}"
        beyond = []
        if max(works) > large.work * (1 + 1e-9):
            beyond.append(f"the grid's largest shape has {_times(max(works) / large.work)} the {unit} of the "
                          f"largest measured")
        if min(works) < small.work * (1 - 1e-9):
            beyond.append(f"its smallest {_times(min(works) / small.work)} of the smallest's")
        if beyond:
            said += "; extrapolated: " + ", ".join(beyond)
        return said


def _times(r: float) -> str:
    return f"{r:.3g}x" if r >= 1 else f"1/{1 / r:.3g}"


def trial_seconds(compile_s: float, p50_ms: float, reps: int, is_gpu: bool) -> float:
    first = compile_s if compile_s == compile_s else 0.0  # NaN: a trial that failed before launching
    if not (p50_ms == p50_ms and math.isfinite(p50_ms)):
        return first
    timed = (reps or 3) * p50_ms / 1e3
    return first + (timed * 1.25 if is_gpu else timed + p50_ms / 1e3)


def estimate(store, kernel: str, device_name: str, is_gpu: bool, limit: int = 2000,
             work: Work | None = None) -> Estimate:
    """What ``kernel``'s trials on ``device_name`` took in ``store`` (a results Store or None), per stored
    (shape, dtype), to be scaled to other shapes by ``work`` (work_of(spec); None: not scaled)."""
    samples: dict = {}
    if store is not None:
        try:
            df = store.frame(kernel)
            df = df[df["device"] == device_name].tail(limit)
            rows = list(zip(df["shape"], df["dtype"], df["compile_s"], df["p50"], df["reps"]))
        except Exception:  # noqa: BLE001 - an estimate never fails the preview
            rows = []
        for shape, dtype, compile_s, p50, reps in rows:
            t = trial_seconds(_f(compile_s), _f(p50), int(reps or 0), is_gpu)
            if t > 0:
                samples.setdefault((shape, dtype), []).append(t)
    start = START_S["gpu" if is_gpu else "interpreter"]
    guess = GUESS_S["gpu" if is_gpu else "interpreter"]
    if not samples:
        return Estimate(Scaling(), 0, start, work=work, guess_s=guess)
    points = _points(samples, work)
    return Estimate(Scaling(points), sum(map(len, samples.values())), start,
                    _per_shape(store, kernel, device_name, is_gpu, work), work=work, guess_s=guess)


def _points(samples: dict, work: Work | None) -> tuple:
    """One point per stored (shape JSON, dtype): its work and the median of its samples."""
    import json

    out = []
    for (shape, dtype), ts in samples.items():
        try:
            sh = json.loads(shape)
        except (TypeError, ValueError):
            continue
        w = work(sh, dtype) if work is not None else None
        out.append(Point(w, statistics.median(ts), " ".join(f"{k}={v}" for k, v in sh.items()) + f" {dtype}"))
    return tuple(out)


def _per_shape(store, kernel: str, device_name: str, is_gpu: bool, work: Work | None = None) -> Scaling:
    """The stored selection stages (one per tuning key and run: retimes are appended, and a shape decided again by
    a later run keeps its earlier stage's rows), each its re-timings' wall time, as points per shape; none without
    any."""
    try:
        df = store.frame(kernel, table="retimes")
        df = df[(df["device"] == device_name) & (df["round"] >= 0)]  # round -1: the editor's timings, not a stage
    except Exception:  # noqa: BLE001 - an older store without the table: no per-shape cost known
        return Scaling()
    if df.empty:
        return Scaling()
    per: dict = {}
    for (_, _, shape, dtype), g in df.groupby(["key", "run_id", "shape", "dtype"]):
        t = sum(trial_seconds(0.0, _f(p), int(r or 0), is_gpu) for p, r in zip(g["p50"], g["reps"]))
        if t > 0:  # a stage whose every re-timing failed timed nothing: no point of the fit (log 0)
            per.setdefault((shape, dtype), []).append(t)
    return Scaling(_points(per, work))


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
