"""The notebook layer: the only package that imports ipywidgets or plotly. Everything here subscribes to the
headless core's events or displays its results."""
from flytune_nb.ui.notebook.plot import LivePlot, speedup_heatmap, static_figures
from flytune_nb.ui.notebook.workbench import Workbench


def static_report(results, spec=None) -> None:
    """For papermill / headless runs: static plotly figures (JSON in the notebook, no widget state)."""
    for fig in static_figures(results, spec):
        fig.show(renderer="plotly_mimetype")


__all__ = ["LivePlot", "Workbench", "speedup_heatmap", "static_figures", "static_report"]
