"""scripts/bootstrap.sh's choice of torch, the one decision of `make` that a wrong guess makes expensive (a 3 GB CUDA
download on a laptop, or a Triton the GPU results were not measured with). The script runs for real against a stand-in
venv Python that records each pip install, and a stand-in nvidia-smi that lists a GPU or fails as on a machine without
one."""
import platform
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO

FAKE_PYTHON = r"""#!/bin/sh
# `python -m pip install ...`: record the requirements (torch's CUDA wheels bring their Triton, its CPU build none);
# `-c CODE`: import torch / triton succeed once installed
root="$(dirname "$0")/.."
if [ "$1" = -m ] && [ "$2" = pip ]; then
  shift 2
  echo "$*" >> "$root/pip.log"
  case "$*" in
    *torch==*+cpu*) touch "$root/torch-installed" ;;
    *torch==*) touch "$root/torch-installed" "$root/triton-installed" ;;
    *triton==*) touch "$root/triton-installed" ;;
  esac
  exit 0
fi
case "$2" in
  "import torch") [ -e "$root/torch-installed" ] || exit 1 ;;
  "import triton") [ -e "$root/triton-installed" ] || exit 1 ;;
esac
exit 0
"""


def bootstrap(tmp_path, gpu: bool, **env) -> list[str]:
    """The pip install lines bootstrap.sh ran (sglang and flydsl extras left out)."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    py = venv / "bin" / "python"
    py.write_text(FAKE_PYTHON)
    py.chmod(0o755)
    tools = tmp_path / "tools"
    tools.mkdir()
    smi = tools / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-0)'\n" if gpu else
                   "#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate with the driver' >&2\n"
                   "exit 9\n")
    smi.chmod(0o755)
    clean = {"PATH": f"{tools}:/usr/bin:/bin", "HOME": str(tmp_path), "VENV": str(venv), "PYTHON": str(py),
             "FLYTUNE_SGLANG": "0", "FLYTUNE_FLYDSL": "0", **env}
    run = subprocess.run(["bash", str(Path(REPO) / "scripts" / "bootstrap.sh")], cwd=REPO, env=clean,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    lines = (venv / "pip.log").read_text().splitlines()
    return [ln.replace("install -q --disable-pip-version-check ", "") for ln in lines]


linux_x86 = pytest.mark.skipif((platform.system(), platform.machine()) != ("Linux", "x86_64"),
                               reason="the CPU build is asked for by name only on Linux x86_64")


@pytest.mark.skipif(shutil.which("bash") is None, reason="bootstrap.sh is a bash script")
class TestTorchChoice:
    def test_an_nvidia_gpu_gets_the_cuda_torch_whose_triton_the_gpu_results_were_measured_with(self, tmp_path):
        assert bootstrap(tmp_path, gpu=True) == ["torch==2.11.0", "-e .[dev]"]  # its Triton (3.6.0) comes with it

    @linux_x86
    def test_no_gpu_gets_the_cpu_build_by_name_and_the_pinned_triton(self, tmp_path):
        installs = bootstrap(tmp_path, gpu=False)
        assert installs == ["torch==2.13.0+cpu", "triton==3.6.0", "-e .[dev]"]

    @linux_x86
    def test_flytune_torch_cpu_takes_the_cpu_build_beside_a_gpu(self, tmp_path):
        assert bootstrap(tmp_path, gpu=True, FLYTUNE_TORCH="cpu")[0] == "torch==2.13.0+cpu"

    def test_torch_pin_installs_exactly_that_requirement(self, tmp_path):
        assert bootstrap(tmp_path, gpu=True, TORCH_PIN="torch==2.10.0")[0] == "torch==2.10.0"

    def test_an_existing_torch_is_left_alone(self, tmp_path):
        (tmp_path / "venv").mkdir()
        (tmp_path / "venv" / "torch-installed").touch()
        (tmp_path / "venv" / "triton-installed").touch()
        assert bootstrap(tmp_path, gpu=True) == ["-e .[dev]"]


def test_the_readme_names_the_torch_each_machine_gets():
    text = " ".join((Path(REPO) / "README.md").read_text().split())
    assert "lists a GPU, it installs PyPI's `torch==2.11.0`" in text and "`triton==3.6.0`" in text
    script = (Path(REPO) / "scripts" / "bootstrap.sh").read_text()
    assert "TORCH_GPU_VERSION=2.11.0" in script and "TRITON_PIN:-triton==3.6.0" in script
