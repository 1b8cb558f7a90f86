"""Runs a notebook headless (papermill): what `make demo` and batch jobs use."""
from __future__ import annotations

import ast
from pathlib import Path

from flytune_nb.core.resources import NOTEBOOKS
from flytune_nb.core.suggest import closest
from flytune_nb.errors import UsageError

INJECTED = "# Parameters"  # how papermill's Python translator opens the cell it adds after the parameters cell


def run_notebook(name: str, out: str | Path, parameters: dict, cwd: str | Path | None = None) -> Path:
    import papermill as pm

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    # The kernel's own log at ERROR: ipykernel 7 warns at every start that its local TCP sockets are unencrypted,
    # a line in every headless run that says nothing about the run. Cell errors come back as outputs, not log lines.
    pm.execute_notebook(str(NOTEBOOKS / name), str(out), parameters=parameters, progress_bar=False,
                        cwd=str(cwd or out.parent), extra_arguments=["--IPKernelApp.log_level=ERROR"])
    return out


def printed_output(path: str | Path) -> str:
    """What the executed notebook's cells printed (stream outputs), for the terminal."""
    import nbformat

    nb = nbformat.read(str(path), as_version=4)
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                   if o.get("output_type") == "stream" and o.get("name") == "stdout")


class UnknownParameter(UsageError):
    """A ``-p`` name the notebook does not have. Shown as its one line: IPython renders an exception through its
    ``_render_traceback_`` when it has one, so the workbench notebook keeps full tracebacks for the user's own
    cells while this one reads like the batch notebook's."""

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


def refuse_unknown_parameters(history) -> None:
    """A ``-p`` name the parameters cell does not define stops the run with one line. papermill only logs "Passed
    unknown parameter" and runs on, so ``-p kernal matmul`` would sweep the default kernel and export it.
    ``history``: the notebook kernel's ``In`` (the cells run so far, in order); papermill runs its injected cell right
    after the parameters cell. Outside papermill there is no injected cell and nothing to check.

    The first injected cell is the one checked: an executed notebook opened in JupyterLab keeps papermill's cell, and
    a user who edits a value there and runs it again has run some other cell right before it. A cell before it that
    assigns nothing (a kernel restarted and run from the injected cell down) is no parameters cell: nothing to check."""
    cells = [c for c in history if isinstance(c, str)]
    at = next((i for i in range(1, len(cells)) if cells[i].lstrip().startswith(INJECTED)), None)
    if at is None:
        return
    known, given = _assigned(cells[at - 1]), _assigned(cells[at])
    if not known:
        return
    unknown = sorted(given - known)
    if unknown:
        hints = [f"{u!r} (did you mean {close!r}?)" if (close := closest(u, known))
                 else repr(u) for u in unknown]
        raise UnknownParameter(f"unknown parameter {', '.join(hints)}; this notebook's parameters: "
                         f"{', '.join(sorted(known))}")


def _assigned(source: str) -> set[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) \
            else []
        names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names
