# What the notebook layer (flytune_nb.ui.notebook) imports from the notebook extra; flytune_nb itself depends on none
# of it. Here, not there, so that asking which are missing imports none of them.
NOTEBOOK_NEEDS = ("ipywidgets", "anywidget", "plotly", "IPython")
