"""Plain-text tables for the terminal and papermill logs (no pandas needed to print a result)."""
from __future__ import annotations

import math

from flytune_nb.strategies.loop import SearchResult


def _ms(v: float) -> str:
    if not math.isfinite(v):
        return "-"
    return f"{v * 1e3:.1f}us" if v < 1 else f"{v:.3f}ms"


def _shape(shape: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in shape.items())


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    fmt = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([fmt(header), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows])


def trials_table(result: SearchResult, spec=None) -> str:
    """Every config of one shape, fastest first; failures last with their reason."""
    best, default = result.best, result.default
    ordered = sorted(result.trials, key=lambda t: (not t.ok, t.score))
    rows = []
    for t in ordered:
        mark = ("best " if t is best else "") + ("default" if t.config == default else "")
        gbs = ""
        if t.ok and spec is not None and spec.bytes is not None and result.device.is_gpu:
            gbs = f"{spec.bytes(result.shape, result.dtype) / (t.p50 * 1e-3) / 1e9:.0f}"
        rows.append([str(t.config), t.status, _ms(t.p50), _ms(t.p20), _ms(t.p80), gbs,
                     f"{t.rel_error:.1e}" if math.isfinite(t.rel_error) else "-", mark.strip(), t.reason[:60]])
    head = f"{result.kernel} {_shape(result.shape)} {result.dtype} on {result.device.name}"
    return head + "\n" + table(rows, ["config", "status", "p50", "p20", "p80", "GB/s", "rel_err", "", "reason"])


def summary_table(results: list[SearchResult]) -> str:
    """One line per (shape, dtype): the heuristic default vs the searched best, and the pick (the selection
    stage's winner: "default" when the default was kept, else "best" or the config) with why."""
    rows = []
    # the spec's named configs (SGLang's shipped entry, ...): their p50 beside the default's, when any result has them
    labels = list(dict.fromkeys(label for r in results for label in r.named))
    for r in results:
        b, d = r.best, r.default_trial
        n_ok = sum(t.ok for t in r.trials)
        named = r.named_trials
        if r.selection is None:
            pick = "best" if b else "-"
        elif r.selection.chose_default:
            pick = "default"
        else:
            pick = "best" if b is not None and r.selection.winner == b.config else str(r.selection.winner)
        why = r.selection.line() if r.selection is not None else ""
        rows.append([_shape(r.shape), r.dtype, f"{n_ok}/{len(r.trials)}", str(r.default), _ms(d.p50 if d else math.inf),
                     *[_ms(named[x].p50) if named.get(x) is not None else "-" for x in labels],
                     str(b.config) if b else "NONE PASSED", _ms(b.p50 if b else math.inf),
                     f"{r.speedup:.2f}x" if math.isfinite(r.speedup) else "-", pick, why])
    return table(rows, ["shape", "dtype", "passed", "default", "default p50", *[f"{x} p50" for x in labels], "best",
                        "best p50", "speedup", "pick", "why"])
