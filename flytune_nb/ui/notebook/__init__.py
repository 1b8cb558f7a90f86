"""The notebook layer: the only package that imports ipywidgets or plotly. Everything here subscribes to the
headless core's events or displays its results. plotly is imported on first use (figures, static reports), never by
importing this package: the workbench shows its controls before plotly has loaded."""
from flytune_nb.ui import NOTEBOOK_NEEDS

try:
    from flytune_nb.ui.notebook.workbench import Workbench
except ModuleNotFoundError as e:
    if (e.name or "").split(".")[0] not in NOTEBOOK_NEEDS:
        raise
    # a kernel that has flytune_nb but not the extra (a Jupyter of another environment, VS Code): say which install
    # brings it rather than only the first module that happened to be missing
    raise ModuleNotFoundError(f"the notebook workbench needs {e.name}, which is not installed: "
                              f"pip install 'flytune_nb[notebook]'", name=e.name) from None


def static_figures(results, spec=None):
    from flytune_nb.ui.notebook.report import static_figures as figures

    return figures(results, spec)


def static_report(results, spec=None, image: bool = True) -> None:
    """For papermill / headless runs: each figure as plotly JSON (interactive in JupyterLab, no widget state) with
    a PNG beside it (kaleido), so nbconvert's HTML and code-hosting viewers show it too."""
    from flytune_nb.ui.notebook.report import static_report as report

    report(results, spec, image=image)


__all__ = ["Workbench", "static_figures", "static_report"]
