"""Each private Triton / torch / CPython internal that flytune_nb._compat touches, checked against the installed
version itself (its source, its objects), not against a stand-in built to our assumptions: a Triton release that
moves an argument or renames an attribute fails here, on the CPU. tests/gpu/test_gpu.py runs the same touches for real.
"""
import concurrent.futures as cf
import inspect
import os
import re

import pytest
import torch

from flytune_nb._compat import stdlib, triton as tc
from flytune_nb._compat import torch as torch_compat

triton = pytest.importorskip("triton")


def _kernel(X, N, BLOCK: "tl.constexpr" = 64):
    pass


def _c_launcher_source():
    from triton.backends.nvidia.driver import make_launcher

    return make_launcher({}, {0: "*fp32", 1: "i32"}, None)


@pytest.mark.skipif(not tc.fast_launch_supported(), reason="this Triton takes the public launch path")
def test_the_c_launchers_argument_list_is_the_one_compiled_launcher_passes():
    """compiled_launcher calls the C ``launch`` with (grid x3, stream, function, cooperative, pdl, global scratch,
    profile scratch, packed metadata, launch metadata, enter hook, exit hook, *kernel args): the order the
    generated C source parses."""
    src = _c_launcher_source()
    parse = src[src.index("PyArg_ParseTuple(args"):]
    names = re.findall(r"&(\w+)", parse[: parse.index(")) {")])
    assert names[:13] == ["gridX", "gridY", "gridZ", "_stream", "_function", "launch_cooperative_grid", "launch_pdl",
                          "global_scratch_obj", "profile_scratch_obj", "kernel_metadata", "launch_metadata",
                          "launch_enter_hook", "launch_exit_hook"]
    assert names[13:] == ["_arg0", "_arg1"]


@pytest.mark.skipif(not tc.fast_launch_supported(), reason="this Triton takes the public launch path")
def test_the_python_launcher_adds_only_scratch_before_its_c_entry():
    """CudaLauncher.__call__(gx, gy, gz, stream, function, *args) forwards to its C launch with its own flags and
    scratch buffers inserted after the function: what compiled_launcher replicates for a kernel with no scratch."""
    from triton.backends.nvidia.driver import CudaLauncher

    body = inspect.getsource(CudaLauncher.__call__)
    call = re.sub(r"\s+", " ", body[body.index("self.launch("):])
    assert call.startswith("self.launch(gridX, gridY, gridZ, stream, function, self.launch_cooperative_grid, "
                           "self.launch_pdl, global_scratch, profile_scratch, *args)")
    init = inspect.getsource(CudaLauncher.__init__)
    for attr in ("global_scratch_size", "profile_scratch_size", "launch_cooperative_grid", "launch_pdl", "launch"):
        assert f"self.{attr} =" in init


@pytest.mark.skipif(not tc.fast_launch_supported(), reason="this Triton takes the public launch path")
def test_a_jit_launch_passes_packed_metadata_then_hooks_as_the_run_layout_assumes():
    from triton.runtime.jit import JITFunction

    run = re.sub(r"\s+", " ", inspect.getsource(JITFunction.run))
    assert ("kernel.run(grid_0, grid_1, grid_2, stream, kernel.function, kernel.packed_metadata, launch_metadata, "
            "knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook, *bound_args.values())") in run
    # device_caches[device] unpacks with the backend fourth (jit_backend) ...
    assert "kernel_cache, kernel_key_cache, target, backend, binder = self.device_caches[device]" in run
    # ... and arguments specialise as specialize() asks: (backend, arg, is_const, specialize_value, align)
    binder = inspect.getsource(inspect.getmodule(JITFunction).create_function_from_signature)
    assert "specialize_impl(backend, {name}, {is_const}, {specialize}, {align})" in binder


def test_the_runtime_pieces_exist_where_compat_looks():
    from triton import knobs
    from triton.runtime.driver import driver
    from triton.runtime.jit import JITFunction

    assert hasattr(driver, "_active") and callable(driver.set_active)
    assert hasattr(knobs.runtime, "launch_enter_hook") and hasattr(knobs.runtime, "launch_exit_hook")
    assert tc.hook_active(knobs.runtime.launch_enter_hook) is False  # Triton's default: an empty HookChain
    fn = JITFunction(_kernel)  # a real JITFunction (the decorator makes an interpreted one on the CPU)
    assert fn.used_global_vals == {} and fn.pre_run_hooks == [] and not tc.kernel_globals_or_hooks(fn)
    assert [p[:2] for p in tc.kernel_params(fn)] == [("X", False), ("N", False), ("BLOCK", True)]
    assert tc.kernel_params(fn)[2][2] == 64
    assert hasattr(fn, "device_caches") and callable(fn.warmup)
    assert isinstance(tc.cache_invalidating_env(), dict)
    tc.compute_version_key()  # Triton's own version key: runs on the CPU


def test_the_stand_in_driver_swap_restores_the_driver_it_found():
    from triton.runtime.driver import driver

    before = driver._active
    stand_in = object()
    with tc.active_driver(stand_in) as swapped:
        assert swapped and driver._active is stand_in
    assert driver._active is before


def test_torch_and_cpython_internals_are_where_compat_reads_them():
    assert torch_compat.has_gpu_sleep() and callable(torch.cuda._sleep)
    assert torch_compat.cuda_device_getter() is getattr(torch._C, "_cuda_getDevice", None)  # None: a CPU build
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # None on a CPU build: the public fallback
    if raw is not None:
        assert torch_compat.cuda_stream_getter() is raw
    else:
        assert callable(torch_compat.cuda_stream_getter())
    x = torch.zeros(4, 8)
    assert torch_compat.view_base(x.view(-1)) is x and torch_compat.view_base(x[1:]) is x
    assert torch_compat.view_base(x) is None and torch_compat.view_base(x.clone()) is None
    if os.name == "posix":
        data = stdlib.environ_bytes()
        assert data is not None and data[b"PATH"] == os.environ["PATH"].encode()
    with cf.ProcessPoolExecutor(1) as pool:
        assert stdlib.pool_broken(pool) is False and hasattr(pool, "_broken")
    from multiprocessing import util

    made = util.get_temp_dir()  # the folder multiprocessing's exit handler removes
    assert stdlib.multiprocessing_temp_dir() == made


def test_caller_module_names_the_module_a_call_came_from():
    """adopt() names the module assigning ``SPEC = adopt(...)`` this way, for worker processes to import it from."""
    helpers = {"__name__": "some.helpers", "caller_module": stdlib.caller_module}
    exec("def called(depth=1):\n    return caller_module(depth)\n", helpers)
    outer = {"__name__": "some.outer", "called": helpers["called"]}
    exec("def via(depth):\n    return called(depth)\n", outer)
    assert helpers["called"]() == __name__  # this test module called it
    assert outer["via"](1) == "some.outer" and outer["via"](2) == __name__
    assert stdlib.caller_module(10_000) is None  # deeper than the stack


def test_an_unverified_triton_takes_the_public_launch_path(monkeypatch):
    monkeypatch.setattr(tc, "FAST_LAUNCH", set())
    assert not tc.fast_launch_supported()
    assert tc.compiled_launcher(object()) is None


def test_a_compiled_kernel_carries_what_the_census_reads():
    """warmup returns the CompiledKernel (kit.launcher keeps it); its ``asm`` holds the AMD stages amdgcn + hsaco and
    the NVIDIA ones ptx + cubin; its metadata is a namedtuple; the wheel bundles cuobjdump. The real compiles:
    tests/backends/test_census_compile.py."""
    from triton.backends.amd.compiler import HIPBackend
    from triton.backends.nvidia.compiler import CUDABackend
    from triton.compiler.compiler import CompiledKernel
    from triton.runtime.jit import JITFunction

    run = inspect.getsource(JITFunction.run)
    assert "if not warmup:" in run and re.search(r"\n\s+return kernel\n", run)
    init = inspect.getsource(CompiledKernel.__init__)
    assert "self.asm =" in init and "self.metadata =" in init
    stages = {}
    for backend, target in ((HIPBackend, ("hip", "gfx942", 64)), (CUDABackend, ("cuda", 90, 32))):
        b = backend(tc.gpu_target(*target))
        b.add_stages(stages, b.parse_options({}), None)
    assert {"amdgcn", "hsaco", "ptx", "cubin"} <= set(stages)
    tool = tc.nvidia_tool("cuobjdump")
    assert tool and os.access(tool, os.X_OK)


def test_the_census_accessors_degrade_on_what_is_not_a_compiled_kernel():
    from collections import namedtuple

    md = namedtuple("md", "name num_warps shared")("k", 4, 1024)
    fake = type("K", (), {"asm": {"hsaco": b"\x7fELF", "amdgcn": "s_endpgm"}, "metadata": md})()
    assert tc.compiled_binary(fake) == b"\x7fELF" and tc.compiled_text(fake, "amdgcn") == "s_endpgm"
    assert tc.compiled_metadata(fake) == {"name": "k", "num_warps": 4, "shared": 1024}
    assert tc.compiled_binary(object()) is None and tc.compiled_text(object(), "ptx") == ""
    assert tc.compiled_metadata(object()) == {}


def test_a_descriptor_made_without_the_recheck_equals_triton_s_own():
    """descriptor_maker's descriptor has the fields ``TensorDescriptor.from_tensor`` gives (what the launcher reads:
    base, shape, strides, block shape, padding) for a contiguous tensor and for a strided row view, and a block shape
    Triton refuses still raises."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    make = tc.descriptor_maker()
    whole = torch.randn(48, 96, dtype=torch.float16)
    rows = torch.randn(48, 160, dtype=torch.float16)[:, 32:128]  # row stride 160, a 16-byte-aligned base
    for t, block in ((whole, [16, 64]), (rows, [32, 32])):
        ours, theirs = make(t, block), TensorDescriptor.from_tensor(t, block)
        assert type(ours) is TensorDescriptor
        assert ours.base is t and list(ours.shape) == list(theirs.shape) and list(ours.strides) == list(theirs.strides)
        assert list(ours.block_shape) == list(theirs.block_shape) and ours.padding == theirs.padding == "zero"
    with pytest.raises(Exception):
        make(whole, [16, 48])  # not a power of two: TMA boxes are


def test_host_tma_is_found_in_a_triton_that_has_it():
    """The matmul's TMA paths need host-side tensor descriptors and tl.range(flatten=), both in Triton 3.4 and newer:
    a release that moves either turns them off (has_tma False), which this catches."""
    tc.host_tma_supported.cache_clear()
    if tc.version() < (3, 4):
        pytest.skip(f"Triton {triton.__version__} predates host-side tensor descriptors")
    assert tc.host_tma_supported() is True
