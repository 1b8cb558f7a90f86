"""The "did you mean" of every message that refuses a name: one rule, so that a kernel, a target, a parameter and
an input name are guessed alike."""
from __future__ import annotations

import difflib
from typing import Iterable


def closest(word: str, known: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The known name ``word`` most likely misspells, or None. difflib's similarity shortlists (at ``cutoff``); the
    fewest single-character edits decide among the shortlist, since similarity alone ties where a typo does not:
    ``mi301x`` is as similar to ``mi350x`` as to ``mi300x`` (5 of 6 characters in order), but one edit from
    ``mi300x`` and two from ``mi350x``."""
    shortlist = difflib.get_close_matches(str(word), [str(k) for k in known], n=100, cutoff=cutoff)
    if not shortlist:
        return None
    return min(shortlist, key=lambda k: _edits(str(word), k))  # min keeps the first (most similar) of a tie


def _edits(a: str, b: str) -> int:
    """Levenshtein distance: insertions, deletions and substitutions."""
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]
