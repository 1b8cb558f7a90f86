"""Every notebook runs headless on the CPU (papermill, small parameters), and stays small and output-free in git."""
import json
from pathlib import Path

import pytest

pytest.importorskip("papermill")

from flytune_nb.ui.papermill import NOTEBOOKS, printed_output, run_notebook  # noqa: E402


def test_notebooks_are_committed_without_outputs_and_have_a_parameters_cell():
    for nb in NOTEBOOKS.glob("*.ipynb"):
        cells = json.loads(nb.read_text())["cells"]
        assert not any(c.get("outputs") for c in cells if c["cell_type"] == "code"), nb.name
        assert any("parameters" in c.get("metadata", {}).get("tags", []) for c in cells), nb.name


def test_papermill_reads_every_parameter_of_every_notebook(caplog):
    """papermill parses a parameters cell line by line and gives up on a line with a second "=" (in its comment,
    say): then `-p grid ...` is reported as an unknown parameter, a warning that reads as if the grid were ignored."""
    import ast
    import logging

    import papermill

    for nb in NOTEBOOKS.glob("*.ipynb"):
        cell = next(c for c in json.loads(nb.read_text())["cells"]
                    if "parameters" in c.get("metadata", {}).get("tags", []))
        assigned = [t.id for node in ast.parse("".join(cell["source"])).body if isinstance(node, ast.Assign)
                    for t in node.targets]
        with caplog.at_level(logging.WARNING, logger="papermill"):
            caplog.clear()
            found = list(papermill.inspect_notebook(str(nb)))
        assert found == assigned and not caplog.records, (nb.name, found, [r.getMessage() for r in caplog.records])


def test_batch_sweep_notebook_writes_store_results_exports_and_static_plots(tmp_path):
    """Results land beside the store by default; each figure is plotly JSON with a PNG beside it (with the plotly
    mimetype alone, nbconvert's HTML and code-hosting viewers show nothing)."""
    out = run_notebook("batch_sweep.ipynb", tmp_path / "out.ipynb",
                       {"kernel": "rmsnorm", "grid": "M=2,4 N=300", "dtypes": "fp32", "db": "b.db",
                        "export_dir": "ex", "isolate": False}, cwd=tmp_path)
    assert out.stat().st_size < 1_500_000
    text = printed_output(out)
    assert "M=2 N=300" in text and "M=4 N=300" in text and "trials in b.db (" in text and "this run): 0 of" in text
    rows = json.loads((tmp_path / "b.results.json").read_text())
    assert [r["M"] for r in rows] == [2, 4] and all(r["best_ms"] > 0 and r["speedup"] >= 1 for r in rows)
    assert (tmp_path / "b.results.csv").read_text().count("\n") == 3
    [export] = list((tmp_path / "ex" / "rmsnorm").rglob("N=300,*.json"))
    assert sorted(json.loads(export.read_text()), key=int) == ["2", "4"]
    nb = json.loads(out.read_text())
    outputs = [o for c in nb["cells"] for o in c.get("outputs", [])]
    plots = [o for o in outputs if "application/vnd.plotly.v1+json" in o.get("data", {})]
    assert len(plots) == 4  # the overview, one explorer per shape, the speed-up heat map
    titles = [p["data"]["application/vnd.plotly.v1+json"]["layout"]["title"]["text"] for p in plots]
    assert "M=2 N=300 fp32" in titles[1] and "speed-up" in titles[3]
    if Path("/usr/bin/chromium").exists():  # kaleido draws through a headless Chromium
        import base64

        pngs = [base64.b64decode(p["data"]["image/png"]) for p in plots]
        assert all(png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000 for png in pngs)
    assert not any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in outputs)


def test_a_batch_whose_shape_has_no_passing_config_fails_after_its_report(tmp_path):
    """papermill's exit status is a batch job's only signal: every trial timed out, nothing exported, must not end as
    a success (`flytune sweep` returns 1 for it). The report cells still run first, so the notebook shows why."""
    import papermill

    with pytest.raises(papermill.PapermillExecutionError) as e:
        run_notebook("batch_sweep.ipynb", tmp_path / "out.ipynb",
                     {"kernel": "rmsnorm", "grid": "M=2 N=300", "dtypes": "fp32", "db": "b.db", "export_dir": "ex",
                      "timeout": 0.001}, cwd=tmp_path)
    assert e.value.ename == "RunError" and len(e.value.traceback) == 1
    assert "1 of 1 shapes have no config that passed, so none of them has a winner to export (M=2 N=300 fp32: " in str(
        e.value) and "timeout" in str(e.value)
    nb = json.loads((tmp_path / "out.ipynb").read_text())
    [report] = [c for c in nb["cells"] if "".join(c["source"]).startswith("static_report(")]
    assert [o["output_type"] for o in report["outputs"]] == ["display_data", "display_data"]
    assert not list((tmp_path / "ex").rglob("*.json"))


def test_workbench_notebook_executes_headless(tmp_path):
    out = run_notebook("workbench.ipynb", tmp_path / "wb.ipynb",
                       {"kernel": "rmsnorm", "grid": {"M": "2", "N": "256"}, "dtypes": ["fp32"], "db": "w.db"},
                       cwd=tmp_path)
    nb = json.loads(out.read_text())
    assert not [o for c in nb["cells"] for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for c in nb["cells"]
               for o in c.get("outputs", []))


def test_refuse_unknown_parameters_names_the_typo_and_the_parameters():
    from flytune_nb.errors import UsageError
    from flytune_nb.ui.papermill import refuse_unknown_parameters

    params = 'kernel = "rmsnorm"\ngrid = {"M": "1"}  # M=1\nbudget: int | None = None\n'
    refuse_unknown_parameters(["", params, "x = 1"])  # run in JupyterLab: no injected cell, nothing to check
    refuse_unknown_parameters(["", params, '# Parameters\nkernel = "matmul"\nbudget = 4\n'])
    with pytest.raises(UsageError) as e:
        refuse_unknown_parameters(["", params, '# Parameters\nkernal = "matmul"\nxyz = 1\n', "import os"])
    assert str(e.value) == ("unknown parameter 'kernal' (did you mean 'kernel'?), 'xyz'; this notebook's "
                            "parameters: budget, grid, kernel")


def test_an_executed_notebook_rerun_in_jupyterlab_is_not_refused():
    """An executed notebook keeps papermill's injected cell: a user who edits a value there and runs it again, or
    restarts the kernel and runs from it down, has run no parameters cell right before it; that is no mistyped -p
    name. (ipykernel's In holds each cell as run, '' first.)"""
    from flytune_nb.ui.papermill import refuse_unknown_parameters

    params, injected = 'kernel = "rmsnorm"\ngrid = {"M": "1"}', '# Parameters\nkernel = "matmul"'
    main, report = "wb = Workbench(kernel, grid)", "static_report(results)"
    # Run All, then the injected cell edited and run again, then the main cell
    refuse_unknown_parameters(["", params, injected, main, report, '# Parameters\nkernel = "softmax"', main])
    # a restarted kernel run from the injected cell down
    refuse_unknown_parameters(["", injected, main])


@pytest.mark.parametrize("name", ["batch_sweep.ipynb", "workbench.ipynb"])
def test_a_mistyped_parameter_stops_the_notebook_before_anything_runs(tmp_path, name):
    """papermill itself only warns "Passed unknown parameter" and runs the notebook's defaults."""
    import papermill

    with pytest.raises(papermill.PapermillExecutionError) as e:
        run_notebook(name, tmp_path / "out.ipynb", {"kernal": "matmul", "db": str(tmp_path / "nb.db")})
    assert "unknown parameter 'kernal' (did you mean 'kernel'?)" in str(e.value)
    # one line in the notebook too, not a traceback through flytune_nb's frames
    assert len(e.value.traceback) == 1 and e.value.traceback[0].startswith("UnknownParameter: unknown parameter")
    assert not (tmp_path / "nb.db").exists()
