"""Compile a config without a GPU: what the precompile pool's processes do.

Measured on the H200 host (2026-11-30, benchmarks/results/startup_profile*.json): a pool process that compiles by
launching, or only by asking Triton's CUDA driver for the current device, initialises CUDA and creates a context.
Sixteen of them doing that at once took ~2.6 s, and held the timing worker's own start (its context, its first
inputs) back to ~4-5 s. Compiling needs none of it: the kernel's ``run`` is called on meta-device inputs (shapes and
dtypes only) in compile-only mode (flytune_nb.kit.launcher.compile_only: Triton's ``warmup``), and while it runs Triton's
active driver is a stand-in that answers the three questions the JIT asks before compiling (device, stream, target)
with what the timing worker's real driver reported. Anything else asked of it raises, and the caller falls back to
real inputs on the real driver.

Why the cache entry is the right one: Triton specialises a pointer on its 16-byte alignment, and a meta tensor's
address (0) is aligned like every fresh allocation; integers specialise on their values, which come from the shape.
tests/test_gpu.py checks that the real launch then finds the kernel compiled here.

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
        raise RuntimeError(f"compiling without a device, Triton asked its driver for {name!r}")


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
    except Exception:  # noqa: BLE001 - another Triton's layout, no gcc: the timing worker builds it as before
        pass


def _refuse(metadata) -> None:
    raise RuntimeError("a kernel launched outside flytune_nb.kit.launcher while compiling on meta inputs")


def compile_on_meta(spec, inputs: dict, config, target: tuple) -> bool:
    """Run ``spec.run(inputs, config)`` on meta ``inputs`` compiling only. A launch that bypasses flytune_nb.kit.launcher (a
    plugin calling ``kernel[grid]`` itself) would run on null pointers: Triton's launch-enter hook refuses it first.
    Returns False when the wrapper cannot run this way (it reads values, launches directly, or Triton wanted more of
    the driver); re-raises a config's own compile error, which real inputs would only repeat."""
    from flytune_nb.kit.launcher import compile_only
    from flytune_nb.measure.trial import classify

    prev = launch_enter_hook()
    set_launch_enter_hook(_refuse)
    try:
        with without_device(target), compile_only(target[0]):
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
    from flytune_nb.core.device import current_device

    if not current_device().is_gpu:
        return None
    try:
        import torch

        if not getattr(torch.version, "hip", None):
            major, minor = torch.cuda.get_device_capability()
            return ("cuda", major * 10 + minor, 32)
        from triton.runtime.driver import driver

        t = driver.active.get_current_target()
        return (t.backend, t.arch, t.warp_size)
    except Exception:  # noqa: BLE001 - a Triton without these internals: the pool uses the real driver
        return None
