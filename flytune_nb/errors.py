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
    """``Type: what went wrong`` in one line, for a config that did not compile (``CompilationError: ValueError: Shape
    element 0 must be a power of 2 (line 30: acc = tl.zeros([BLOCK_N], ...))``). Compilers do not put that first:
    Triton's CompilationError opens with ``at 30:14:`` and a source excerpt ending in a caret, and keeps the cause
    (``ValueError: Shape element 0 must be a power of 2``) in the exception it chains, nested once per inlined
    function; FlyDSL's opens with the cause (``lld invocation failed``) and ends with a DSL traceback's caret."""
    where, seen, cause = "", set(), e
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        lines = [line.strip() for line in str(cause).splitlines() if line.strip() and set(line.strip()) - {"^", "~"}]
        m = _EXCERPT.fullmatch(lines[0]) if lines else None
        if m is None:
            said = f"{type(cause).__name__}: {lines[0]}" if lines else type(cause).__name__
            return f"{said}{where}" if cause is e else f"{type(e).__name__}: {said}{where}"
        if not where:  # the outermost location: the line of the kernel itself
            where = f" (line {m.group(1)}: {lines[-1]})" if len(lines) > 1 else f" (line {m.group(1)})"
        cause = cause.__cause__ or cause.__context__
    return f"{type(e).__name__}{where}"
