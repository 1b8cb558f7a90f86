"""The FlyDSL backend on a machine without an AMD GPU: what can be checked here is checked against FlyDSL itself
(it compiles real gfx942 / gfx950 code objects on the CPU); launching needs HIP, and a launch without it aborts the
worker it runs in, which the sweep records as that config's crash."""
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

from flytune_nb.core.config import Config, ConfigError
from flytune_nb.core.device import from_properties, interpreter_device
from flytune_nb.core.key import make_key
from flytune_nb.core.registry import get_kernel, load_folder
from flytune_nb.errors import KernelUnavailable, UsageError
from tests.conftest import MI300X_PROPS, REPO

KERNELS = ("flydsl_rmsnorm", "flydsl_fused_add_rmsnorm")
N4096 = {"M": 8, "N": 4096}


def _cfg(bt, vec, wpe=None):
    return Config({"BLOCK_THREADS": bt, "VEC": vec}, num_warps=None, num_stages=None, waves_per_eu=wpe)


# -- listing, availability -----------------------------------------------------------------------------------------
def test_listing_kernels_imports_no_flydsl():
    """`flytune kernels` lists the FlyDSL kernels with their space size without importing FlyDSL (~2 s on top of
    torch on this machine), so listing pays none of that."""
    code = ("import sys; from flytune_nb.ui.cli import main; rc = main(['kernels']); "
            "print('IMPORTED' if any(m == 'flydsl' or m.startswith('flydsl.') for m in sys.modules) else 'CLEAN'); "
            "sys.exit(rc)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PYTHONPATH=REPO))
    assert p.returncode == 0, p.stderr[-2000:]
    rows = {line.split()[0]: line for line in p.stdout.splitlines() if line.startswith("flydsl_")}
    assert p.stdout.strip().endswith("CLEAN")
    from flytune_nb.backends import flydsl

    if flydsl.available():  # 8 structural configs x 4 waves_per_eu at N=4096
        assert "32 @ M=4096 N=4096" in rows["flydsl_rmsnorm"] and "32 @" in rows["flydsl_fused_add_rmsnorm"]
    else:
        assert "unavailable: needs flydsl: pip install 'flytune_nb[flydsl]'" in rows["flydsl_rmsnorm"]


def test_without_flydsl_the_folders_say_how_to_install_it(tmp_path, monkeypatch):
    from flytune_nb.backends import flydsl
    from flytune_nb.core.registry import discover

    folders = discover()
    monkeypatch.setattr(flydsl, "available", lambda: False)
    for name in KERNELS:
        copy = tmp_path / name  # a copy: the registry keeps the folder it already imported
        shutil.copytree(folders[name], copy, ignore=shutil.ignore_patterns("__pycache__"))
        with pytest.raises(KernelUnavailable, match=rf"^{name}: needs flydsl: pip install 'flytune_nb\[flydsl\]'$"):
            load_folder(copy)


def test_spaces_hold_no_warps_or_stages_and_the_heuristic_is_in_them():
    """FlyDSL has no num_warps or num_stages: a config neither carries nor exports them. The default is a member of
    the space for every row length and dtype (ragged rows, odd N, rows too wide to stay spill-free included)."""
    for name in KERNELS:
        spec = get_kernel(name)
        assert spec.backend == "flydsl" and spec.dtypes == ("bf16", "fp16", "fp32")
        for dtype in spec.dtypes:
            for N in (1, 7, 64, 100, 1000, 1024, 4096, 5120, 8192, 14336, 32768, 65536):
                shape = {"M": 16, "N": N}
                space = spec.configs(shape, dtype, interpreter_device())
                assert space and len(set(space)) == len(space), (name, dtype, N)
                for c in space:
                    assert c.num_warps is None and c.num_stages is None
                    assert set(c.to_dict()) <= {"BLOCK_THREADS", "VEC", "waves_per_eu"}
                    assert N % c["VEC"] == 0 and c["BLOCK_THREADS"] % 64 == 0
                assert spec.default(shape, dtype, interpreter_device()) in space, (name, dtype, N)
    assert get_kernel("flydsl_fused_add_rmsnorm").mutates == ("residual",)


# -- the tuning key --------------------------------------------------------------------------------------------------
def test_a_flydsl_kernels_key_carries_flydsl_its_compiler_and_its_environment(flydsl_installed, monkeypatch):
    spec = get_kernel("flydsl_rmsnorm")
    dev = from_properties(MI300X_PROPS, hip=True)
    inputs = spec.make_inputs(N4096, "bf16", interpreter_device())
    for k in ("FLYDSL_COMPILE_OPT_LEVEL", "ARCH", "FLYDSL_GPU_ARCH"):
        monkeypatch.delenv(k, raising=False)
    key = make_key(spec, N4096, "bf16", inputs, dev)
    tc = dict(key.toolchain)
    assert tc["flydsl"] == flydsl_installed.version() and "triton" not in tc and "cuda" not in tc
    assert len(tc["flydsl_compiler"]) == 16 and int(tc["flydsl_compiler"], 16) >= 0
    # FlyDSL's own compile-cache fingerprint, as its autotuner reads it
    import hashlib

    from flydsl.compiler.jit_function import _flydsl_key

    assert tc["flydsl_compiler"] == hashlib.sha256(_flydsl_key().encode()).hexdigest()[:16]
    for var, value in (("FLYDSL_COMPILE_OPT_LEVEL", "3"), ("FLYDSL_GPU_ARCH", "gfx950"), ("ARCH", "gfx950")):
        monkeypatch.setenv(var, value)
        assert make_key(spec, N4096, "bf16", inputs, dev).digest != key.digest, var
        monkeypatch.delenv(var)
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "0")  # Triton's codegen variables are not FlyDSL's
    assert make_key(spec, N4096, "bf16", inputs, dev).digest == key.digest


# -- compiling every config on the CPU -------------------------------------------------------------------------------
def _compile_cases():
    """Every config of each kernel's space at its example shape in bf16 (N=4096), and the heuristic default at row
    lengths and dtypes that take the other code paths (ragged last tiles, one wave, fp32's 4-wide vectors)."""
    cases = []
    for name in KERNELS:
        spec = get_kernel(name)
        shape = spec.example()
        cases += [(name, shape, "bf16", c) for c in spec.configs(shape, "bf16", interpreter_device())]
        for N, dtype in ((1024, "bf16"), (5120, "bf16"), (14336, "fp16"), (4096, "fp32"), (100, "fp32")):
            s = {"M": 64, "N": N}
            cases.append((name, s, dtype, spec.default(s, dtype, interpreter_device())))
    return cases


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_every_config_compiles_clean_for_gfx942_and_gfx950(arch, flydsl_compiler, request):
    """No LLVM error line, no spill, LDS within the target's limit, a code object for the right target. A compile
    costs 0.1-0.3 s here; the reports are kept in pytest's cache under a key of everything that could change them
    (kernel source, FlyDSL's compiler fingerprint, target, config, codegen environment), so a rerun with nothing
    changed compiles nothing, and a failing report fails again."""
    import hashlib

    backend = flydsl_compiler
    failures, compiled, n = [], 0, 0
    for name, shape, dtype, config in _compile_cases():
        spec = get_kernel(name)
        key = "flydsl-compile/" + hashlib.sha256(json.dumps(
            [spec.fingerprint, backend.toolchain(), backend.codegen_env(), arch, shape, dtype, config.to_dict()],
            sort_keys=True).encode()).hexdigest()[:24]
        report = request.config.cache.get(key, None)
        if report is None:
            r = backend.compile_report(spec, shape, dtype, config, arch)
            report = {"problems": list(r.problems), "kernels": [k.kernel for k in r.kernels],
                      "vgpr": [k.vgpr for k in r.kernels], "lds": [k.lds for k in r.kernels]}
            request.config.cache.set(key, report)
            compiled += 1
        n += 1
        assert report["kernels"] == [f"flytune_{name.removeprefix('flydsl_')}"], (name, config, report)
        if report["problems"]:
            failures.append((name, shape, dtype, str(config), report["problems"]))
    assert n >= 2 * 32 + 10
    assert failures == []


def test_waves_per_eu_reaches_llvm_as_a_hint_and_does_not_stick(flydsl_compiler):
    """Outside the space (64 threads x 64 bf16 each at N=4096) the row needs 80 VGPRs; waves_per_eu=8 caps them at
    64 and LLVM spills (the hint arrived). Compiled plainly again afterwards, it is 80 VGPRs again: the hint is
    applied around that one compile, not written into the function."""
    backend = flydsl_compiler
    spec = get_kernel("flydsl_rmsnorm")
    meta = spec.make_inputs({"M": 2, "N": 4096}, "bf16", _meta_device())
    with backend.target("gfx942"):
        counts = []
        for wpe in (None, 8, None):
            backend.clear()
            spec.run(meta, _cfg(64, 8, wpe))
            entry = next(iter(backend._COMPILED.values()))
            r = backend.resources(entry.compiled)[0]
            counts.append((r.vgpr, r.vgpr_spill, r.scratch > 0))
    assert counts[0][0] == 80 and counts[0][1] == 0
    assert counts[1][0] <= 64 and counts[1][1] > 0 and counts[1][2]
    assert counts[2] == counts[0]


def _meta_device():
    import dataclasses

    return dataclasses.replace(interpreter_device(), torch_device="meta")


def test_one_compile_per_config_and_specialisation(flydsl_compiler):
    """M, the row pitch and the data are runtime values (FlyDSL's tensors are layout-dynamic): no new compile. A new
    config, dtype or N is a new specialisation. Meta inputs compile and launch nothing."""
    backend = flydsl_compiler
    spec = get_kernel("flydsl_rmsnorm")
    backend.clear()
    with backend.target("gfx942"):
        def run(shape, dtype="bf16", config=_cfg(256, 8), **over):
            inputs = {**spec.make_inputs(shape, dtype, _meta_device()), **over}
            spec.run(inputs, config)
            return len(backend._COMPILED)

        assert run({"M": 8, "N": 4096}) == 1
        assert run({"M": 1, "N": 4096}) == 1 and run({"M": 4096, "N": 4096}) == 1
        pitched = torch.empty(8, 8192, dtype=torch.bfloat16, device="meta")[:, :4096]  # row stride 8192
        assert run({"M": 8, "N": 4096}, x=pitched) == 1
        assert run({"M": 8, "N": 4096}, config=_cfg(512, 8)) == 2
        assert run({"M": 8, "N": 4096}, config=_cfg(256, 8, 2)) == 3  # a hint is another binary
        assert run({"M": 8, "N": 4096}, dtype="fp16") == 4
        assert run({"M": 8, "N": 2048}) == 5


def test_configs_flydsl_cannot_take_are_refused_before_compiling(flydsl_compiler):
    spec = get_kernel("flydsl_rmsnorm")
    meta = spec.make_inputs({"M": 2, "N": 4096}, "bf16", _meta_device())
    with pytest.raises(ConfigError, match="num_warps is not a FlyDSL option"):
        spec.run(meta, Config({"BLOCK_THREADS": 256, "VEC": 8}, num_warps=4, num_stages=None))
    with pytest.raises(ConfigError, match="has no parameter 'BLOCK_N'"):
        spec.run(meta, Config({"BLOCK_THREADS": 256, "VEC": 8, "BLOCK_N": 4}, num_warps=None, num_stages=None))
    from flytune_nb.backends.flydsl import launch

    x = torch.empty(2, 4096, dtype=torch.bfloat16, device="meta")
    with pytest.raises(ConfigError, match="eps=1: expects float, got int"):  # FlyDSL itself would not check
        launch(spec.extra["flydsl"].launcher(), (x, x[0], x, 2), _cfg(256, 8), N=4096, dtype="bf16", eps=1)


def test_an_llvm_error_line_is_the_configs_compile_error(flydsl_compiler, monkeypatch):
    """LLVM rejects 200000 bytes of LDS with an `error:` line on fd 2, and FlyDSL still returns a function: the launch
    path turns that into a compile error (a trial records it as compile_error), the report lists it. FlyDSL caches
    such a module like any other, and its cache hit prints nothing: the LDS read from the object's metadata still
    refuses it."""
    from flytune_nb.measure.trial import classify
    from tests.backends import flydsl_probe

    backend = flydsl_compiler
    spec = flydsl_probe.lds_hog_spec()
    inputs, config = spec.make_inputs({"N": 64}, "fp32", _meta_device()), spec.default({"N": 64}, "fp32", None)
    with backend.target("gfx942"):
        monkeypatch.setenv("FLYDSL_RUNTIME_ENABLE_CACHE", "0")
        backend.clear()
        with pytest.raises(backend.FlyDSLCompileError, match=r"LLVM: error: .*local memory \(200000\) exceeds limit"
                           ) as e:
            spec.run(inputs, config)
        monkeypatch.delenv("FLYDSL_RUNTIME_ENABLE_CACHE")
        backend.clear()
        with pytest.raises(backend.FlyDSLCompileError, match="200000 bytes of LDS exceed gfx942's 65536"):
            spec.run(inputs, config)  # served by FlyDSL's memory cache: no LLVM this time
    assert classify(e.value) == "compile_error"
    for arch, limit in (("gfx942", 65536), ("gfx950", 163840)):
        r = backend.compile_report(spec, {"N": 64}, "fp32", spec.default({"N": 64}, "fp32", None), arch)
        assert not r.ok and r.kernels[0].lds == 200000
        assert any(f"local memory (200000) exceeds limit ({limit})" in p for p in r.errors)
        assert any("over" in p and str(limit) in p for p in r.problems)


def test_a_target_flydsl_does_not_compile_for_is_a_usage_error(flydsl_installed):
    spec = get_kernel("flydsl_rmsnorm")
    with pytest.raises(UsageError, match="arch must be one of gfx942, gfx950, got 'gfx90a'"):
        flydsl_installed.compile_report(spec, N4096, "bf16", _cfg(256, 8), "gfx90a")


def test_a_config_without_a_knob_is_one_line_naming_the_knob_and_the_kernel(flydsl_installed):
    spec = get_kernel("flydsl_rmsnorm")
    half = Config({"BLOCK_THREADS": 256}, num_warps=None, num_stages=None)
    with pytest.raises(ConfigError, match=r"^flydsl_rmsnorm config BLOCK_THREADS=256 lacks VEC \(its knobs: "
                                          r"BLOCK_THREADS, VEC\)$"):
        flydsl_installed.compile_report(spec, N4096, "bf16", half, "gfx942")


def test_a_missing_linker_says_where_it_was_looked_for_and_what_to_install_or_set(flydsl_compiler, tmp_path,
                                                                                 monkeypatch):
    """FlyDSL's own message is only `lld invocation failed`. Once ROCM_PATH names a linker, the same config compiles:
    the failed report is not served again."""
    spec, shape, config = get_kernel("flydsl_rmsnorm"), {"M": 2, "N": 256}, _cfg(64, 4)
    linker = os.environ["ROCM_PATH"]
    monkeypatch.setenv("ROCM_PATH", str(tmp_path))
    (problem,) = flydsl_compiler.compile_report(spec, shape, "bf16", config, "gfx942").problems
    assert f"lld invocation failed (there is no {tmp_path}/llvm/bin/ld.lld: point ROCM_PATH at" in problem
    assert "linker_root(folder)" in problem and "apt-get install lld-22" in problem
    monkeypatch.setenv("ROCM_PATH", linker)
    assert flydsl_compiler.compile_report(spec, shape, "bf16", config, "gfx942").ok


def test_the_precompile_pool_compiles_a_flydsl_kernel_on_meta_inputs(flydsl_compiler, monkeypatch):
    """On an AMD machine the pool compiles each candidate through the kernel's run on meta inputs, with no device
    (described here as an MI300X): FlyDSL compiles and launches nothing, and FlyDSL's disk cache is warm for the
    timing worker."""
    from flytune_nb.engine.tasks import compile_one

    dev = from_properties(MI300X_PROPS, hip=True)
    monkeypatch.setenv("ARCH", "gfx942")
    monkeypatch.setenv("FLYDSL_GPU_ARCH", "gfx942")
    flydsl_compiler.clear()
    status, seconds, _, _ = compile_one("flydsl_rmsnorm", (), N4096, "bf16", _cfg(256, 8).to_dict(),
                                  device=__import__("dataclasses").asdict(dev), target=("hip", "gfx942", 64))
    assert status == "ok" and seconds > 0
    assert len(flydsl_compiler._COMPILED) == 1


# -- launching: only on AMD GPUs, only in workers ---------------------------------------------------------------------
def test_a_flydsl_sweep_off_an_amd_gpu_is_refused_before_anything_is_written(tmp_path, flydsl_installed):
    from flytune_nb.engine.sweep import Sweep

    with pytest.raises(UsageError, match="trials run in worker processes only"):
        Sweep("flydsl_rmsnorm", "M=2 N=256", ["bf16"], db=tmp_path / "a.db", isolate=False)
    with pytest.raises(UsageError, match=r"flydsl_rmsnorm is a FlyDSL kernel: it launches on AMD GPUs \(ROCm\) only, "
                                         r"and this machine's device is CPU_interpreter"):
        Sweep("flydsl_rmsnorm", "M=2 N=256", ["bf16"], db=tmp_path / "a.db", baselines=(), timeout=300).run()
    assert not (tmp_path / "a.db").exists()


def test_tuned_resolves_a_config_anywhere_but_launches_only_on_an_amd_gpu(flydsl_installed):
    from flytune_nb.serve.tuned import tuned

    spec = get_kernel("flydsl_rmsnorm")
    op = tuned(spec)
    inputs = spec.make_inputs({"M": 4, "N": 1024}, "bf16", interpreter_device())
    assert op.config_for(inputs) == spec.default({"M": 4, "N": 1024}, "bf16", interpreter_device())
    with pytest.raises(UsageError, match="launches on AMD GPUs"):
        op(**inputs)


def test_a_launch_without_hip_aborts_only_its_worker_and_the_trial_is_crashed(tmp_path, flydsl_compiler,
                                                                              monkeypatch):
    """What happens on an AMD machine whose ROCm lacks libamdhip64.so.7, or when a config faults the GPU: the launch
    aborts its process (SIGABRT). Here (no HIP at all) the sweep's device check is lifted so that the trials reach
    the launch: each aborts its worker, is recorded as crashed, the next config gets a fresh worker, and the sweep
    (this process) goes on."""
    from flytune_nb.backends import flydsl
    from flytune_nb.engine.store import Store
    from flytune_nb.engine.sweep import Sweep

    monkeypatch.setattr(flydsl, "DEVICE_BACKENDS", flydsl.DEVICE_BACKENDS + ("interpreter",))
    db = tmp_path / "crash.db"
    configs = [_cfg(64, 8), _cfg(128, 8)]
    results = Sweep("flydsl_rmsnorm", "M=2 N=512", ["bf16"], db=db, baselines=(), configs=configs, timeout=300).run()
    trials = results[0].trials
    assert [t.status for t in trials] == ["crashed"] * len(trials) and len(trials) >= 2
    assert all("SIGABRT" in t.reason for t in trials), [t.reason for t in trials]
    df = Store(db).frame("flydsl_rmsnorm")
    assert set(df["status"]) == {"crashed"} and len(df) == len(trials)


_MLIR_OPT = '''#!{python}
# An external LLVM's mlir-opt, played by FlyDSL's own bundled MLIR: `mlir-opt IN --pass-pipeline=P -o OUT`.
import sys

from flydsl._mlir import ir
from flydsl._mlir.passmanager import PassManager
from flydsl.compiler.jit_function import _create_mlir_context

args = sys.argv[1:]
pipeline = next(a.split("=", 1)[1] for a in args if a.startswith("--pass-pipeline="))
with _create_mlir_context():
    module = ir.Module.parse(open(args[0]).read())
    PassManager.parse(pipeline).run(module.operation)
    open(args[args.index("-o") + 1], "w").write(str(module))
'''


def test_a_census_compile_with_an_external_llvm_reads_its_object_without_the_assembly(flydsl_compiler, tmp_path,
                                                                                      monkeypatch):
    """FLYDSL_COMPILE_LLVM_DIR hands code generation to an external LLVM, and FlyDSL refuses its assembly dump there
    (RuntimeError on every compile): the report reads the object's metadata as without the dump, with no
    instruction counts, rather than failing every config."""
    spec, shape = get_kernel("flydsl_rmsnorm"), {"M": 4, "N": 2048}
    config = _cfg(128, 8)
    (want,) = flydsl_compiler.compile_report(spec, shape, "bf16", config, "gfx942").kernels
    assert want.insn is not None  # the bundled LLVM: the assembly is read
    tool = tmp_path / "llvm" / "bin" / "mlir-opt"
    tool.parent.mkdir(parents=True)
    tool.write_text(_MLIR_OPT.format(python=sys.executable))
    tool.chmod(0o755)
    monkeypatch.setenv("FLYDSL_COMPILE_LLVM_DIR", str(tmp_path / "llvm"))
    report = flydsl_compiler.compile_report(spec, shape, "bf16", config, "gfx942")
    assert report.ok, report.problems
    (got,) = report.kernels
    assert (got.kernel, got.vgpr, got.sgpr, got.lds, got.insn) == (want.kernel, want.vgpr, want.sgpr, want.lds, None)
