"""What went wrong in a set of trials, in one line: how many failed and the commonest reason (a finish line
that says only "finished: 3 shapes, 102 trials" hides a sweep whose 102 trials all failed)."""
from __future__ import annotations

import collections
import re
from dataclasses import dataclass

@dataclass(frozen=True)
class FailureSummary:
    total: int
    failed: int
    by_status: dict
    commonest: str  # "launch_error: RuntimeError(...)" (the most frequent status + reason), "" when none failed
    commonest_count: int

    def line(self, limit: int = 160) -> str:
        """ "0 failed" or "102 of 102 failed (all: launch_error: InterpreterError ...)"."""
        if not self.failed:
            return f"0 of {self.total} failed"
        why = self.commonest if len(self.commonest) <= limit else self.commonest[:limit - 1] + "…"
        share = "all" if self.commonest_count == self.failed else f"{self.commonest_count} of them"
        return f"{self.failed} of {self.total} failed ({share}: {why})"


def _normal(reason: str) -> str:
    """Reasons that differ only in numbers (a timeout's seconds, an address) count as one."""
    return re.sub(r"0x[0-9a-f]+|\d+(\.\d+)?", "#", reason)


def summarize(trials) -> FailureSummary:
    trials = list(trials)
    bad = [t for t in trials if not t.ok]
    by_status = dict(collections.Counter(t.status for t in bad))
    if not bad:
        return FailureSummary(len(trials), 0, {}, "", 0)
    groups = collections.Counter((t.status, _normal(t.reason)) for t in bad)
    (status, norm), n = groups.most_common(1)[0]
    example = next(t.reason for t in bad if t.status == status and _normal(t.reason) == norm)
    return FailureSummary(len(trials), len(bad), by_status, f"{status}: {example}" if example else status, n)
