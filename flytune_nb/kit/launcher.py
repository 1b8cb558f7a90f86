"""Launch a Triton kernel without Triton's per-call dispatch.

``fn[grid](*args, **meta)`` re-binds every argument, stringifies the launch options, checks the kernel's globals and
builds launch metadata on every call: 15.3 us a launch on the H200 host for rmsnorm M=1,
most of it Python above the driver's launch. The tuned launcher may add at most 5% to a raw launch, so the kernels
launch through ``launch()`` instead. Its first call per (kernel, device, config, meta-parameters, argument
specialisation) goes through Triton, compiling if needed, and keeps the CompiledKernel Triton returns; later calls
hand the arguments straight to that kernel's launcher.

The cache key is never coarser than Triton's: each argument's specialisation comes from Triton's own
``native_specialize_impl`` (pointer dtype and 16-byte alignment for tensors; width, ==1 and %16 for integers), so a
cached kernel is reused only where Triton would pick the same one (tests/kit/test_launcher.py, tests/gpu/test_gpu.py:
a misaligned view gets its own kernel). Whatever it cannot vouch for takes Triton's path on every call: the
interpreter, profiler launch hooks, pre-run hooks, kernels that read Python globals, callable grids, any other kind
of callable.
"""
from __future__ import annotations

import contextlib
from typing import Any

from flytune_nb._compat.triton import (
    INTERPRET_LOCK, compiled_launcher, fast_launch_supported, hook_active, jit_backend, kernel_globals_or_hooks,
    kernel_params, launch_runtime, specialize)
from flytune_nb.kit.scratch import rezero_this_threads_counters

_SLOW = "slow"  # an entry that must go through Triton on every call
_ENTRIES: dict[tuple, Any] = {}
_RT: dict[str, Any] = {}  # Triton's runtime pieces, looked up once (importing them on CPU is fine, calling is not)
_COMPILE_ONLY: list = [None]  # set by compile_only(): the backend whose launch options apply; None: launch
_RECORD: list = [None]  # set by compile_only(record=...): the list each compiled launch is appended to
_KEEP: list = [None]  # set by compile_only(keep=...): the list each compiled kernel is appended to


@contextlib.contextmanager
def compile_only(backend: str, record: list | None = None, keep: list | None = None):
    """Within this block, ``launch`` compiles (Triton's ``warmup``: same specialisation, same on-disk cache entry)
    and launches nothing. The precompile pool compiles this way while the timing worker measures beside it: a pool
    process launching kernels on the same GPU would time-slice with the kernel being timed. ``backend`` ("cuda" /
    "hip", for the launch options; "interpreter" launches as usual) comes from the caller, which must not ask the
    device (flytune_nb.backends.triton). ``record``: a list that gets ``(compiled kernel, grid, args)`` for every
    launch compiled in the block, in order (what flytune_nb.backends.triton.binary_hash hashes). ``keep``: a list
    that gets each compiled kernel, in launch order (a config whose wrapper launches two kernels, as fused_moe's two
    GEMMs, gives two: what the compile census reads)."""
    _COMPILE_ONLY[0], _RECORD[0], _KEEP[0] = backend, record, keep
    try:
        yield
    finally:
        _COMPILE_ONLY[0], _RECORD[0], _KEEP[0] = None, None, None


def compiled(kernel, grid, args: tuple) -> None:
    """Hand what Triton's ``warmup`` returned under ``compile_only`` to the block's ``record`` / ``keep`` lists, as
    ``launch`` does for its own launches. For launchers that compile through Triton themselves (an adopted
    autotuned kernel, SGLang's own kernels): without it the compile census of such a kernel finds no binary and
    reports no registers, LDS or spills for any config."""
    if _RECORD[0] is not None:
        _RECORD[0].append((kernel, grid, args))
    if _KEEP[0] is not None:
        _KEEP[0].append(kernel)


def compiling_for() -> str | None:
    """The backend ``compile_only`` is compiling for (its launches must compile only), or None: launch as usual.
    Launchers that do not go through ``launch`` (an adopted autotuned kernel, SGLang's own kernels) read it."""
    return _COMPILE_ONLY[0]


def launch(fn, grid: tuple, args: tuple, config, **meta) -> None:
    """``fn[grid](*args, **meta, **config's launch options)``, with the compiled kernel remembered.

    ``args``: the kernel's leading parameters, positionally; ``meta``: the remaining ones (constexprs) by name."""
    backend = _COMPILE_ONLY[0]
    if backend is not None and backend != "interpreter" and hasattr(fn, "warmup"):
        # Before anything asks Triton's runtime: under flytune_nb.backends.triton its driver is a stand-in, and the
        # fast path below keeps what it looks up for the life of the process.
        compiled(fn.warmup(*args, grid=grid, **meta, **config.launch_options(backend)), grid, args)
        return None
    rt = _RT or _runtime_or_none()
    if type(fn) is not rt["jit"]:
        return _triton(fn, grid, args, config, meta)
    knobs = rt["knobs"]
    run_knobs = knobs.runtime
    enter, leave = run_knobs.launch_enter_hook, run_knobs.launch_exit_hook
    if (enter is not None and hook_active(enter)) or (leave is not None and hook_active(leave)):
        return _triton(fn, grid, args, config, meta)  # a profiler wants Triton's launch metadata
    dev = rt["device"]()
    key = (fn, dev, config, tuple(meta.items()), run_knobs.debug, knobs.compilation.instrumentation_mode,
           rt["specialize"](jit_backend(fn, dev), args))
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


def _runtime_or_none() -> dict:
    """Triton's runtime pieces, or (remembered, so that each later launch is one dict test) {"jit": None}: nothing is
    a JITFunction then and every launch takes Triton's own path. The interpreter has no driver to ask (its functions
    are InterpretedFunction, never JITFunction); a Triton whose launcher layout is not verified (_compat.triton) or
    that lacks these internals takes Triton's own path too."""
    from flytune_nb.core.device import interpreting

    if not interpreting() and fast_launch_supported():
        try:
            rt = launch_runtime()
        except Exception:  # noqa: BLE001 - Triton's own path still works
            pass
        else:
            impl = rt["spec"]
            rt["specialize"] = lambda backend, args: tuple([specialize(impl, backend, a) for a in args])
            _RT.update(rt)
            return _RT
    _RT["jit"] = None
    return _RT


def _triton(fn, grid, args, config, meta):
    from flytune_nb.core.device import current_device, interpreting

    options = config.launch_options(current_device().backend)
    if interpreting():  # the interpreter is not thread-safe (_compat.triton.INTERPRET_LOCK says why)
        with INTERPRET_LOCK:
            try:
                return fn[grid](*args, **meta, **options)
            except BaseException:
                rezero_this_threads_counters()  # a grid stopped part-way leaves arrival counters part-counted
                raise
    return fn[grid](*args, **meta, **options)


def _first_launch(fn, grid, args, config, meta):
    kernel = _triton(fn, grid, args, config, meta)
    if callable(grid) or kernel_globals_or_hooks(fn):
        return _SLOW  # Triton re-checks globals / re-evaluates the grid / runs hooks on every call
    tail = []
    for name, has_default, default in kernel_params(fn)[len(args):]:
        if name in meta:
            tail.append(meta[name])
        elif has_default:
            tail.append(default)
        else:
            return _SLOW
    launcher = compiled_launcher(kernel)
    if launcher is None:
        return _SLOW
    call, function, mid = launcher
    return call, function, mid, tuple(tail)


def clear() -> None:
    """Forget remembered kernels (tests; a kernel edited and re-imported gets a new JITFunction anyway)."""
    _ENTRIES.clear()
