"""The package as a user installs it: a wheel built from the checkout, installed into a fresh virtualenv outside the
repository, run from a folder that is not the checkout. The kernels, the committed exports and the notebooks must come
with it (package data, found through importlib.resources), and nothing may reach back into the checkout.

The fresh venv borrows the test venv's third-party packages (torch, triton, papermill ...) through a path entry,
which processes none of that venv's .pth files, so the checkout's editable install stays invisible: what imports as
flytune_nb is the wheel's copy. (Installing torch afresh would add a minute and test pip, not us.)
"""
import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from tests.conftest import REPO


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    root = tmp_path_factory.mktemp("wheel")
    # pip must not see the checkout (a PYTHONPATH pointing at it shows its egg-info as installed already)
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    dist = root / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dist),
                    REPO], check=True, capture_output=True, timeout=300, env=clean)
    wheel = next(dist.glob("flytune_nb-*.whl"))
    env_dir = root / "venv"
    venv.create(env_dir, with_pip=False)
    py = env_dir / "bin" / "python"
    site = Path(subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "borrowed.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", str(wheel)],
                   check=True, capture_output=True, timeout=300, env=clean)
    work = root / "work"  # a user's folder: not the checkout, no kernels/ or exports/ beside it
    work.mkdir()
    env = {"PATH": f"{env_dir / 'bin'}:/usr/bin:/bin", "HOME": str(root), "TRITON_INTERPRET": "1",
           "FLYTUNE_CACHE_DIR": str(root / "cache"), "PYTHONNOUSERSITE": "1"}
    return py, work, env


def _run(installed, *args, timeout=600):
    py, work, env = installed
    return subprocess.run([str(py), *args], cwd=work, env=env, capture_output=True, text=True, timeout=timeout)


def test_the_wheel_imports_its_own_copy_with_its_data(installed):
    p = _run(installed, "-c", "import flytune_nb, pathlib; from flytune_nb.core import resources as r; "
                              "print(flytune_nb.__file__); print(sorted(p.name for p in r.KERNELS.iterdir() "
                              "if (p / '__init__.py').exists())); print((r.EXPORTS / 'fused_moe').is_dir(), "
                              "(r.NOTEBOOKS / 'workbench.ipynb').is_file(), "
                              "(r.KERNELS / 'fused_moe' / 'shape_rules.json').is_file())")
    assert p.returncode == 0, p.stderr
    where, kernels, data = p.stdout.splitlines()[:3]
    assert "site-packages" in where and not where.startswith(str(REPO))
    assert {"fused_add_rmsnorm", "fused_moe", "matmul", "rmsnorm", "softmax"} <= set(eval(kernels))
    assert data == "True True True"  # shape_rules.json: the MoE kernels' topk <= E is data, not code


def test_the_wheel_carries_the_license_its_metadata_names(installed):
    p = _run(installed, "-c", "from importlib import metadata as m; d = m.distribution('flytune_nb'); "
                              "print(d.metadata['License']); "
                              "print(''.join(f.read_text() for f in d.files if f.name == 'LICENSE'))")
    assert p.returncode == 0, p.stderr
    license_name, text = p.stdout.split("\n", 1)
    assert license_name == "Apache-2.0"
    assert "Apache License" in text and "Version 2.0, January 2004" in text


def test_flytune_kernels_lists_the_packaged_kernels(installed):
    p = _run(installed, "-m", "flytune_nb", "kernels")
    assert p.returncode == 0, p.stderr
    for name in ("rmsnorm", "fused_add_rmsnorm", "softmax", "matmul", "fused_moe"):
        assert name in p.stdout


def _files_under(folder):
    """{path: mtime_ns} of every file under folder; empty where it does not exist."""
    return {os.path.join(d, f): os.stat(os.path.join(d, f)).st_mtime_ns
            for d, _, files in os.walk(folder) for f in files}


def test_flytune_demo_runs_the_packaged_batch_notebook(installed):
    # the checkout's own demo_out/ may hold a `make demo` run (README's first command): the installed demo must write
    # beside its working folder and leave that one as it was
    repo_demo = os.path.join(REPO, "demo_out")
    before = _files_under(repo_demo)
    p = _run(installed, "-m", "flytune_nb", "demo", "--quiet")
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    out = installed[1] / "demo_out"
    assert (out / "batch_sweep.ipynb").is_file() and (out / "results.csv").is_file()
    assert "M=4 N=1024" in p.stdout and "speedup" in p.stdout
    assert _files_under(repo_demo) == before


def test_flytune_demo_without_the_notebook_extra_runs_the_plain_sweep(installed):
    # the wheel's own dependencies do not include papermill (the notebook extra): the demo must still run, as the
    # CLI sweep, and say which extra brings the notebook, never end in an ImportError traceback
    hide = "import sys; sys.modules.update(dict.fromkeys(('papermill', 'nbformat', 'ipykernel')))"
    p = _run(installed, "-c", f"{hide}; from flytune_nb.ui.cli import main; sys.exit(main(['demo', '--quiet']))")
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "Traceback" not in p.stderr
    assert "flytune_nb[notebook]" in p.stdout and "speedup" in p.stdout
    assert (installed[1] / "flytune_demo.db").is_file()


def test_export_and_accept_drift_refuse_the_installed_package_exports(installed, tmp_path):
    # `flytune export` with no --out writes into the package's exports/: in a checkout that is how configs are
    # committed, but for a wheel it is site-packages, whose files pip replaces or removes on upgrade or uninstall
    import shutil

    py, work, env = installed
    store = tmp_path / "h200.db"  # GPU timings (the CPU interpreter's are refused there for another reason)
    shutil.copyfile(os.path.join(REPO, "benchmarks", "results", "NVIDIA_H200", "stores", "gemm_11008_exhaustive.db"),
                    store)
    site_exports = Path(_run(installed, "-c", "from flytune_nb.core.resources import EXPORTS; print(EXPORTS)")
                        .stdout.strip())
    before = _files_under(site_exports)
    p = _run(installed, "-m", "flytune_nb", "export", "--db", str(store))
    assert p.returncode == 2 and "installed flytune_nb package's copy" in p.stderr, p.stdout + p.stderr
    assert "Traceback" not in p.stderr and _files_under(site_exports) == before
    p = _run(installed, "-m", "flytune_nb", "check", "--accept-drift", "--quiet")
    assert p.returncode == 2 and "installed flytune_nb package's copy" in p.stderr, p.stdout + p.stderr
    # a folder of the user's takes the same export
    p = _run(installed, "-m", "flytune_nb", "export", "--db", str(store), "--out", str(tmp_path / "mine"))
    assert p.returncode == 0 and list((tmp_path / "mine" / "matmul").rglob("N=11008,*.json")), p.stderr


def _without_widgets(installed, tmp_path):
    """The installed env, less ipywidgets, in this process and in every Python it starts (papermill's kernel):
    the notebook extra half installed, as `pip install flytune_nb papermill ipykernel` leaves it."""
    site = tmp_path / "hide"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import sys\nsys.modules['ipywidgets'] = None\n")
    py, work, env = installed
    return py, work, {**env, "PYTHONPATH": str(site)}


def test_the_notebook_layer_without_its_extra_names_the_extra(installed, tmp_path):
    p = _run(_without_widgets(installed, tmp_path), "-c", "import flytune_nb.ui.notebook")
    assert p.returncode == 1 and p.stderr.strip().splitlines()[-1] == (
        "ModuleNotFoundError: the notebook workbench needs ipywidgets, which is not installed: "
        "pip install 'flytune_nb[notebook]'"), p.stderr


def test_flytune_demo_with_half_the_notebook_extra_runs_the_plain_sweep(installed, tmp_path):
    # papermill and ipykernel are there, the widgets the notebook's cells import are not: the notebook would fail
    # in its third cell, as a papermill traceback
    p = _run(_without_widgets(installed, tmp_path), "-m", "flytune_nb", "demo", "--quiet")
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stdout[-2000:] + p.stderr[-2000:]
    assert "ipywidgets not installed" in p.stdout and "flytune_nb[notebook]" in p.stdout


def test_flytune_version_is_the_wheels(installed):
    # the version a bug report quotes: the package's __version__, which must be the one pip installed
    p = _run(installed, "-m", "flytune_nb", "--version")
    meta = _run(installed, "-c", "import importlib.metadata as m; print(m.version('flytune_nb'))").stdout.strip()
    assert p.returncode == 0 and p.stdout.strip() == f"flytune_nb {meta}", p.stdout + p.stderr
