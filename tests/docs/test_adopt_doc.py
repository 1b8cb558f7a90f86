"""docs/adopt.md is a product surface: write its files to a scratch folder and run its commands there, in page
order (the CLI's in this process, its sweep's trials in worker processes that load the adopted kernel by file name);
the app's unmodified kernel must then be served with no benchmark at all."""
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

DOC = Path(REPO) / "docs" / "adopt.md"
FILE = re.compile(r"```python file=(\S+)\n(.*?)```", re.S)
CONSOLE = re.compile(r"```console\n(.*?)```", re.S)


def test_the_page_runs_from_its_files_alone(tmp_path, monkeypatch, capsys):
    from flytune_nb.ui.cli import main

    text = DOC.read_text()
    files = dict(FILE.findall(text))
    assert set(files) == {"my_lib.py", "my_adopt.py", "app.py"}
    for name, body in files.items():
        (tmp_path / name).write_text(body)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("FLYTUNE_CONFIG_DIR", raising=False)
    lines = [ln.strip() for block in CONSOLE.findall(text) for ln in block.splitlines() if ln.strip()]
    assert [ln.split()[:2] for ln in lines] == [["flytune", "kernels"], ["flytune", "sweep"], ["flytune", "export"],
                                                 ["python", "app.py"]]
    outputs = []
    for line in lines[:-1]:
        assert main(shlex.split(line)[1:]) == 0, line
        outputs.append(capsys.readouterr().out)
    kernels, sweep, exported = outputs
    assert "silu_mul_kernel" in kernels and "M,N" in kernels
    assert "silu_mul_kernel M=1 N=300 fp32" in sweep and "9/9" in sweep
    assert "N=300,device_name=CPU_interpreter,dtype=fp32.json" in exported

    # `python app.py` as a user runs it from a plain shell: a fresh process without this test run's TRITON_INTERPRET
    # (Triton picks interpreted or compiled at its import). The driver imports what app.py imports, in its order,
    # then counts the benchmark calls of the very kernel object app.py will use.
    driver = ("import flytune_nb, runpy, my_lib\n"
              "from flytune_nb._compat.triton import count_benchmarks\n"
              "with count_benchmarks(my_lib.silu_mul_kernel, lambda fn, quantiles=None, **kw: [1.0, 1.0, 1.0]) as c:\n"
              "    runpy.run_path('app.py', run_name='__main__')\n"
              "print('benchmark calls:', c.calls)\n")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, "-c", driver], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                         env={**env, "PYTHONPATH": os.pathsep.join([str(tmp_path), REPO])})
    assert run.returncode == 0, run.stderr[-3000:]
    app = run.stdout
    assert "benchmark calls: 0" in app and "1 autotuner keys primed from 1 files" in app and "(300, 'torch.float32'" in app
    assert "launched: BLOCK:" in app
    assert float(re.search(r"rel. error: (\S+)", app).group(1)) < 1e-5
