"""README.md's five-minute walk-through cannot drift from the workbench notebook it sends the user to."""
import json
import re
import shlex
from pathlib import Path

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
