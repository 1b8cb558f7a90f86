"""Runs a notebook headless (papermill): what `make demo` and batch jobs use."""
from __future__ import annotations

from pathlib import Path

from flytune_nb.core.resources import NOTEBOOKS


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
