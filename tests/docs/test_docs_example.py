"""docs/kernel-plugins.md is a product surface: extract its files and its usage block, and run them."""
import re
from pathlib import Path

from tests.conftest import REPO

DOC = Path(REPO) / "docs" / "kernel-plugins.md"
BLOCK = re.compile(r"```python (file|run)=(\S+)\n(.*?)```", re.S)


def test_worked_example_runs_from_the_page_alone(tmp_path, capsys):
    blocks = BLOCK.findall(DOC.read_text())
    files = {name: body for kind, name, body in blocks if kind == "file"}
    assert set(files) == {f"silu_mul/{p}" for p in ("__init__.py", "kernel.py", "configs.py", "heuristic.py",
                                                    "reference.py")}
    for name, body in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(body)
    usage = next(body for kind, name, body in blocks if kind == "run" and name == "usage")
    exec(compile(usage, str(DOC), "exec"), {"KERNEL_DIR": str(tmp_path)})
    out = capsys.readouterr().out
    assert "config came from: default" in out and "BLOCK=" in out


def test_shell_usage_from_the_page(tmp_path, monkeypatch, capsys):
    from flytune_nb.ui.cli import main

    for kind, name, body in BLOCK.findall(DOC.read_text()):
        if kind == "file":
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name).write_text(body)
    monkeypatch.setenv("FLYTUNE_KERNEL_PATH", str(tmp_path))
    assert main(["kernels"]) == 0
    assert main(["sweep", "silu_mul", "--grid", "M=1,2 N=300", "--dtype", "bf16"]) == 0
    out = capsys.readouterr().out
    assert "silu_mul M=1 N=300 bf16 on" in out and out.count(" ok ") >= 4


def test_the_example_heuristic_is_in_its_space_for_every_size(tmp_path):
    from flytune_nb.core.device import current_device
    from flytune_nb.core.registry import get_kernel

    for kind, name, body in BLOCK.findall(DOC.read_text()):
        if kind == "file":
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name).write_text(body)
    spec, dev = get_kernel("silu_mul", [tmp_path]), current_device()
    for M in (1, 3, 64, 4096):
        for N in (1, 8, 100, 1000, 4096, 14336):
            shape = {"M": M, "N": N}
            assert spec.default(shape, "bf16", dev) in spec.configs(shape, "bf16", dev), shape
