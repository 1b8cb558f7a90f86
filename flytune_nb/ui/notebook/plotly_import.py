"""Importing plotly quickly (the one place the workbench imports it first; UI code only, like every plotly import).

``plotly.io`` imports plotly's renderers, which import nbformat, which imports jsonschema, whose format checkers
import ``rfc3987_syntax`` when it is installed (JupyterLab's jupyter-events brings it): that package builds a Lark
grammar at import, 3.7 of the 4.3 s that importing plotly's widget chain took on the 2-core CPU box (python -X
importtime). Nothing flytune or plotly draws validates IRIs, so a process that has not imported it yet is told it is
absent (jsonschema treats it as optional and skips that one format); a process that already has it keeps it.
"""
from __future__ import annotations

import sys
import threading

_LOCK = threading.Lock()


def graph_objects():
    """``plotly.graph_objects``, with plotly.io loaded without jsonschema's IRI grammar."""
    with _LOCK:
        if "jsonschema" not in sys.modules and "rfc3987_syntax" not in sys.modules:
            sys.modules["rfc3987_syntax"] = None  # "import rfc3987_syntax" raises ImportError: jsonschema skips it
            try:
                import plotly.graph_objects  # noqa: F401
                import plotly.io  # noqa: F401 - its renderers are what import nbformat
            finally:
                if sys.modules.get("rfc3987_syntax", 0) is None:
                    del sys.modules["rfc3987_syntax"]  # a later explicit import finds the real package
        import plotly.graph_objects as go
        import plotly.io  # noqa: F401

        return go

