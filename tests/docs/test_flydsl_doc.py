"""docs/flydsl.md: its compile example runs as written, and the pages users start from link to it."""
import re
from pathlib import Path

from tests.conftest import REPO

DOC = Path(REPO) / "docs" / "flydsl.md"


def test_the_compile_example_runs_and_reports_clean_objects_for_both_targets(flydsl_compiler, capsys, monkeypatch):
    block = re.search(r"```python run=compile\n(.*?)```", DOC.read_text(), re.S).group(1)
    monkeypatch.delenv("ROCM_PATH")  # the example makes its own linker folder
    exec(compile(block, str(DOC), "exec"), {})
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split()[:2] for ln in lines] == [["gfx942", "True"], ["gfx950", "True"]]
    assert all(" 0 spills " in ln and "VGPRs" in ln for ln in lines)


def test_the_plugin_guide_and_the_user_guide_link_to_it():
    for page in ("kernel-plugins.md", "guide.md"):
        assert "(flydsl.md)" in (Path(REPO) / "docs" / page).read_text(), page
    assert "docs/flydsl.md" in (Path(REPO) / "README.md").read_text()
