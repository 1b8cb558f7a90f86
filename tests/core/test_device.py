"""Device identification, with the HIP branch driven by simulated properties (we have no AMD GPU)."""
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from flytune_nb.core import device as device_mod
from flytune_nb.core.device import from_properties, interpreter_device, normalise_name
from flytune_nb.core.registry import get_kernel
from flytune_nb.core.targets import TARGETS
from flytune_nb.errors import RunError, UsageError
from tests.conftest import H200_PROPS as H200
from tests.conftest import MI300X_PROPS as MI300X
from tests.conftest import REPO


def test_cuda_properties():
    d = from_properties(H200, hip=False)
    assert (d.backend, d.name, d.arch, d.sm_count, d.l2_bytes) == ("cuda", "NVIDIA_H200", "sm_90", 132, 62914560)
    assert d.is_gpu and d.torch_device == "cuda:0"
    assert d.smem_bytes == 232448  # the opt-in maximum Triton can use, not the 48 KiB static default


def test_hip_properties():
    d = from_properties(MI300X, hip=True)
    assert (d.backend, d.name, d.arch, d.sm_count, d.l2_bytes) == ("hip", "AMD_Instinct_MI300X", "gfx942", 304,
                                                                   4194304)
    assert d.smem_bytes == 65536  # LDS
    assert d.raw_name == "AMD Instinct MI300X"  # torch's own name, which FlyDSL's offline configs are keyed by
    assert from_properties(H200, hip=False).raw_name == "NVIDIA H200" and interpreter_device().raw_name == ""


def test_interpreter_label():
    d = interpreter_device()
    assert (d.backend, d.name, d.is_gpu) == ("interpreter", "CPU_interpreter", False)


def test_names_are_sglangs_spaces_as_underscores_and_nothing_else_but_path_separators():
    """SGLang names its files after get_device_name().replace(" ", "_") and ships files for Intel's
    "Intel(R)_Arc(TM)_Pro_B60_Graphics": the name must be exactly that, parentheses kept. Only a path separator,
    which no file name can hold, is replaced."""
    assert normalise_name("NVIDIA H100 80GB HBM3") == "NVIDIA_H100_80GB_HBM3"
    assert normalise_name("Intel(R) Arc(TM) A770 Graphics") == "Intel(R)_Arc(TM)_A770_Graphics"
    assert normalise_name("NVIDIA A100-SXM4-80GB") == "NVIDIA_A100-SXM4-80GB"
    assert normalise_name(" AMD Radeon Graphics ") == "_AMD_Radeon_Graphics_"  # SGLang does not strip either
    assert normalise_name("../evil/name") == ".._evil_name"
    assert normalise_name("a\\b\0c") == "a_b_c"
    intel = from_properties(SimpleNamespace(**{**vars(H200), "name": "Intel(R) Arc(TM) A770 Graphics"}), hip=False)
    assert (intel.name, intel.raw_name) == ("Intel(R)_Arc(TM)_A770_Graphics", "Intel(R) Arc(TM) A770 Graphics")


def test_hip_space_has_amd_knobs_and_cuda_space_has_none():
    spec = get_kernel("rmsnorm")
    shape = {"M": 64, "N": 4096}
    hip, cuda = from_properties(MI300X, hip=True), from_properties(H200, hip=False)
    hip_space, cuda_space = spec.configs(shape, "bf16", hip), spec.configs(shape, "bf16", cuda)
    assert {c.waves_per_eu for c in hip_space} == {None, 2}
    assert all(c.waves_per_eu is None and not c.hip_only for c in cuda_space)
    # wave64: a 4096-wide row in bf16 on 16 waves is 4 elements per lane; CUDA's 32 warps x 32 lanes also allowed.
    assert max(c.num_warps for c in hip_space) == 16 and max(c.num_warps for c in cuda_space) == 32
    assert sum(c.launch_options("hip").get("waves_per_eu") == 2 for c in hip_space) == len(hip_space) // 2
    d_hip, d_cuda = spec.default(shape, "bf16", hip), spec.default(shape, "bf16", cuda)
    assert d_hip in hip_space
    assert d_cuda in cuda_space and d_cuda.get("BLOCK_N") == 4096 and not d_cuda.hip_only
    # 64 lanes per wave: the same 32 bytes per thread needs half as many waves.
    assert d_hip.num_warps * 2 == d_cuda.num_warps



# -- compiling for a GPU this process does not have ------------------------------------------------------------------
def test_in_compile_mode_current_device_answers_the_target(monkeypatch):
    target = TARGETS["mi300x"].device()
    monkeypatch.setattr(device_mod, "_COMPILING_FOR", [target])
    assert device_mod.current_device() is target and device_mod.compiling_for() is target
    with pytest.raises(RunError, match="one target per process|process of its own"):
        device_mod.enter_compile_mode(TARGETS["mi355x"].device())
    device_mod.enter_compile_mode(target)  # the same target again: nothing to do


def test_compile_mode_is_refused_where_triton_already_runs_its_interpreter():
    """This test process imported Triton with TRITON_INTERPRET=1 (conftest): its kernels could never compile."""
    assert device_mod.interpreting() and "triton.language" in sys.modules
    with pytest.raises(RunError, match="fresh process"):
        device_mod.enter_compile_mode(TARGETS["mi300x"].device())
    with pytest.raises(UsageError):
        device_mod.enter_compile_mode(device_mod.interpreter_device())
    assert device_mod.compiling_for() is None


def test_a_fresh_process_compiles_for_the_target_even_with_the_interpreter_asked_for():
    """No GPU here and TRITON_INTERPRET=1 in the environment: compile mode still compiles for the target: ensure_backend
    leaves the kernels compiled, not interpreted (and sets no TRITON_INTERPRET=1), so the kernel folders' @triton.jit
    functions are real JITFunctions and the launchers see the target."""
    code = (
        "from flytune_nb.core.device import enter_compile_mode, current_device, interpreting\n"
        "from flytune_nb.core.targets import TARGETS\n"
        "enter_compile_mode(TARGETS['mi300x'].device())\n"
        "from flytune_nb.core.registry import get_kernel\n"
        "import sys\n"
        "spec = get_kernel('matmul')\n"
        "mod = sys.modules[spec.run.__module__ + '.kernel']\n"
        "print(type(mod.matmul_kernel).__name__, current_device().name, interpreting())\n")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": REPO}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["JITFunction", "AMD_Instinct_MI300X", "False"]


def _clean_run(code: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter whose environment is a user's plain shell: no TRITON_INTERPRET inherited from
    this test run (Triton decides interpreted or compiled when it is imported, so the order of imports is the test)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, "-W", "always", "-c", code], env={**env, "PYTHONPATH": REPO},
                          capture_output=True, text=True, timeout=300)


SWEEP_IN_PROCESS = (
    "import tempfile, os\n"
    "from flytune_nb import Sweep\n"
    "db = os.path.join(tempfile.mkdtemp(), 'r.db')\n"
    "(r,) = Sweep('rmsnorm', 'M=2 N=64', ['fp32'], isolate=False, db=db, baselines=(), budget=2).run()\n"
    "print(sorted({t.status for t in r.trials}))\n")


@pytest.mark.skipif(device_mod.torch_has_gpu_build(), reason="the import-time choice is for CPU-only torch builds")
def test_triton_imported_right_after_flytune_nb_runs_interpreted():
    out = _clean_run("import flytune_nb\nimport triton\n" + SWEEP_IN_PROCESS)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["['ok']"]


def test_triton_imported_before_flytune_nb_is_one_clear_error_not_failed_trials():
    out = _clean_run("import triton\nimport flytune_nb\n" + SWEEP_IN_PROCESS)
    assert out.returncode == 1
    assert "Triton was imported before flytune_nb chose its CPU interpreter" in out.stderr
    assert "launch_error" not in out.stdout
