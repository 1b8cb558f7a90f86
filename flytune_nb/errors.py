"""One root for every error flytune_nb raises on purpose, so the CLI, the workbench and a user's script catch one class.

- ``UsageError``: bad input (an unknown kernel, a grid typo, a shape too large, a malformed file). Nothing was written;
  the CLI prints one line and exits 2.
- ``RunError``: something went wrong while running (a worker could not start, a shape could not be prepared, no
  config passed). The CLI prints one line and exits 1.

A failing *config* is not an error at all: it is data (a trial with a status and a reason). Anything else that
escapes (a ``TypeError`` in our own code) is a bug and keeps its traceback.

Each subclass also derives from the builtin a caller would catch (``ValueError``, ``LookupError``,
``RuntimeError``), so ``except ValueError`` in a user's code catches a grid typo too.
"""
from __future__ import annotations

import re


class FlytuneError(Exception):
    """Root of every error flytune_nb raises on purpose."""


class UsageError(FlytuneError, ValueError):
    """Bad input: nothing was measured or written."""


class RunError(FlytuneError, RuntimeError):
    """A run could not go on (the machine's or a plugin's problem, not one config's)."""


class KernelUnavailable(UsageError):
    """Raised by a kernel folder's ``__init__`` when it cannot load on this machine for a reason that is not a bug: an
    optional dependency is missing (``needs sglang: pip install 'flytune_nb[sglang]'``). The registry lists the kernel
    as unavailable with this one line instead of as broken."""


def first_line(e: BaseException) -> str:
    """One line for a message to the user: an exception's first non-blank line, or its type."""
    lines = [line for line in str(e).splitlines() if line.strip()]
    return lines[0] if lines else type(e).__name__


_EXCERPT = re.compile(r"at (\d+):(\d+):")


def compile_error_line(e: BaseException) -> str:
    """``Type: what went wrong (line N: the kernel's line)`` in one line, for a config that did not compile
    (``CompilationError: ValueError: Shape element 0 must be a power of 2 (line 30: acc = tl.zeros([BLOCK_N], ...))``).
    Compilers do not put that first. Triton's CompilationError reads ``at 30:14:``, a source excerpt, a caret under
    the failing expression, then (not always) a message; the exception it chains holds the cause, one excerpt per
    inlined function, innermost last. FlyDSL's opens with the cause (``lld invocation failed``) and ends with a DSL
    traceback's caret."""
    where, said, seen, cause = "", "", set(), e
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        lines = [line.strip() for line in str(cause).splitlines() if line.strip()]
        m = _EXCERPT.fullmatch(lines[0]) if lines else None
        if m is None:  # a plain message: the cause itself
            own = f"{type(cause).__name__}: {lines[0]}" if lines else type(cause).__name__
            said = own if cause is e else f"{type(e).__name__}: {own}"
            break
        caret = next((i for i, line in enumerate(lines) if not set(line) - {"^", "~"}), len(lines))
        if not where:  # the outermost excerpt: the kernel's own line
            source = lines[caret - 1] if caret > 1 else ""
            where = f" (line {m.group(1)}: {source})" if source else f" (line {m.group(1)})"
        if caret + 1 < len(lines):  # this excerpt's message; a plainer chained cause may still replace it
            said = f"{type(e).__name__}: {' '.join(lines[caret + 1:])}"
        cause = cause.__cause__ or (None if cause.__suppress_context__ else cause.__context__)
    return f"{said or type(e).__name__}{where}"
