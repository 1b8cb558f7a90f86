"""docs/guide.md cannot rot: every console command and python block on it runs here, in page order, from a scratch
folder laid out as the repository root (its examples/ and flytune_nb/); its troubleshooting section names every
warning and every error class the package can raise; and the consumer example serves from real exports."""
import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from flytune_nb.core.resources import EXPORTS, NOTEBOOKS
from tests.conftest import REPO

ROOT = Path(REPO)
GUIDE = ROOT / "docs" / "guide.md"
BLOCK = re.compile(r"```(console|python)\n(.*?)```", re.S)


def _env(tmp_path):
    env = dict(os.environ, FLYTUNE_CACHE_DIR=str(tmp_path / "cache"), TRITON_INTERPRET="1",
               PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}", PYTHONPATH=str(ROOT))
    env.pop("FLYTUNE_CONFIG_DIR", None)
    env.pop("FLYTUNE_AUTOTUNE", None)
    return env


def test_every_command_and_block_of_the_guide_runs(tmp_path, monkeypatch, capsys):
    blocks = BLOCK.findall(GUIDE.read_text())
    assert sum(k == "console" for k, _ in blocks) >= 6 and sum(k == "python" for k, _ in blocks) >= 4
    # the repository root's layout, which the page's commands are typed from
    for name, where in (("examples", ROOT / "examples"), ("flytune_nb", NOTEBOOKS.parent)):
        (tmp_path / name).symlink_to(where)
    assert (tmp_path / "flytune_nb" / "exports").resolve() == EXPORTS.resolve()
    env = _env(tmp_path)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    ran = []
    for kind, body in blocks:
        if kind == "python":
            exec(compile(body, str(GUIDE), "exec"), namespace)
            ran.append(body.splitlines()[0])
            continue
        for line in body.splitlines():
            if not line.startswith("$ "):
                continue
            cmd = line[2:]
            p = subprocess.run(["bash", "-c", cmd], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
            # Only the regression guard on interpreter timings may report a drift (exit 1); nothing may exit 2.
            allowed = (0, 1) if cmd.startswith("flytune check runs/") else (0,)
            assert p.returncode in allowed, (cmd, p.returncode, p.stdout[-2000:], p.stderr[-2000:])
            assert "Traceback" not in p.stderr, (cmd, p.stderr[-2000:])
            ran.append((cmd, p.stdout))
    out = dict((c, o) for c, o in (r for r in ran if isinstance(r, tuple)))
    lookup = next(o for c, o in out.items() if c.startswith("flytune lookup"))
    assert "artifact" in lookup
    serve = next(o for c, o in out.items() if c.startswith("python examples/serve.py"))
    assert "zero search" in serve and "'artifact'" in serve
    assert (tmp_path / "runs" / "batch_exports").is_dir() and (tmp_path / "runs" / "check.md").exists()
    printed = capsys.readouterr().out
    assert "search serving" in printed and "residual updated once" in printed and "artifact" in printed


def _static_fragments(call: ast.Call) -> str:
    """The literal parts of a warning message (f-string constant parts); none for a helper that passes its
    argument on to warnings.warn (its callers' messages are read instead)."""
    parts = []
    for node in ast.walk(call.args[0]):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            parts.append(node.value)
    return parts


def test_troubleshooting_names_every_warning_and_error_class():
    text = GUIDE.read_text()
    section = text[text.index("## 6. Troubleshooting"):]
    missing = []
    for path in (ROOT / "flytune_nb").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_") and any(
                    getattr(b, "id", "").endswith(("Error", "Exception", "Warning")) or
                    getattr(b, "id", "") in ("LookupError", "ValueError", "RuntimeError")
                    for b in node.bases):
                if node.name not in section:
                    missing.append(f"class {node.name} ({path.name})")
            called = getattr(node.func, "attr", "") or getattr(node.func, "id", "") if isinstance(node, ast.Call) else ""
            # warnings.warn, and helpers named *_warn whose callers hand them the message
            if called.endswith("warn") and node.args and _static_fragments(node):
                stem = max(_static_fragments(node), key=len).strip(" ;:,")
                if stem.split("(")[0].strip() not in section:
                    missing.append(f"warning '{stem}' ({path.name})")
    assert missing == []


def test_serve_example_reports_sources_configs_and_overhead(tmp_path):
    """The consumer example against exports made here: every batch size resolves from an artifact (nearest M),
    nothing is searched, and the launcher's per-call overhead is measured."""
    from flytune_nb.artifacts.export import export
    from flytune_nb.engine.store import Store
    from flytune_nb.engine.sweep import Sweep

    db = tmp_path / "s.db"
    Sweep("rmsnorm", "M=1,8 N=128", ["fp32"], db=db, isolate=False, baselines=(), strategy="random", budget=2).run()
    export(Store(db), tmp_path / "exports")
    env = _env(tmp_path)
    p = subprocess.run([sys.executable, str(ROOT / "examples" / "serve.py"), "--kernel", "rmsnorm", "--shape", "N=128",
                        "--dtype", "fp32", "--config-dir", str(tmp_path / "exports"), "--batch-sizes", "1,3,8,20",
                        "--calls", "30", "--json", str(tmp_path / "r.json")], env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads((tmp_path / "r.json").read_text())
    assert set(r["first_call_source"].values()) == {"artifact"}
    table = json.loads(next((tmp_path / "exports" / "rmsnorm").glob("triton_*/*.json")).read_text())
    assert r["configs"]["3"] == r["configs"]["1"] and r["configs"]["20"] == r["configs"]["8"]  # nearest M
    from flytune_nb.core.config import Config
    assert r["configs"]["8"] == str(Config.from_dict(table["8"]))
    assert r["sources"]["memory"] == 30 - 4 and "search" not in r["sources"]
    assert r["overhead"]["raw_us"] > 0 and r["overhead"]["tuned_us"] > 0


def _serve_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("flytune_serve_example", ROOT / "examples" / "serve.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_serve_example_refuses_bad_input_with_one_line(tmp_path, monkeypatch, capsys):
    """A typo on the consumer example's command line is one `serve.py: error:` line and exit 2, before anything is
    launched: not a traceback (unknown kernel or dtype, a shape that is not AXIS=int), not a report of calls served
    from nothing (--calls 0, a --config-dir that does not exist), and not M silently replaced by the drawn batch
    sizes when --shape names it."""
    import random

    monkeypatch.setenv("FLYTUNE_AUTOTUNE", "0")
    monkeypatch.setenv("FLYTUNE_CONFIG_DIR", "")  # recorded as it was, so that teardown puts back exactly that
    monkeypatch.delenv("FLYTUNE_CONFIG_DIR")
    serve = _serve_module()
    n = random.choice((128, 256, 512))
    cases = [
        (["--kernel", "rmsnrm", "--shape", f"N={n}"], "unknown kernel 'rmsnrm'. Did you mean 'rmsnorm'?"),
        (["--shape", f"N={n}", "--dtype", "bf61"], "unknown dtype 'bf61'"),
        (["--kernel", "matmul", "--shape", f"N={n}", f"K={n}", "--dtype", "fp32"], "matmul supports bf16, fp16"),
        (["--shape", f"N={n}x"], f"axis N: '{n}x' is not a positive integer"),
        (["--shape", f"n={n}"], "unknown ['n'] (did you mean N?)"),
        (["--kernel", "matmul", "--shape", f"N={n}"], "missing ['K']"),
        (["--shape", f"N={n}", "M=8"], "M is drawn from --batch-sizes or --max-batch"),
        (["--shape", f"N={n},{2 * n}"], "--shape takes one value per axis"),
        (["--shape", f"N={n}", "--batch-sizes", "1,x"], "axis M: 'x' is not a positive integer"),
        (["--shape", f"N={n}", "--config-dir", str(tmp_path / "nope")], "is not a folder"),
        (["--shape", f"N={n}", "--json", str(tmp_path / "no" / "r.json")], "no folder"),
        (["--shape", f"N={n}", "--json", str(tmp_path)],
         f"is a folder; name a file in it, e.g. {tmp_path / 'serve.json'}"),
    ]
    for argv, says in cases:
        assert serve.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("serve.py: error: ") and says in err and err.count("\n") == 1, (argv, err)
    for flag in ("--calls", "--max-batch", "--overhead-calls"):
        for bad in ("0", "-3", "x"):
            with pytest.raises(SystemExit) as stop:
                serve.main(["--shape", f"N={n}", flag, bad])
            assert stop.value.code == 2
            assert f"argument {flag}: must be a whole number >= 1, got '{bad}'" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # nothing was written
    assert "FLYTUNE_CONFIG_DIR" not in os.environ  # a refused --config-dir is not left set for what runs next


def test_serve_example_refuses_a_json_path_that_is_a_folder_before_serving(tmp_path, monkeypatch, capsys):
    """--json naming a folder is bad input like --json in a missing folder: one line and exit 2 before the stream,
    not an IsADirectoryError traceback after it was served."""
    monkeypatch.setenv("FLYTUNE_AUTOTUNE", "0")
    serve = _serve_module()
    assert serve.main(["--shape", "N=256", "--dtype", "fp32", "--calls", "1", "--overhead-calls", "1",
                       "--json", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("serve.py: error: ") and "is a folder" in err and err.count("\n") == 1, err
    assert not list(tmp_path.iterdir())
