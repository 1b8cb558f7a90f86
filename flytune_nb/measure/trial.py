"""One trial = one config on one shape: correctness first, then timing. Failures are data.

The boundary between "data" and "bug": an exception raised while the kernel's ``run`` launches a config is that
config's failure (compile error, out of resources, launch error) and scores inf with a reason. Anything else —
``make_inputs``, ``reference``, the timer, our own code — propagates, because it is wrong for every config.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

from flytune_nb.measure import correctness as check
from flytune_nb.core.config import Config
from flytune_nb.core.device import DeviceInfo, interpreter_unusable
from flytune_nb.errors import UsageError, compile_error_line

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


def classify(exc: BaseException) -> str:
    # An exception may say which failure it is (a backend's compile error: flytune_nb.backends.flydsl).
    status = getattr(exc, "trial_status", None)
    if status in STATUSES:
        return status
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
    rep and once more at the end; ``spec.zeroes`` are zeroed before the checked launch and before every rep. Turning
    it off reproduces Triton without ``restore_value`` (the drift test uses that).
    """
    base = dict(kernel=spec.name, shape=dict(shape), dtype=dtype, config=config, device=device.name)
    unusable = interpreter_unusable()
    if unusable:  # every config would fail the same way, for a reason that is not the config's
        raise UsageError(unusable)
    fresh = spec.make_inputs(shape, dtype, device)
    # accumulators start from zero on the checked launch as on every rep and every real call, so the reference sees
    # the zeros the kernel will add onto (make_inputs is asked for random data everywhere, these included)
    spec.reset(fresh, None)
    ref = spec.reference(fresh)  # before the launch: in-place kernels overwrite their inputs
    check.poison(spec, fresh)
    t0 = time.perf_counter()
    try:
        out = spec.run(fresh, config)
        _sync(device)
    except Exception as e:  # noqa: BLE001 - a config's failure is data (see module doc)
        return Trial(**base, status=classify(e), reason=_reason(e))
    compile_s = time.perf_counter() - t0
    _check_returns(spec, out, ref)
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
        return Trial(**base, status=classify(e), reason=_reason(e), compile_s=compile_s)
    finally:
        if restore:
            spec.reset(target, snap)  # leave the caller's tensors exactly as they came in
    return Trial(**base, status="ok", p20=timing.p20, p50=timing.p50, p80=timing.p80, rel_error=verdict.rel_error,
                 compile_s=compile_s, reps=timing.reps, method=timing.method)


def _check_returns(spec, out, ref) -> None:
    """run and reference return tensors: anything else is the spec's mistake, the same for every config (a launcher
    that forgot ``return out``), so it is one SpecError naming the function, not a trial's AttributeError."""
    import torch

    from flytune_nb.core.spec import SpecError

    for what, value in (("reference(inputs)", ref), ("run(inputs, config)", out)):
        items = value if isinstance(value, (tuple, list)) else (value,)
        bad = next((v for v in items if not torch.is_tensor(v)), False)
        if bad is not False or not items:
            got = "nothing" if not items else type(bad).__name__
            raise SpecError(f"{spec.name}: {what} returned {got}; it must return the output tensor, or a tuple of "
                            f"them in the order of its outputs")


def _reason(e: BaseException) -> str:
    """A failed trial's reason, one line: for a compile error, its cause (errors.compile_error_line: Triton's message
    is a source excerpt, the cause is chained); otherwise the message's last line (a driver error's summary)."""
    if classify(e) == "compile_error":
        return compile_error_line(e)[:300]
    lines = [l for l in str(e).strip().splitlines() if l.strip()]
    return f"{type(e).__name__}: {lines[-1] if lines else repr(e)}"[:300]
