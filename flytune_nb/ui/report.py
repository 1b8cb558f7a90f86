"""Plain-text tables for the terminal and papermill logs (no pandas needed to print a result)."""
from __future__ import annotations

import math

from flytune_nb.analysis.failures import summarize
from flytune_nb.analysis.units import fmt_time
from flytune_nb.core.shapes import shape_text
from flytune_nb.strategies.loop import SearchResult

REASON_WIDTH = 60  # a reason longer than this is cut in the table and printed whole below it, numbered


_shape = shape_text


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    fmt = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([fmt(header), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows])


def trials_table(result: SearchResult, spec=None) -> str:
    """Every config of one shape, fastest first; failures last with their reason (a long one numbered and printed
    whole under the table). Marks: "best" is the shape's pick (the selection stage's winner where it ran), "fastest"
    the search's fastest where the re-timing did not confirm its lead."""
    best, fastest, default = result.pick, result.best, result.default
    ordered = sorted(result.trials, key=lambda t: (not t.ok, t.score))
    rows, notes = [], {}
    for t in ordered:
        mark = (("best " if t is best else "fastest " if t is fastest else "")
                + ("default" if t.config == default else ""))
        gbs = ""
        if t.ok and spec is not None and spec.bytes is not None and result.device.is_gpu:
            gbs = f"{spec.bytes(result.shape, result.dtype) / (t.p50 * 1e-3) / 1e9:.0f}"
        reason = t.reason
        if len(reason) > REASON_WIDTH:
            n = notes.setdefault(reason, len(notes) + 1)
            reason = f"{reason[:REASON_WIDTH - 6]}… [{n}]"
        rows.append([str(t.config), t.status, fmt_time(t.p50), fmt_time(t.p20), fmt_time(t.p80), gbs,
                     f"{t.rel_error:.1e}" if math.isfinite(t.rel_error) else "-", mark.strip(),
                     "" if t.fidelity == "full" else t.fidelity, reason])
    head = f"{result.kernel} {_shape(result.shape)} {result.dtype} on {result.device.name}"
    header = ["config", "status", "p50", "p20", "p80", "GB/s", "rel_err", "is", "timing", "reason"]
    # GB/s (GPU only), timing (a quick first round: successive halving times a config twice) and reason (failures
    # only) are left out where no row has one: on the CPU GB/s and reason are blank
    keep = [i for i, h in enumerate(header) if h not in ("GB/s", "timing", "reason") or any(r[i] for r in rows)]
    text = head + "\n" + table([[r[i] for i in keep] for r in rows], [header[i] for i in keep])
    if notes:
        text += "\n" + "\n".join(f"[{n}] {reason}" for reason, n in notes.items())
    return text


def summary_table(results: list[SearchResult]) -> str:
    """One line per (shape, dtype): the heuristic default against the shape's pick (the selection stage's winner:
    "default" when the default was kept), both re-timed where the stage re-timed them, the speed-up, and why; the
    search's fastest beside it where its lead did not survive the re-timing. A stopped shape is marked partial."""
    rows = []
    # the spec's named configs (SGLang's shipped entry, ...): their p50 beside the default's, when any result has them
    labels = list(dict.fromkeys(label for r in results for label in r.named))
    for r in results:
        p, b = r.pick, r.best
        n_ok = sum(t.ok for t in r.trials)
        named = r.named_trials
        if p is None:
            pick = "NONE PASSED"
        else:
            pick = "default" if p.config == r.default else str(p.config)
        why = r.selection.line() if r.selection is not None else ("fastest in the search" if p is not None else "")
        unconfirmed = str(b.config) if b is not None and p is not None and b.config != p.config else ""
        rows.append([_shape(r.shape) + (" (partial)" if r.stopped else ""), r.dtype, f"{n_ok}/{len(r.trials)}",
                     str(r.default), fmt_time(r.default_ms),
                     *[fmt_time(r.time_of(named[x].config)) if named.get(x) is not None else "-" for x in labels],
                     pick, fmt_time(r.pick_ms),
                     f"{r.speedup:.2f}x" if math.isfinite(r.speedup) and not r.stopped else "-", why, unconfirmed])
    header = ["shape", "dtype", "passed", "default", "default p50", *[f"{x} p50" for x in labels], "pick",
              "pick p50", "speedup", "why"]
    if any(row[-1] for row in rows):  # the column only where a search's fastest lost its lead when re-timed
        header.append("search's fastest (not confirmed)")
    else:
        rows = [row[:-1] for row in rows]
    return table(rows, header)


def measured_line(measured: int) -> str:
    """What a run timed itself (new trials and the selection stage's re-timings, so it can exceed the trial count):
    a resumed sweep that found everything in its store says so, rather than print the stored tables as if just
    measured."""
    if not measured:
        return "nothing new measured: every trial was already in the store"
    return f"{measured} timing{'s' if measured != 1 else ''} this run"


def failure_line(results: list[SearchResult]) -> str:
    """ "0 of 24 failed" or "102 of 102 failed (all: launch_error: ...)": how many trials failed and why."""
    return summarize(t for r in results for t in r.trials).line()
