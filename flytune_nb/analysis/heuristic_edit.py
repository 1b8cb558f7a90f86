"""The heuristic editor's engine: compile an edited ``default(shape, dtype, device)`` and re-score it on the timings a
sweep already stored (no re-run). Plain functions; the notebook's editor only displays them."""
from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass, field

from flytune_nb.analysis.scores import regret
from flytune_nb.core.config import Config
from flytune_nb.errors import UsageError
from flytune_nb.strategies.selection import FLOOR, judge, tie_band


class HeuristicError(UsageError):
    """An edited heuristic that does not compile, raises, or returns something that is not a Config."""


TIME_LIMIT_S = 2.0  # an edited rule is a few comparisons per shape (microseconds); two seconds is a loop that never ends


class _RuleStopped(BaseException):
    """Raised inside a rule that ran past its time limit (BaseException: a rule's own ``except Exception`` cannot
    swallow it)."""


def with_time_limit(fn, limit_s: float = TIME_LIMIT_S, what: str = "the edited heuristic"):
    """``fn()`` in a thread of its own, off the caller's (the notebook kernel's main thread, which must keep serving
    the page): its result, or HeuristicError when it raised, ran past ``limit_s`` (it is then stopped where CPython
    can stop it: a pure-Python loop at once; a call blocked in C when it returns) or was interrupted."""
    import threading

    from flytune_nb._compat.stdlib import raise_in_thread

    box: dict = {}

    def body():
        try:
            box["value"] = fn()
        except _RuleStopped:
            box["stopped"] = True
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            box["error"] = e

    th = threading.Thread(target=body, daemon=True, name="flytune-heuristic")
    th.start()
    try:
        th.join(limit_s)
    except KeyboardInterrupt:  # the user interrupted the kernel while waiting: stop the rule, keep the edit
        raise_in_thread(th.ident, _RuleStopped)
        raise HeuristicError(f"{what} was interrupted; the edit is kept, fix it and re-score") from None
    if th.is_alive():
        stopped = raise_in_thread(th.ident, _RuleStopped)
        th.join(0.5)
        left = " (it is blocked in a call that cannot be stopped and keeps running in the background)" if (
            th.is_alive() or not stopped) else ""
        raise HeuristicError(f"{what} did not return within {limit_s:g} s: an endless loop?{left}")
    if "error" in box:
        e = box["error"]
        if isinstance(e, HeuristicError):
            raise e
        raise HeuristicError(f"{what} raised: {type(e).__name__}: {e}") from None
    return box.get("value")


@dataclass(frozen=True)
class ShapeScore:
    shape: dict
    dtype: str
    best_ms: float
    old: Config
    old_ms: float  # inf: failed; nan: never measured
    new: Config
    new_ms: float
    band: float = FLOOR  # the tie band the shape's selection decided with (selection.tie_band)
    # new / old as the selection measured it, where it re-timed the new pick against the default (the median of
    # their paired rounds): the editor then says what the selection said of that config
    ratio: float | None = None

    @property
    def verdict(self) -> str:
        """same | unmeasured | fails (the new pick failed its trial: always a loss) | wins | loses | ties: faster or
        slower than the current pick beyond the shape's tie band, by the rule the selection decides with."""
        if self.new == self.old:
            return "same"
        if math.isnan(self.new_ms):
            return "unmeasured"
        if math.isinf(self.new_ms):
            return "fails"
        if not math.isfinite(self.old_ms):
            return "wins"
        ratio = self.ratio if self.ratio is not None else self.new_ms / self.old_ms
        return {"faster": "wins", "slower": "loses", "tie": "ties"}[judge(ratio, self.band)]


@dataclass
class Rescore:
    rows: list = field(default_factory=list)

    @property
    def unmeasured(self) -> list[tuple[dict, str, Config]]:
        """(shape, dtype, config) the edited rule picks but the store has never timed: offer to measure these."""
        return [(r.shape, r.dtype, r.new) for r in self.rows if r.verdict == "unmeasured"]

    def summary(self) -> dict:
        """Counts per verdict, and both regrets (geomean pick / best) over the *same* rows: those where both picks
        were measured. A failing pick makes its rule's regret inf, so it can never look better by failing."""
        counts = {v: sum(r.verdict == v for r in self.rows)
                  for v in ("wins", "loses", "fails", "ties", "same", "unmeasured")}
        both = [r for r in self.rows if not math.isnan(r.new_ms) and not math.isnan(r.old_ms)]
        return {**counts, "compared": len(both),
                "old_regret": regret(r.old_ms / r.best_ms for r in both),
                "new_regret": regret(r.new_ms / r.best_ms for r in both)}


def load_heuristic(source: str, name: str = "default", package: str | None = None):
    """Compile edited heuristic source; return its ``default(shape, dtype, device)`` function. ``package`` is the
    kernel folder's package, so that the heuristic's relative imports (``from .configs import ...``) resolve as they
    do in the file."""
    namespace: dict = {"__name__": f"{package}._edited_heuristic", "__package__": package} if package else {}
    try:
        code = compile(textwrap.dedent(source), "<edited heuristic>", "exec")
        exec(code, namespace)  # noqa: S102 - the user's own code, in their own notebook kernel
    except SyntaxError as e:
        raise HeuristicError(f"syntax error on line {e.lineno}: {e.msg}") from None
    except Exception as e:  # noqa: BLE001
        raise HeuristicError(f"the code raised while loading: {type(e).__name__}: {e}") from None
    fn = namespace.get(name)
    if not callable(fn):
        raise HeuristicError(f"the code must define a function {name}(shape, dtype, device)")
    return fn


def check_knobs(spec, config: Config, reference: Config) -> str:
    """"" when ``config`` names the kernel's knobs (those of ``reference``, its heuristic default, optional knobs
    aside); else what is wrong, in one line."""
    missing, extra = spec.knob_mismatch(config.to_dict(), reference.to_dict())
    if not missing and not extra:
        return ""
    parts = ([f"unknown knob{'s' * (len(extra) > 1)} {', '.join(sorted(extra))}"] if extra else []) + (
        [f"missing {', '.join(sorted(missing))}"] if missing else [])
    knobs = sorted(set(reference.to_dict()) | set(spec.optional_knobs))  # BLOCK_M=4 is rmsnorm's as much as BLOCK_N
    return f"{'; '.join(parts)} (this kernel's knobs: {', '.join(knobs)})"


def rescore(fn, results, device, canonical, spec=None) -> Rescore:
    """Score heuristic ``fn`` on every (shape, dtype) of ``results`` from their stored timings. ``canonical``: the
    kernel's ``KernelSpec.canonical`` (an edited heuristic is a bare function, not the spec's wrapped one), so an
    edit that writes an optional knob at its default (``TMA=0``) finds the timings of the config stored without it."""
    out = Rescore()
    for r in results:
        # against the shape's pick (the selection's winner, what an export ships), not the search's fastest,
        # whose lead the re-timing may have undone
        best = r.pick
        if best is None:
            continue
        try:
            new = fn(dict(r.shape), r.dtype, device)
        except Exception as e:  # noqa: BLE001
            raise HeuristicError(f"raised for {r.shape} {r.dtype}: {type(e).__name__}: {e}") from None
        if not isinstance(new, Config):
            kind = type(new)
            # triton.Config is a Config too by its name: the module says which one it is
            name = kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
            raise HeuristicError(f"returned {name} for {r.shape} {r.dtype}, not a Config (flytune_nb's: "
                                 f"from flytune_nb.kit import Config)")
        if spec is not None:  # a config outside the kernel's space is said at once, not at measure time
            wrong = check_knobs(spec, new, r.default)
            if wrong:
                raise HeuristicError(f"returned {new} for {r.shape} {r.dtype}: {wrong}")
        new = canonical(new)
        sel = r.selection
        retimed = next((c for c in sel.comparisons if c.config == new and c.ratios), None) if sel else None
        # every time on one clock (SearchResult.time_of): inf where a config failed, nan where it was never measured
        out.rows.append(ShapeScore(dict(r.shape), r.dtype, r.pick_ms, r.default, r.default_ms, new, r.time_of(new),
                                   band=retimed.band if retimed is not None else tie_band(sel),
                                   ratio=retimed.median if retimed is not None else None))
    return out


