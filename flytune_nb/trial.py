"""One trial = one config on one shape: correctness first, then timing. Failures are data.

The boundary between "data" and "bug": an exception raised while the kernel's ``run`` launches a config is that
config's failure (compile error, out of resources, launch error) and scores inf with a reason. Anything else —
``make_inputs``, ``reference``, the timer, our own code — propagates, because it is wrong for every config.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from . import check
from .config import Config
from .device import DeviceInfo
from .events import Emitter, ShapeDone, TrialDone, TrialFailed, TrialStarted

STATUSES = ("ok", "wrong", "compile_error", "launch_error", "crashed", "timeout", "skipped")


@dataclass(frozen=True)
class Trial:
    kernel: str
    shape: dict
    dtype: str
    config: Config
    status: str
    reason: str = ""
    p20: float = math.inf  # milliseconds
    p50: float = math.inf
    p80: float = math.inf
    rel_error: float = math.nan
    compile_s: float = math.nan  # first launch (compile + run), seconds
    reps: int = 0
    method: str = ""
    device: str = ""
    fidelity: str = "full"  # "quick" for successive halving's cheap first round

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def score(self) -> float:
        """What a strategy minimises: p50 when correct, inf otherwise — a wrong config can never win."""
        return self.p50 if self.ok else math.inf


class _KernelFailed(Exception):
    """Carries (as ``__cause__``) an exception raised by the kernel's ``run`` inside the timer."""


class NoValidConfig(RuntimeError):
    """Every candidate failed; the message lists why, and points at the untuned path."""


def classify(exc: BaseException) -> str:
    names = {c.__name__ for c in type(exc).__mro__}
    text = str(exc).lower()
    if names & {"CompilationError", "OutOfResources", "PTXASError"} or "out of resource" in text or "ptxas" in text:
        return "compile_error"
    return "launch_error"


def _sync(device: DeviceInfo) -> None:
    if device.is_gpu:
        import torch

        torch.cuda.synchronize()


def evaluate(spec, shape: dict, dtype: str, config: Config, device: DeviceInfo, timer, *,
             inputs: dict | None = None, restore: bool = True) -> Trial:
    """Check ``config`` on fresh random inputs, then time it on ``inputs`` (the caller's tensors) or on those.

    ``restore`` is the in-place safety switch: tensors in ``spec.mutates`` are snapshotted and put back before every
    rep and once more at the end; ``spec.zeroes`` are zeroed before every rep. Turning it off reproduces Triton
    without ``restore_value`` (the drift test uses that).
    """
    base = dict(kernel=spec.name, shape=dict(shape), dtype=dtype, config=config, device=device.name)
    fresh = spec.make_inputs(shape, dtype, device)
    ref = spec.reference(fresh)  # before the launch: in-place kernels overwrite their inputs
    check.poison(spec, fresh)
    t0 = time.perf_counter()
    try:
        out = spec.run(fresh, config)
        _sync(device)
    except Exception as e:  # noqa: BLE001 - a config's failure is data (see module doc)
        return Trial(**base, status=classify(e), reason=f"{type(e).__name__}: {_last_line(e)}")
    compile_s = time.perf_counter() - t0
    verdict = check.compare(out, ref, spec.tol(dtype), spec.element_tol(dtype))
    if not verdict.ok:
        return Trial(**base, status="wrong", reason=verdict.reason, rel_error=verdict.rel_error, compile_s=compile_s)

    target = fresh if inputs is None else inputs
    snap = spec.snapshot(target) if restore else None
    setup = spec.rep_setup(target, snap) if restore else None
    def launch():
        try:
            return spec.run(target, config)
        except Exception as e:  # noqa: BLE001 - marked, so that only the kernel's own failures become data
            raise _KernelFailed() from e

    try:
        timing = timer.measure(launch, setup)
    except _KernelFailed as marked:
        e = marked.__cause__
        return Trial(**base, status=classify(e), reason=f"{type(e).__name__}: {_last_line(e)}", compile_s=compile_s)
    finally:
        if restore:
            spec.reset(target, snap)  # leave the caller's tensors exactly as they came in
    return Trial(**base, status="ok", p20=timing.p20, p50=timing.p50, p80=timing.p80, rel_error=verdict.rel_error,
                 compile_s=compile_s, reps=timing.reps, method=timing.method)


def _last_line(e: BaseException) -> str:
    """A failed trial's reason: Triton's compile errors put the message last, after the source excerpt."""
    lines = [l for l in str(e).strip().splitlines() if l.strip()]
    return (lines[-1] if lines else repr(e))[:300]


def first_line(e: BaseException) -> str:
    """One line for a message to the user: an exception's first non-blank line, or its type."""
    lines = [line for line in str(e).splitlines() if line.strip()]
    return lines[0] if lines else type(e).__name__


@dataclass
class SearchResult:
    kernel: str
    shape: dict
    dtype: str
    device: DeviceInfo
    default: Config
    trials: list = field(default_factory=list)

    baselines: dict = field(default_factory=dict)  # name -> {"status", "p50", ...}: torch_eager, torch_compile
    stopped: bool = False

    @property
    def best(self) -> Trial | None:
        """Fastest correct trial; full-fidelity timings win over quick ones (successive halving's first round)."""
        ok = [t for t in self.trials if t.ok and t.fidelity == "full"] or [t for t in self.trials if t.ok]
        return min(ok, key=lambda t: t.p50) if ok else None

    @property
    def default_trial(self) -> Trial | None:
        return next((t for t in self.trials if t.config == self.default and t.fidelity == "full"), None)

    @property
    def speedup(self) -> float:
        """default p50 / best p50 (>= 1 when the search found something better than the heuristic)."""
        b, d = self.best, self.default_trial
        if b is None or d is None or not d.ok:
            return math.nan
        return d.p50 / b.p50

    def require_best(self) -> Trial:
        if self.best is None:
            reasons = sorted({f"{t.status}: {t.reason}" for t in self.trials})[:5]
            raise NoValidConfig(
                f"{self.kernel} {self.shape} {self.dtype}: none of {len(self.trials)} configs passed "
                f"({'; '.join(reasons)}). Try the untuned path: spec.run(inputs, spec.default(shape, dtype, device)).")
        return self.best


def search(spec, shape: dict, dtype: str, device: DeviceInfo, timer, *, configs: Sequence[Config] | None = None,
           strategy: Callable | None = None, budget: int | None = None, inputs: dict | None = None,
           restore: bool = True, listener: Callable | None = None) -> SearchResult:
    """Search ``spec``'s space for one shape. The heuristic default is always measured too (first), so every result
    can say how far the heuristic is from the best."""
    from .strategies import exhaustive

    shape = spec.check_shape(shape)
    dtype = spec.check_dtype(dtype)
    default = spec.default(shape, dtype, device)
    space = configs if configs is not None else spec.configs(shape, dtype, device)
    emit = listener if isinstance(listener, Emitter) else Emitter([listener] if listener else [])
    result = SearchResult(spec.name, shape, dtype, device, default)
    total = planned(space, default, budget)

    def run_one(config: Config, fidelity: str = "full") -> Trial:
        i = len(result.trials)
        emit(TrialStarted(spec.name, shape, dtype, config, i, total))
        trial = evaluate(spec, shape, dtype, config, device, timer, inputs=inputs, restore=restore)
        result.trials.append(trial)
        emit((TrialDone if trial.ok else TrialFailed)(spec.name, trial, i, total, result.best))
        return trial

    explore(default, space, run_one, strategy or exhaustive, budget)
    emit(ShapeDone(spec.name, result))
    return result


def planned(space: Sequence[Config], default: Config, budget: int | None) -> int:
    n = len(set(space) | {default})
    return n if budget is None else min(n, max(1, budget))


def explore(default: Config, space: Sequence[Config], evaluate: Callable, strategy: Callable,
            budget: int | None) -> None:
    """The heuristic default is always measured first (so every result can say how far it is from the best); the
    strategy then searches the rest of the space with what is left of the budget."""
    evaluate(default)
    rest = [c for c in dict.fromkeys(space) if c != default]
    strategy(rest, evaluate, None if budget is None else max(0, budget - 1))

