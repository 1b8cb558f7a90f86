"""README.md's five-minute walk-through cannot drift from the workbench notebook it sends the user to."""
import json
import re
import shlex
from pathlib import Path

import pytest

from flytune_nb.core.registry import get_kernel
from flytune_nb.core.resources import NOTEBOOKS
from flytune_nb.core.shapes import parse_grid
from tests.conftest import REPO


def test_the_five_minute_lookup_asks_for_a_file_the_workbench_default_grid_exports():
    """"In the workbench: pick rmsnorm, keep the grid, press Run ... export", then `flytune lookup ... --dir
    flytune-workbench/exports`: that lookup must name a non-batch shape and dtype the notebook's default grid sweeps,
    else the user who followed every step reads `no config file ...; using the heuristic default` instead of the
    artifact the page promises."""
    readme = (Path(REPO) / "README.md").read_text()
    line = next(m.group(1) for m in re.finditer(r"^\.venv/bin/(flytune lookup .*)$", readme, re.M)
                if "flytune-workbench/exports" in m.group(1))
    words = shlex.split(line.split("#")[0])
    kernel = words[2]
    shape = " ".join(w for w in words[3:] if "=" in w and not w.startswith("--"))
    dtype = words[words.index("--dtype") + 1]
    cell = json.loads((NOTEBOOKS / "workbench.ipynb").read_text())["cells"]
    params: dict = {}
    exec("".join(next(c for c in cell if "parameters" in c.get("metadata", {}).get("tags", []))["source"]), params)
    spec = get_kernel(kernel)
    assert kernel == params["kernel"], (kernel, params["kernel"])
    assert dtype in params["dtypes"], (dtype, params["dtypes"])
    (asked,) = parse_grid(shape, spec.axes, noun="shape", batch_axis=spec.batch_axis)
    swept = parse_grid(params["grid"], spec.axes, batch_axis=spec.batch_axis)
    files = {tuple((a, s[a]) for a in spec.axes if a != spec.batch_axis) for s in swept}
    assert tuple((a, asked[a]) for a in spec.axes if a != spec.batch_axis) in files, (asked, sorted(files))


def test_the_pages_read_a_store_so_that_a_mistyped_path_is_an_error(tmp_path, monkeypatch):
    """README and the guide show how to read a results store into a DataFrame. Copied with a mistyped path, that line
    must say there is no store there: Store(path) on its own is the writer's constructor, which makes an empty store
    at any path, so the reader got an empty frame (and a stray database file) without a word."""
    import random

    from flytune_nb.engine.store import StoreError

    monkeypatch.chdir(tmp_path)
    found = []
    for page in (Path(REPO) / "README.md", Path(REPO) / "docs" / "guide.md"):
        for m in re.finditer(r"Store\(\"([^\"]+)\"([^)]*)\)\.frame\(([^)]*)\)", page.read_text()):
            typo = f"{m.group(1)}.{random.randrange(10**6)}"  # a path that holds nothing
            found.append(m.group(0))
            code = f"Store({typo!r}{m.group(2)}).frame({m.group(3)})"
            with pytest.raises(StoreError, match="no results store"):
                eval(code, {"Store": __import__("flytune_nb").Store})
            assert list(tmp_path.rglob("*")) == [], code
    assert len(found) >= 2, found
