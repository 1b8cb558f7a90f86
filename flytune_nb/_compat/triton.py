"""Every private Triton internal flytune_nb touches, in one place, each behind a version check or a fallback.

Why touch them at all: the public launch ``fn[grid](...)`` costs ~15 us of host Python per call on the H200 host
(re-binding arguments, stringifying options, building launch metadata), and the tuned launcher may add at most 5% to a
raw launch; compiling without a GPU needs Triton's driver answered by a stand-in. Both lean on internals that change
between Triton releases, so:

- ``FAST_LAUNCH``: the launcher layouts that tests/compat read in the installed Triton's own source (the C launcher's
  argument list, ``CudaLauncher.__call__``) and the GPU tests run. Any other Triton takes Triton's public path on every
  call (slower, still correct): ``fast_launch_supported()`` says which.
- Nothing here imports Triton at module level (see ``version``).
- Everything else here degrades to "not available" (``None`` / no-op) on a Triton without it, and the caller falls
  back to the public path.
"""
from __future__ import annotations

import contextlib
import re
from functools import lru_cache

# (major, minor) of the Triton releases whose launcher layout the fast path was verified against.
FAST_LAUNCH = {(3, 6)}


@lru_cache(maxsize=None)
def version() -> tuple[int, int]:
    """The installed Triton's (major, minor). Imported here, not at module level: nothing may import Triton before
    flytune_nb.core.device.ensure_backend() has decided on the interpreter (triton.language's own @jit helpers are
    built for one mode when it is first imported)."""
    import triton

    m = re.match(r"(\d+)\.(\d+)", triton.__version__)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def fast_launch_supported() -> bool:
    return version() in FAST_LAUNCH


# -- the launch fast path ------------------------------------------------------------------------------------------
def launch_runtime() -> dict:
    """What the fast path looks up once per process: the JIT class, Triton's argument specialiser, the current
    device and stream getters, and the knobs. Raises on a Triton without them (the caller falls back)."""
    from triton import knobs
    from triton._C.libtriton import native_specialize_impl
    from triton.runtime.driver import driver
    from triton.runtime.jit import JITFunction

    from flytune_nb._compat.torch import cuda_device_getter

    active = driver.active
    return {"knobs": knobs, "spec": native_specialize_impl, "jit": JITFunction,
            "device": cuda_device_getter() or active.get_current_device, "stream": active.get_current_stream}


def jit_backend(fn, device):
    """The compiler backend a JITFunction keeps per device (Triton 3.6: the 4th of ``device_caches[device]``)."""
    return fn.device_caches[device][3]


def specialize(spec_impl, backend, arg):
    """Triton's own specialisation of one argument (pointer dtype + 16-byte alignment, integer width / ==1 / %16), as
    ``JITFunction.run`` computes it with ``is_const=False, specialize_value=True, align=True``."""
    return spec_impl(backend, arg, False, True, True)


def hook_active(hook) -> bool:
    """Triton 3.6 keeps an empty ``HookChain`` in the launch-hook knobs (never None) and calls it on every launch; a
    chain with no calls in it is no hook. Any other non-None hook is one."""
    return bool(getattr(hook, "calls", True))


def kernel_globals_or_hooks(fn) -> bool:
    """Whether Triton must re-check something on every call of ``fn`` (globals it reads, pre-run hooks)."""
    return bool(getattr(fn, "used_global_vals", True) or getattr(fn, "pre_run_hooks", True))


def kernel_params(fn):
    """(name, has_default, default) of each parameter of a JITFunction, in order."""
    return [(p.name, p.has_default, p.default) for p in fn.params]


def compiled_launcher(kernel):
    """``(call, function, middle)`` for launching a CompiledKernel straight through its launcher, or None.

    ``call(gx, gy, gz, stream, function, *middle, *kernel_args, *constexpr_tail)``. Two layouts (Triton 3.6):
    - the C ``launch`` of ``CudaLauncher`` for a kernel that needs no scratch memory, whose argument list after the
      function is (cooperative grid, PDL, global scratch, profile scratch, packed metadata, launch metadata, enter
      hook, exit hook): this skips a Python frame and a closure per launch;
    - otherwise ``kernel.run`` (any launcher), whose list after the function is (packed metadata, launch metadata,
      enter hook, exit hook).
    No launch metadata and no hooks: Triton builds metadata only for a hook, and its launchers skip None."""
    if not fast_launch_supported() or not all(hasattr(kernel, a) for a in ("run", "function", "packed_metadata")):
        return None
    run = kernel.run
    if type(run).__name__ == "CudaLauncher":
        need = (getattr(run, "global_scratch_size", 1), getattr(run, "profile_scratch_size", 1))
        parts = tuple(getattr(run, a, None) for a in ("launch", "launch_cooperative_grid", "launch_pdl"))
        if not any(need) and None not in parts:
            c_launch, coop, pdl = parts
            return c_launch, kernel.function, (coop, pdl, None, None, kernel.packed_metadata, None, None, None)
    return run, kernel.function, (kernel.packed_metadata, None, None, None)


# -- compiling without a device ------------------------------------------------------------------------------------
def gpu_target(backend: str, arch, warp_size: int):
    from triton.backends.compiler import GPUTarget

    return GPUTarget(backend, arch, warp_size)


@contextlib.contextmanager
def active_driver(stand_in):
    """Triton's active driver replaced by ``stand_in`` for the block (Triton keeps it in ``driver._active``; restored
    as it was, since ``reset_active()`` would create the real driver and initialise CUDA). On a Triton without
    ``_active`` the real driver stays and this is a no-op."""
    from triton.runtime.driver import driver

    if not hasattr(driver, "_active"):
        yield False
        return
    prev = driver._active
    driver.set_active(stand_in)
    try:
        yield True
    finally:
        driver._active = prev


def launch_enter_hook():
    from triton import knobs

    return knobs.runtime.launch_enter_hook


def set_launch_enter_hook(hook) -> None:
    from triton import knobs

    knobs.runtime.launch_enter_hook = hook


def build_cuda_utils() -> None:
    """Build (or load from Triton's cache) the CUDA C helper module Triton's first launch would otherwise build."""
    from triton.backends.nvidia.driver import CudaUtils

    CudaUtils()


# -- what a compile produced (a census reads it) ---------------------------------------------------------------------
def compiled_binary(kernel) -> bytes | None:
    """The code object a CompiledKernel loads: ``asm["hsaco"]`` (AMD) or ``asm["cubin"]`` (NVIDIA); None when it
    has neither (another Triton's layout, an interpreted kernel)."""
    asm = getattr(kernel, "asm", None) or {}
    for kind in ("hsaco", "cubin"):
        if isinstance(asm.get(kind), bytes):
            return asm[kind]
    return None


def compiled_text(kernel, kind: str) -> str:
    """One textual stage of a CompiledKernel (``"amdgcn"``: the AMD assembly with its metadata and kernel descriptor;
    ``"ptx"``); "" when absent."""
    text = (getattr(kernel, "asm", None) or {}).get(kind, "")
    return text if isinstance(text, str) else ""


def compiled_metadata(kernel) -> dict:
    """A CompiledKernel's metadata as a dict (Triton 3.6 keeps a namedtuple: name, num_warps, shared, target, ...)."""
    md = getattr(kernel, "metadata", None)
    if md is None:
        return {}
    if hasattr(md, "_asdict"):
        return dict(md._asdict())
    return dict(vars(md))


def nvidia_tool(name: str) -> str | None:
    """The path of one of the CUDA tools Triton's wheel bundles (``cuobjdump``, ``nvdisasm``, ``ptxas``); None on a
    Triton without them."""
    try:
        from triton import knobs

        return getattr(knobs.nvidia, name).path
    except Exception:  # noqa: BLE001 - no NVIDIA backend, another knob layout
        return None


# -- keys ----------------------------------------------------------------------------------------------------------
def compute_version_key() -> None:
    """Triton's own version key (hashes its compiler sources and all of libtriton; lru-cached per process)."""
    from triton.runtime.cache import triton_key

    triton_key()


def cache_invalidating_env() -> dict:
    """The TRITON_* / MLIR_* / LLVM_* variables Triton itself says invalidate its compile cache; {} where it cannot say."""
    try:
        from triton._C.libtriton import get_cache_invalidating_env_vars
    except ImportError:
        return {}
    return {k: str(v) for k, v in get_cache_invalidating_env_vars().items()}
