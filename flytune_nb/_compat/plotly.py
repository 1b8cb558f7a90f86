"""Importing plotly's FigureWidget quickly.

``plotly.graph_objects.FigureWidget`` imports plotly.io's renderers, which import nbformat, which imports jsonschema,
whose format checkers import ``rfc3987_syntax`` when it is installed (JupyterLab's jupyter-events brings it): that
package builds a Lark grammar at import, 3.7 of the 4.3 s the FigureWidget import took on the 2-core CPU box
(python -X importtime), which is most of the workbench's time to its Run button. Nothing flytune or plotly draws
validates IRIs, so a process that has not imported it yet is told it is absent (jsonschema treats it as optional
and skips that one format); a process that already has it keeps it.
"""
from __future__ import annotations

import sys
import threading

_LOCK = threading.Lock()


def graph_objects():
    """``plotly.graph_objects``, with FigureWidget importable without jsonschema's IRI grammar."""
    with _LOCK:
        if "jsonschema" not in sys.modules and "rfc3987_syntax" not in sys.modules:
            sys.modules["rfc3987_syntax"] = None  # "import rfc3987_syntax" raises ImportError: jsonschema skips it
            try:
                import plotly.graph_objects as go

                go.FigureWidget  # noqa: B018 - the lazy attribute is what imports the widget chain
            finally:
                if sys.modules.get("rfc3987_syntax", 0) is None:
                    del sys.modules["rfc3987_syntax"]  # a later explicit import finds the real package
        import plotly.graph_objects as go

        go.FigureWidget  # noqa: B018
        return go


def sync_widget_state(widget) -> None:
    """Put a FigureWidget's whole figure into its synced state (``_widget_data`` / ``_widget_layout``), which plotly
    sets only at construction and display.

    plotly (6-7, the anywidget FigureWidget) sends every later change as a transient message (``_py2js_update``: set,
    then reset to None) that only a front-end model whose module has loaded applies. The module is ~5 MB; a widget
    created and updated before the browser has loaded it (the workbench's first figures, on a loaded machine) kept
    its first, empty state, and every view drew an empty plot. With the state updated beside the messages, a model
    that initialises late still starts from the current figure; live views keep applying the messages."""
    from copy import deepcopy

    data = getattr(widget, "_data", None)
    layout = getattr(getattr(widget, "_layout_obj", None), "_props", None)
    if data is None or layout is None or not hasattr(widget, "_widget_data"):
        return
    widget._widget_data = deepcopy(data)
    widget._widget_layout = deepcopy(layout)
