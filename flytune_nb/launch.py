"""Launch a Triton kernel without Triton's per-call dispatch.

``fn[grid](*args, **meta)`` re-binds every argument, stringifies the launch options, checks the kernel's globals and
builds launch metadata on every call: 15.3 us a launch on the H200 host for rmsnorm M=1 (issue #4's measurement),
most of it Python above the driver's launch. The tuned launcher may add at most 5% to a raw launch, so the kernels
launch through ``launch()`` instead. Its first call per (kernel, device, config, meta-parameters, argument
specialisation) goes through Triton, compiling if needed, and keeps the CompiledKernel Triton returns; later calls
hand the arguments straight to that kernel's launcher.

The cache key is never coarser than Triton's: each argument's specialisation comes from Triton's own
``native_specialize_impl`` (pointer dtype and 16-byte alignment for tensors; width, ==1 and %16 for integers), so a
cached kernel is reused only where Triton would pick the same one (tests/test_launch.py: a misaligned view gets its
own kernel). Whatever it cannot vouch for takes Triton's path on every call: the interpreter, profiler launch hooks,
pre-run hooks, kernels that read Python globals, callable grids, any other kind of callable.
"""
from __future__ import annotations

import contextlib
from typing import Any

_SLOW = "slow"  # an entry that must go through Triton on every call
_ENTRIES: dict[tuple, Any] = {}
_RT: dict[str, Any] = {}  # Triton's runtime pieces, looked up once (importing them on CPU is fine, calling is not)
_COMPILE_ONLY: list = [None]  # set by compile_only(): the backend whose launch options apply; None: launch


@contextlib.contextmanager
def compile_only(backend: str):
    """Within this block, ``launch`` compiles (Triton's ``warmup``: same specialisation, same on-disk cache entry)
    and launches nothing. The precompile pool compiles this way while the timing worker measures beside it: a pool
    process launching kernels on the same GPU would time-slice with the kernel being timed. ``backend`` ("cuda" /
    "hip", for the launch options; "interpreter" launches as usual) comes from the caller, which must not ask the
    device (flytune_nb.compiling)."""
    _COMPILE_ONLY[0] = backend
    try:
        yield
    finally:
        _COMPILE_ONLY[0] = None


def _runtime() -> dict:
    if not _RT:
        from triton import knobs
        from triton._C.libtriton import native_specialize_impl
        from triton.runtime.driver import driver
        from triton.runtime.jit import JITFunction

        active = driver.active
        # Triton's get_current_device is torch.cuda.current_device, a Python function that re-checks lazy init; the
        # fast path runs only after Triton has launched this kernel, so CUDA is up and torch's C getter will do.
        import torch

        device = getattr(torch._C, "_cuda_getDevice", None) or active.get_current_device
        _RT.update(knobs=knobs, spec=native_specialize_impl, jit=JITFunction, device=device,
                   stream=active.get_current_stream)
    return _RT


def launch(fn, grid: tuple, args: tuple, config, **meta) -> None:
    """``fn[grid](*args, **meta, **config's launch options)``, with the compiled kernel remembered.

    ``args``: the kernel's leading parameters, positionally; ``meta``: the remaining ones (constexprs) by name."""
    backend = _COMPILE_ONLY[0]
    if backend is not None and backend != "interpreter" and hasattr(fn, "warmup"):
        # Before anything asks Triton's runtime: under flytune_nb.compiling its driver is a stand-in, and the
        # fast path below keeps what it looks up for the life of the process.
        fn.warmup(*args, grid=grid, **meta, **config.launch_options(backend))
        return None
    rt = _RT or _runtime_or_none()
    if type(fn) is not rt["jit"]:
        return _triton(fn, grid, args, config, meta)
    knobs = rt["knobs"]
    run_knobs = knobs.runtime
    enter, leave = run_knobs.launch_enter_hook, run_knobs.launch_exit_hook
    if (enter is not None and _active(enter)) or (leave is not None and _active(leave)):
        return _triton(fn, grid, args, config, meta)  # a profiler wants Triton's launch metadata
    dev = rt["device"]()
    backend = fn.device_caches[dev][3]
    spec = rt["spec"]
    key = (fn, dev, config, tuple(meta.items()), run_knobs.debug, knobs.compilation.instrumentation_mode,
           tuple([spec(backend, a, False, True, True) for a in args]))
    try:
        entry = _ENTRIES.get(key)
    except TypeError:  # an unhashable meta-parameter: nothing to key on
        return _triton(fn, grid, args, config, meta)
    if entry is None:
        _ENTRIES[key] = entry = _first_launch(fn, grid, args, config, meta)
        return None  # _first_launch launched it
    if entry is _SLOW:
        return _triton(fn, grid, args, config, meta)
    call, function, mid, tail = entry
    n = len(grid)
    call(grid[0], grid[1] if n > 1 else 1, grid[2] if n > 2 else 1, rt["stream"](dev), function, *mid, *args, *tail)
    return None


def _active(hook) -> bool:
    """Triton 3.6 keeps an empty HookChain in the launch-hook knobs (never None) and calls it on every launch; a
    chain with no calls in it is no hook. Any other non-None hook is one."""
    return bool(getattr(hook, "calls", True))


def _runtime_or_none() -> dict:
    """Triton's runtime pieces, or (remembered, so that each later launch is one dict test) {"jit": None}: nothing is
    a JITFunction then and every launch takes Triton's own path. The interpreter has no driver to ask (its functions
    are InterpretedFunction, never JITFunction); another Triton may lack these internals."""
    from .device import interpreting

    if not interpreting():
        try:
            return _runtime()
        except Exception:  # noqa: BLE001 - Triton's own path still works
            pass
    _RT["jit"] = None
    return _RT


def _triton(fn, grid, args, config, meta):
    from .device import current_device

    return fn[grid](*args, **meta, **config.launch_options(current_device().backend))


def _first_launch(fn, grid, args, config, meta):
    kernel = _triton(fn, grid, args, config, meta)
    if callable(grid) or fn.used_global_vals or fn.pre_run_hooks:
        return _SLOW  # Triton re-checks globals / re-evaluates the grid / runs hooks on every call
    if not all(hasattr(kernel, a) for a in ("run", "function", "packed_metadata")):
        return _SLOW
    tail = []
    for p in fn.params[len(args):]:
        if p.name in meta:
            tail.append(meta[p.name])
        elif p.has_default:
            tail.append(p.default)
        else:
            return _SLOW
    run = kernel.run
    # No launch metadata and no hooks: Triton builds the metadata only for a hook, and its launcher skips None.
    c_launch = _c_launch(run)
    if c_launch is not None:
        call, coop, pdl = c_launch
        return call, kernel.function, (coop, pdl, None, None, kernel.packed_metadata, None, None, None), tuple(tail)
    return run, kernel.function, (kernel.packed_metadata, None, None, None), tuple(tail)


def _c_launch(run):
    """Triton's CudaLauncher.__call__ only allocates scratch memory (when the kernel asks for some) and then calls
    its compiled C ``launch``: for a kernel that needs no scratch, call that directly and skip a Python frame and a
    closure per launch. Anything else (HIP's launcher, another Triton's layout) keeps ``run``."""
    if type(run).__name__ != "CudaLauncher":
        return None
    need = (getattr(run, "global_scratch_size", 1), getattr(run, "profile_scratch_size", 1))
    parts = tuple(getattr(run, a, None) for a in ("launch", "launch_cooperative_grid", "launch_pdl"))
    if any(need) or None in parts:
        return None
    return parts


def clear() -> None:
    """Forget remembered kernels (tests; a kernel edited and re-imported gets a new JITFunction anyway)."""
    _ENTRIES.clear()
