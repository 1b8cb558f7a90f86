"""Triton as a flytune backend (the protocol in flytune_nb.backends), and compiling a config without a GPU: what
the precompile pool's processes do.

Measured on the H200 host (benchmarks/results/NVIDIA_H200/startup_profile.md): a pool process that compiles
by launching, or only by asking Triton's CUDA driver for the current device, initialises CUDA and creates a context.
Sixteen of them doing that at once took ~2.6 s, and held the timing worker's own start (its context, its first
inputs) back to ~4-5 s. Compiling needs none of it: the kernel's ``run`` is called on meta-device inputs (shapes and
dtypes only) in compile-only mode (flytune_nb.kit.launcher.compile_only: Triton's ``warmup``), and while it runs Triton's
active driver is a stand-in that answers the three questions the JIT asks before compiling (device, stream, target)
with what the timing worker's real driver reported. Anything else asked of it raises, and the caller falls back to
real inputs on the real driver.

Why the cache entry is the right one: Triton specialises a pointer on its 16-byte alignment, and a meta tensor's
address (0) is aligned like every fresh allocation; integers specialise on their values, which come from the shape.
tests/gpu/test_gpu.py checks that the real launch then finds the kernel compiled here.

A census compiles the same way for a GPU this machine does not have (``compile_kernels`` in a process in compile
mode, flytune_nb.core.device.enter_compile_mode) and keeps what Triton built: its resources are read by
flytune_nb.backends.triton_resources, and ``binary_digest`` says which configs built byte-identical code.
"""
from __future__ import annotations

import contextlib
import hashlib

from flytune_nb._compat.triton import (
    active_driver, build_cuda_utils, compiled_binary, compiled_metadata, gpu_target, launch_enter_hook,
    set_launch_enter_hook)

# The backend protocol (flytune_nb.backends): Triton launches everywhere, through its interpreter without a GPU.
LABEL = "Triton"
DEVICE_BACKENDS = ("cuda", "hip", "interpreter")
DEVICE_NAMES = ("NVIDIA GPUs", "AMD GPUs", "the CPU interpreter")
ELSEWHERE = ""
ISOLATED = False  # Triton's launch errors are exceptions; a worker is the safer default, not a requirement
CONFIG_DIR_PREFIX = "triton_"


def toolchain() -> dict[str, str]:
    """The tuning key's toolchain part: flytune_nb, Triton, torch, CUDA/HIP versions (core/key.py keeps the rule,
    read late so that a test's patch of it counts)."""
    from flytune_nb.core import key

    return key.toolchain()


def codegen_env() -> dict[str, str]:
    from flytune_nb.core import key

    return key.codegen_env()


def config_dir_name(toolchain: dict) -> str:
    """SGLang's version folder for files tuned with ``toolchain``: ``triton_3_6_0``."""
    from flytune_nb.artifacts.files import triton_dir_name

    return triton_dir_name(toolchain.get("triton", "0"))


def running_config_dir_name() -> str:
    import triton

    from flytune_nb.artifacts.files import triton_dir_name

    return triton_dir_name(triton.__version__)


class _CompileOnlyDriver:
    """What Triton's JITFunction.run asks the active driver before compiling with warmup=True."""

    def __init__(self, target) -> None:
        self._target = target

    def get_current_device(self) -> int:
        return 0  # CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES pin each process to its GPU: it is device 0

    def get_current_stream(self, device=None) -> int:
        return 0

    def get_current_target(self):
        return self._target

    def __getattr__(self, name):
        raise RuntimeError(f"compiling without a device, Triton asked its driver for {name!r}: a kernel launched "
                           f"as kernel[grid](...) rather than through flytune_nb.kit.launch, which is what compiles "
                           f"without a GPU")


@contextlib.contextmanager
def without_device(target: tuple):
    """Triton's active driver replaced by the stand-in for ``target`` = (backend, arch, warp_size), as
    ``driver.active.get_current_target()`` reported it in the timing worker (a Triton without a swappable driver:
    the real driver stays)."""
    with active_driver(_CompileOnlyDriver(gpu_target(*target))):
        yield


def prebuild_c_helpers() -> None:
    """Build Triton's CUDA C helpers module (cuda_utils, compiled with gcc into Triton's on-disk cache) in this pool
    process, while the timing worker is still starting: its first launch then loads it instead of building it on the
    sweep's critical path (0.5-0.65 s of gcc in the first trial with a fresh cache, benchmarks/startup_profile.py; the
    kernel's launcher, the other part, needs a compiled kernel first). Creates no CUDA context: it only compiles
    and loads a shared library. Nothing on HIP or without a GPU."""
    try:
        import torch

        if getattr(torch.version, "hip", None) or not torch.cuda.is_available():
            return
        build_cuda_utils()
    except Exception:  # noqa: BLE001 - another Triton's layout, no gcc: the timing worker builds it itself
        pass


def _refuse(metadata) -> None:
    raise RuntimeError("a kernel launched outside flytune_nb.kit.launcher while compiling on meta inputs")


def compile_on_meta(spec, inputs: dict, config, target: tuple, record: list | None = None) -> bool:
    """Run ``spec.run(inputs, config)`` on meta ``inputs`` compiling only. A launch that bypasses flytune_nb.kit.launcher (a
    plugin calling ``kernel[grid]`` itself) would run on null pointers: Triton's launch-enter hook refuses it first.
    Returns False when the wrapper cannot run this way (it reads values, launches directly, or Triton wanted more of
    the driver); re-raises a config's own compile error, which real inputs would only repeat. ``record``: a list that
    gets every compiled launch (see ``launch_digest``)."""
    from flytune_nb.kit.launcher import compile_only
    from flytune_nb.measure.trial import classify

    prev = launch_enter_hook()
    set_launch_enter_hook(_refuse)
    try:
        with without_device(target), compile_only(target[0], record=record):
            spec.run(inputs, config)
        return True
    except Exception as e:  # noqa: BLE001
        if classify(e) == "compile_error":
            raise
        return False
    finally:
        set_launch_enter_hook(prev)


def triton_target(device) -> tuple:
    """(backend, arch, warp_size) of Triton's GPUTarget for a described GPU: ``("hip", "gfx942", 64)``,
    ``("cuda", 90, 32)`` (Triton picks sm_90a / sm_100a itself for 90 / 100)."""
    if device.backend == "hip":
        return ("hip", device.arch, 64)
    digits = "".join(ch for ch in device.arch if ch.isdigit())
    if device.backend != "cuda" or not digits:
        raise ValueError(f"no Triton GPU target for {device.label}")
    return ("cuda", int(digits), 32)


def compile_kernels(spec, inputs: dict, config, device) -> list:
    """Compile ``config`` for ``device`` (a DeviceInfo) through the kernel's own ``run`` on meta ``inputs``, launching
    nothing, and return what Triton built: one CompiledKernel per kernel the wrapper launches, in launch order.
    Whatever the compile raises propagates (a census records it). Triton's JIT caches one target per process, so a
    process compiles for one ``device`` only (enter_compile_mode)."""
    from flytune_nb.kit.launcher import compile_only

    kept: list = []
    prev = launch_enter_hook()
    set_launch_enter_hook(_refuse)
    try:
        with without_device(triton_target(device)), compile_only(device.backend, keep=kept):
            spec.run(inputs, config)
    finally:
        set_launch_enter_hook(prev)
    return [k for k in kept if k is not None]


def binary_digest(kernels: list) -> str | None:
    """What identifies a config's compiled code: a hash over each kernel's code object (hsaco / cubin) and the
    launch metadata that is not in it (block size, shared memory), in launch order. Two configs with equal digests
    launch byte-identical code the same way, so timing both measures one kernel twice (the row kernels' looped
    ``num_stages`` 1 and 2 on every target). None when a kernel has no binary (the interpreter)."""
    h = hashlib.sha256()
    for k in kernels:
        binary = compiled_binary(k)
        if binary is None:
            return None
        md = compiled_metadata(k)
        h.update(binary)
        h.update(repr((md.get("num_warps"), md.get("num_ctas"), md.get("shared"))).encode())
    return h.hexdigest()[:16] if kernels else None


def current_target() -> tuple | None:
    """(backend, arch, warp_size) of the GPU this process drives, for the pool's stand-in driver; None without one.

    CUDA: Triton's own rule (CudaDriver.get_current_target: capability major*10+minor, 32-wide warps), read from
    torch, because asking Triton's driver would build its C helpers with gcc first (in a fresh Triton cache, seconds
    on the timing worker's critical path, before the pool gets any work). HIP: Triton's driver."""
    from flytune_nb._compat.triton import driver_target
    from flytune_nb.core.device import current_device

    if not current_device().is_gpu:
        return None
    try:
        import torch

        if not getattr(torch.version, "hip", None):
            major, minor = torch.cuda.get_device_capability()
            return ("cuda", major * 10 + minor, 32)
    except Exception:  # noqa: BLE001 - torch cannot say: the pool uses the real driver
        return None
    return driver_target()


# -- identical binaries ----------------------------------------------------------------------------------------------
BINARY_FORMATS = ("cubin", "hsaco")  # what Triton's CompiledKernel.asm holds for the GPU, NVIDIA and AMD


def launch_digest(launches) -> str | None:
    """A hash of what a config runs: per launch, in order, the compiled binary (Triton's ``CompiledKernel.asm``
    cubin / hsaco), the launch metadata the binary does not carry (warps, CTAs, shared memory), the grid, and every
    argument (a tensor by dtype, shape and strides; a scalar by value). Two configs with equal digests launch the
    same code the same way: on the H200, rmsnorm 4096 x 4096 compiles its 51 configs to 30 distinct cubins
    (``num_stages`` changes nothing in a loop-free or single-loop row kernel), so the other 21 need no timing.
    None when anything is unknown: no launch recorded, a binary without machine code (the interpreter), a grid that
    is a function."""
    import hashlib

    if not launches:
        return None
    h = hashlib.sha256()
    for kernel, grid, args in launches:
        asm = getattr(kernel, "asm", None) or {}
        binary = next((asm[f] for f in BINARY_FORMATS if f in asm), None)
        if binary is None or callable(grid):
            return None
        h.update(binary if isinstance(binary, bytes) else str(binary).encode())
        md = getattr(kernel, "metadata", None)
        h.update(repr(tuple(getattr(md, a, None) for a in ("num_warps", "num_ctas", "shared"))).encode())
        h.update(repr(tuple(grid)).encode())
        for a in args:
            if hasattr(a, "dtype") and hasattr(a, "shape"):
                h.update(repr((str(a.dtype), tuple(a.shape), tuple(a.stride()))).encode())
            else:
                h.update(repr((type(a).__name__, a)).encode())
    return h.hexdigest()[:16]


def binary_hash(spec, inputs: dict, config, target: tuple | None) -> str | None:
    """The hash of what ``config`` compiles to and how it launches (``launch_digest``), by compiling it on meta
    ``inputs`` for ``target`` without a device; None where that cannot be known (no target: the interpreter; a
    wrapper that cannot run on meta inputs; a config that does not compile, whose trial records why)."""
    if target is None or inputs is None:
        return None
    record: list = []
    try:
        if not compile_on_meta(spec, inputs, config, tuple(target), record=record):
            return None
    except Exception:  # noqa: BLE001 - a compile error: the trial measures and records it
        return None
    return launch_digest(record)
