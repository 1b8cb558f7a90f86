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
import functools
import re
import threading
from functools import lru_cache

from flytune_nb.errors import UsageError

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


# -- the interpreter -----------------------------------------------------------------------------------------------
# Triton's interpreter keeps the running program's id in one module-global builder
# (triton.runtime.interpreter.interpreter_builder in 3.6; guarded in any Triton that has it) and patches
# triton.language for the length of a run: two threads interpreting kernels at once read each other's program ids
# and write wrong tiles, or fail a launch (a sweep's in-process lane beside a cell calling a kernel, tuned, adopted
# or launched as kernel[grid] by hand). Every interpreted launch in the process runs on this lock, taken in
# InterpretedFunction.run, the entry of every interpreted launch (the launcher takes it too).
INTERPRET_LOCK = threading.RLock()


def serialise_interpreter() -> bool:
    """Make every interpreted launch of this process run one at a time (idempotent). False where the installed
    Triton's interpreter has no module-global builder or no InterpretedFunction.run to wrap (nothing to guard, or a
    layout this was not written for: launches through flytune's launcher still hold the lock)."""
    from triton.runtime import interpreter

    cls = getattr(interpreter, "InterpretedFunction", None)
    run = getattr(cls, "run", None)
    if run is None or not hasattr(interpreter, "interpreter_builder"):
        return False
    if getattr(run, "_flytune_serialised", False):
        return True

    @functools.wraps(run)
    def run_alone(self, *args, **kwargs):
        with INTERPRET_LOCK:
            return run(self, *args, **kwargs)

    run_alone._flytune_serialised = True
    cls.run = run_alone
    return True


def stdlib_compiled_for_gpu() -> bool:
    """Whether triton.language was imported before TRITON_INTERPRET was set: Triton decides at decoration time, so
    its own @jit functions (tl.sum, tl.max, tl.softmax, ...) are then compiled-mode JITFunctions, and an interpreted
    kernel calling one fails with "Cannot call @triton.jit'd outside of the scope of a kernel"."""
    import sys

    lang = sys.modules.get("triton.language")
    return lang is not None and type(getattr(lang, "sum", None)).__name__ == "JITFunction"


def fix_interpreter_bf16_dot() -> bool:
    """Make the interpreter's ``tl.dot`` right for bfloat16 operands (idempotent). Triton 3.6's interpreter stores
    bf16 as uint16 and its ``create_dot`` hands those bits to numpy's matmul as integers: a 16x16 product is off by
    up to 2.6e10, so every bf16 config of a GEMM kernel (SGLang's fused MoE among them) reads "wrong" on the CPU.
    Here bf16 operands are widened to fp32 first (exact), which is what an MMA with an fp32 accumulator computes.
    False where the installed interpreter has no such builder method or stores bf16 otherwise (nothing to fix, or a
    layout this was not written for)."""
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    builder = getattr(interpreter, "InterpreterBuilder", None)
    dot = getattr(builder, "create_dot", None)
    convert, handle = getattr(interpreter, "_convert_float", None), getattr(interpreter, "TensorHandle", None)
    if dot is None or convert is None or handle is None:
        return False
    if getattr(dot, "_flytune_bf16", False):
        return True

    def widened(h):
        if h.dtype.scalar != tl.bfloat16 or h.data.dtype != np.uint16:
            return h
        return handle(convert(h.data, tl.bfloat16, tl.float32, None).view(np.float32), tl.float32)

    @functools.wraps(dot)
    def create_dot(self, a, b, d, *args, **kwargs):
        return dot(self, widened(a), widened(b), d, *args, **kwargs)

    create_dot._flytune_bf16 = True
    builder.create_dot = create_dot
    return True


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


# -- host-side tensor descriptors ----------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def host_tma_supported() -> bool:
    """Whether this Triton has what a TMA path needs: host-side tensor descriptors (``triton.tools.tensor_descriptor``)
    and flattened loops (``tl.range(flatten=...)``), both 3.4 and newer (pyproject allows older ones)."""
    try:
        import inspect

        import triton.language as tl
        from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: F401
    except ImportError:
        return False
    return "flatten" in inspect.signature(tl.range.__init__).parameters


# The fields of Triton 3.6's TensorDescriptor dataclass, in order: what descriptor_maker's descriptors fill.
_DESCRIPTOR_FIELDS = ("base", "shape", "strides", "block_shape", "padding")


@lru_cache(maxsize=1)
def descriptor_maker():
    """``make(tensor, block_shape) -> TensorDescriptor`` for a tensor its caller has already checked for TMA (non-empty,
    16-byte-aligned base and row stride, unit last stride), or None on a Triton without host-side descriptors.

    Triton's ``TensorDescriptor.from_tensor`` re-checks all of that in ``__post_init__``: 1.2-1.5 us a descriptor on
    these hosts, three of them a matmul call, each call. On a Triton whose dataclass has exactly the fields above (3.6),
    ``make`` fills them without the re-check and validates each distinct block shape once, with Triton's own check;
    any other layout gets ``from_tensor``."""
    import dataclasses

    try:
        from triton.tools.tensor_descriptor import TensorDescriptor
    except ImportError:
        return None
    try:
        from triton._utils import validate_block_shape
        fields = tuple(f.name for f in dataclasses.fields(TensorDescriptor))
    except (ImportError, TypeError):
        fields = ()
    if fields != _DESCRIPTOR_FIELDS or version() not in FAST_LAUNCH:
        return TensorDescriptor.from_tensor

    @lru_cache(maxsize=None)
    def valid(block: tuple) -> bool:
        validate_block_shape(list(block))  # raises on a block shape Triton would refuse
        return True

    new = object.__new__

    def make(tensor, block_shape):
        valid(tuple(block_shape))
        desc = new(TensorDescriptor)
        desc.base, desc.shape, desc.strides, desc.block_shape, desc.padding = (
            tensor, tensor.shape, tensor.stride(), block_shape, "zero")
        return desc

    return make


# -- compiling without a device ------------------------------------------------------------------------------------
def gpu_target(backend: str, arch, warp_size: int):
    from triton.backends.compiler import GPUTarget

    return GPUTarget(backend, arch, warp_size)


def driver_target() -> tuple | None:
    """(backend, arch, warp_size) of the GPU Triton's active driver compiles for, or None on a Triton whose driver
    cannot say (the caller then lets the real driver answer). Asking creates the driver: on CUDA it builds Triton's C
    helpers first (seconds in a fresh Triton cache)."""
    try:
        from triton.runtime.driver import driver

        t = driver.active.get_current_target()
        return (t.backend, t.arch, t.warp_size)
    except Exception:  # noqa: BLE001 - a Triton without these internals, or no driver for this machine
        return None


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


def version_key_computed() -> bool:
    """Whether this process holds Triton's version key already (computed here, or inherited from the forkserver that
    forked it). False where ``triton_key`` is not an lru-cached function."""
    from triton.runtime.cache import triton_key

    info = getattr(triton_key, "cache_info", None)
    return info is not None and info().currsize > 0


def cache_invalidating_env() -> dict:
    """The TRITON_* / MLIR_* / LLVM_* variables Triton itself says invalidate its compile cache; {} where it cannot say."""
    try:
        from triton._C.libtriton import get_cache_invalidating_env_vars
    except ImportError:
        return {}
    return {k: str(v) for k, v in get_cache_invalidating_env_vars().items()}


# -- @triton.autotune: the decorator's object, its key, its cache, its benchmarker ----------------------------------
# Layout read in Triton's own runtime/autotuner.py of 3.2, 3.3, 3.4, 3.5, 3.6 and 3.9; tests/compat run the installed
# one. What flytune_nb relies on, the same in all of them:
# - ``Autotuner`` keeps the decorator's arguments as attributes (``AUTOTUNER_FIELDS``) and the wrapped object in ``fn``
#   (a JITFunction, an InterpretedFunction, or an inner ``Heuristics`` whose ``fn`` leads on), and the Python function
#   at the bottom of that chain in ``base_fn`` (``autotuned_name``);
# - ``run(*args, **kwargs)`` keys ``cache`` (a dict per object) on ``autotune_key``'s tuple, and only when the
#   decorator has more than one config; on a miss it calls ``prune_configs(kwargs)`` (with ``nargs`` set), benchmarks
#   each surviving config through ``do_bench``, keeps the fastest; on a hit it calls ``config.pre_hook`` if any, then
#   ``fn.run(*args, **kwargs, **config.all_kwargs())``;
# - ``do_bench`` is an attribute set in ``__init__`` (3.2, 3.3) or a cached_property (3.4+): an instance attribute of
#   the same name shadows both.
AUTOTUNER_LAYOUTS = {(3, 2), (3, 3), (3, 4), (3, 5), (3, 6), (3, 9)}
AUTOTUNER_FIELDS = ("configs", "keys", "cache", "arg_names", "reset_to_zero", "restore_value", "fn",
                    "early_config_prune", "perf_model", "configs_top_k", "prune_configs")
# triton.Config fields other Triton releases add, with the value that means "not used": 3.2/3.3's warp
# specialisation and 3.4+'s IR override. A config that sets one of them is outside what flytune_nb can carry.
CONFIG_EXTRAS = {"ir_override": None, "num_buffers_warp_spec": 0, "num_consumer_groups": 0, "reg_dec_producer": 0,
                 "reg_inc_consumer": 0}


class AutotunerLayoutError(UsageError):
    """The object is not an autotuned kernel this module can read (its message says what is missing). A UsageError:
    what was passed is not a ``@triton.autotune`` kernel of a layout flytune_nb reads."""


def autotuner_layout_verified() -> bool:
    return version() in AUTOTUNER_LAYOUTS


def unwrap_autotuned(obj):
    """(autotuner, outer layers, inner layers, jit function) for what ``@triton.autotune`` built, walking ``.fn`` from
    the object a module exposes (outer ``@triton.heuristics`` first) down to the jit function."""
    from triton.runtime.autotuner import Autotuner

    outer, inner, at, o = [], [], None, obj
    for _ in range(32):  # a decorator chain is a handful deep; a cycle is not a kernel
        if isinstance(o, Autotuner):
            if at is not None:
                raise AutotunerLayoutError("two @triton.autotune decorators are stacked on one kernel")
            at = o
        elif type(o).__name__ in ("JITFunction", "InterpretedFunction"):
            if at is None:
                raise AutotunerLayoutError(f"{_name(obj)} is a jit function without @triton.autotune")
            return at, outer, inner, o
        elif at is None and not hasattr(o, "fn"):
            raise AutotunerLayoutError(f"{_name(obj)} is a {type(o).__name__}, not a @triton.autotune kernel")
        else:
            (inner if at is not None else outer).append(o)
        if not hasattr(o, "fn"):
            break
        o = o.fn
    raise AutotunerLayoutError(f"{_name(obj)}: no jit function under its @triton.autotune")


def _name(obj) -> str:
    return getattr(obj, "__name__", None) or type(obj).__name__


def autotuned_name(at) -> str:
    """The name of the Python function an ``Autotuner`` tunes (its ``base_fn``); the autotuner's repr on a Triton
    whose Autotuner keeps no ``base_fn``."""
    return getattr(getattr(at, "base_fn", None), "__name__", None) or str(at)


def read_autotuner(at) -> dict:
    """The decorator's arguments as plain data. Raises AutotunerLayoutError naming any attribute this Triton's
    Autotuner lacks (a layout other than the verified ones)."""
    missing = [f for f in AUTOTUNER_FIELDS if not hasattr(at, f)]
    if missing:
        import triton

        raise AutotunerLayoutError(
            f"Triton {triton.__version__}'s Autotuner has no {', '.join(missing)}: flytune_nb reads the decorator of "
            f"Triton {', '.join('.'.join(map(str, v)) for v in sorted(AUTOTUNER_LAYOUTS))}")
    return {
        "configs": list(at.configs), "keys": list(at.keys), "arg_names": list(at.arg_names),
        "restore_value": list(at.restore_value or ()), "reset_to_zero": list(at.reset_to_zero or ()),
        "early_config_prune": at.early_config_prune, "perf_model": at.perf_model, "top_k": at.configs_top_k,
        "user_pre_hook": getattr(at, "user_defined_pre_hook", False),
        "user_post_hook": getattr(at, "user_defined_post_hook", False),
        "cache_results": bool(getattr(at, "cache_results", False)),  # the disk cache exists from 3.4 on
    }


def heuristic_names(layers) -> list[str]:
    """The meta-parameters ``@triton.heuristics`` layers compute."""
    from triton.runtime.autotuner import Heuristics

    return [name for layer in layers if isinstance(layer, Heuristics) for name in layer.values]


def config_fields(config) -> dict:
    """One triton.Config as {"kwargs", "num_warps", "num_stages", "num_ctas", "maxnreg", "pre_hook"} plus, under
    "unsupported", the fields it sets that none of those carry."""
    d = vars(config)
    out = {k: d.get(k) for k in ("num_warps", "num_stages", "num_ctas", "maxnreg", "pre_hook")}
    out["kwargs"] = dict(d.get("kwargs") or {})
    out["unsupported"] = {k: v for k, v in d.items()
                          if k not in out and k in CONFIG_EXTRAS and v != CONFIG_EXTRAS[k]} | {
        k: v for k, v in d.items() if k not in out and k not in CONFIG_EXTRAS}
    return out


def launch_option_names() -> frozenset:
    """The keywords a launch (and so a triton.Config's kwargs) may carry besides the kernel's arguments: the fields of
    the installed backends' compile options (num_warps, enable_fp_fusion, waves_per_eu, ...). Triton refuses any
    other keyword at launch on a GPU; its interpreter drops it silently."""
    import dataclasses

    names = {"num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion", "debug", "waves_per_eu",
             "matrix_instr_nonkdim", "kpack", "launch_cooperative_grid", "launch_pdl"}
    for module, cls in (("triton.backends.nvidia.compiler", "CUDAOptions"),
                        ("triton.backends.amd.compiler", "HIPOptions")):
        try:
            options = getattr(__import__(module, fromlist=[cls]), cls)
            names |= {f.name for f in dataclasses.fields(options)}
        except Exception:  # noqa: BLE001 - a backend this Triton lacks or lays out otherwise: the list above stands
            continue
    return frozenset(names)


def triton_config(kwargs: dict, **options):
    """A triton.Config with the options this Triton's Config accepts (None: Triton's default)."""
    import inspect

    import triton

    accepted = inspect.signature(triton.Config.__init__).parameters
    return triton.Config(dict(kwargs), **{k: v for k, v in options.items() if v is not None and k in accepted})


def autotune_key(at, args: tuple, kwargs: dict) -> tuple:
    """The tuple ``Autotuner.run`` keys its cache on for a call with ``args`` / ``kwargs`` (as the autotuner receives
    them: after outer heuristics; ``grid`` and ``warmup`` are dropped as they are not arguments): the ``key``
    arguments' values in ``key`` order, then ``str(dtype)`` of every argument that has one, in the order of
    ``{**dict(zip(arg_names, args)), **kwargs}`` (positional first, then keywords in the order the caller wrote
    them). A key name that is not passed is left out (a ValueError at decoration from 3.9 on)."""
    named = {k: v for k, v in {**dict(zip(at.arg_names, args)), **kwargs}.items() if k in at.arg_names}
    key = [named[k] for k in at.keys if k in named]
    key += [str(v.dtype) for v in named.values() if hasattr(v, "dtype")]
    return tuple(key)


def tunes(at) -> bool:
    """Whether ``run`` consults the cache at all: with a single config it launches that one, keyless."""
    return len(at.configs) > 1


@contextlib.contextmanager
def intercepted(at, run):
    """Within the block, the autotuner's ``run`` is ``run(*args, grid=..., warmup=..., **kwargs)``: whatever reaches
    it (``kernel[grid](...)``, outer heuristics, the library's own Python function) arrives there with exactly the
    arguments the autotuner would get, and the autotuner itself does nothing. An instance attribute shadows the
    class's method; removed afterwards."""
    had = "run" in vars(at)
    saved = vars(at).get("run")
    at.run = run
    try:
        yield
    finally:
        if had:
            at.run = saved
        else:
            del at.run


def launch_config(at, args: tuple, kwargs: dict, config, *, warmup: bool | None = None):
    """Launch one triton.Config bypassing the search, as ``Autotuner.run`` launches a cache hit: ``config.pre_hook``
    on the full arguments first, then ``at.fn.run(*args, **kwargs, **config.all_kwargs())``. ``kwargs`` holds
    ``grid`` and ``warmup`` as ``kernel[grid]`` passes them; ``warmup=True`` compiles without launching.
    ``restore_value`` / ``reset_to_zero`` are not applied here (Triton applies them only while benchmarking)."""
    kwargs = dict(kwargs)
    if warmup is not None:
        kwargs["warmup"] = warmup
    clash = (kwargs.keys() - {"grid", "warmup"}) & config.kwargs.keys()
    if clash:
        raise ValueError(f"meta-parameters {', '.join(sorted(clash))} are given by the caller and by the "
                         f"autotuner's config")
    extra = config.all_kwargs()
    if config.pre_hook is not None and not kwargs.get("warmup"):
        config.pre_hook({**dict(zip(at.arg_names, args)), **{k: v for k, v in kwargs.items()
                                                              if k not in ("grid", "warmup")}, **extra})
    return at.fn.run(*args, **kwargs, **extra)


def pruned_configs(at, args: tuple, kwargs: dict) -> list:
    """The configs ``run`` would benchmark for this call: ``early_config_prune`` then ``perf_model`` / ``top_k``,
    through the autotuner's own ``prune_configs`` with ``nargs`` set as ``run`` sets it (positional args only)."""
    saved = getattr(at, "nargs", None)
    at.nargs = dict(zip(at.arg_names, args))
    try:
        return list(at.prune_configs(dict(kwargs)))
    finally:
        at.nargs = saved


def prime_cache(at, entries: dict) -> None:
    """``entries``: {key tuple: triton.Config}. A call whose key is there launches that config and benchmarks
    nothing (``run``: ``if key not in self.cache`` is false)."""
    for key, config in entries.items():
        at.cache[tuple(key)] = config


def unprime_cache(at, key) -> None:
    """Forget what ``prime_cache`` put under ``key`` (nothing if it is not there): the next call with it tunes."""
    at.cache.pop(tuple(key), None)


class _CacheMiss(Exception):
    pass


def hits_cache(at, call) -> bool:
    """Run ``call`` (which reaches ``at`` through its own code, on inputs that may live on the meta device) with the
    autotuner's real ``run`` but nothing launched and nothing benchmarked: True when ``run`` found its key in the
    cache, False when it would have tuned (it asked for the pruned configs, which only a miss does)."""
    inner = at.fn
    had_run, saved_run = "run" in vars(inner), vars(inner).get("run")
    had_prune, saved_prune = "prune_configs" in vars(at), vars(at).get("prune_configs")

    def miss(*_a, **_k):
        raise _CacheMiss

    inner.run = lambda *a, **k: None
    at.prune_configs = miss
    try:
        call()
        return True
    except _CacheMiss:
        return False
    finally:
        for obj, name, had, saved in ((inner, "run", had_run, saved_run), (at, "prune_configs", had_prune, saved_prune)):
            if had:
                setattr(obj, name, saved)
            else:
                delattr(obj, name)
        at.nargs = None


class BenchCount:
    def __init__(self) -> None:
        self.calls = 0


@contextlib.contextmanager
def count_benchmarks(at, benchmarker=None):
    """Count the autotuner's benchmark calls (one per config it times) within the block. ``benchmarker``: what times
    each call instead of the autotuner's own (``do_bench(kernel_call, quantiles=...)``); by default its own, resolved
    when first needed exactly as the autotuner resolves it. An instance attribute ``do_bench`` shadows the 3.4+
    cached_property and replaces the 3.2/3.3 attribute alike; the previous state is put back."""
    had, saved = "do_bench" in vars(at), vars(at).get("do_bench")
    count = BenchCount()

    def counting(kernel_call, quantiles=None, **kw):
        count.calls += 1
        real = benchmarker
        if real is None:
            real = saved if had else _default_benchmarker(at)
        return real(kernel_call, quantiles=quantiles, **kw)

    at.do_bench = counting
    try:
        yield count
    finally:
        if had:
            at.do_bench = saved
        else:
            del at.do_bench


def _default_benchmarker(at):
    custom = getattr(at, "_do_bench", None)  # autotune(do_bench=...) on 3.4+
    if custom is not None:
        return custom
    from triton.runtime.driver import driver

    return driver.active.get_benchmarker()


def jit_function(at):
    """The JITFunction under the autotuner (None under the interpreter, whose functions are not JITFunctions)."""
    from triton.runtime.jit import JITFunction

    fn = at.fn
    while fn is not None and not isinstance(fn, JITFunction):
        fn = getattr(fn, "fn", None)
    return fn


def disk_cache_supported(at) -> str:
    """"" when Triton's on-disk autotune cache can hold an entry for ``at`` here, else why not."""
    if not hasattr(at, "check_disk_cache"):
        return "this Triton has no on-disk autotune cache (3.4 and newer have one)"
    if jit_function(at) is None:
        return "the kernel is not compiled (Triton's interpreter)"
    return ""


def disk_cache_entry(at, key: tuple, configs: list) -> tuple[str, str]:
    """(cache key, file name) as ``Autotuner.check_disk_cache`` computes them for ``key`` and the pruned config list
    ``configs`` in order (triton_key, the backend's hash for the current target, the jit function's cache key, the
    cache-invalidating env, the key, each config's str). Needs the active driver's target."""
    import hashlib

    from triton._C.libtriton import get_cache_invalidating_env_vars
    from triton.compiler.compiler import make_backend
    from triton.runtime.cache import triton_key
    from triton.runtime.driver import driver

    fn = jit_function(at)
    parts = [triton_key(), make_backend(driver.active.get_current_target()).hash(), fn.cache_key,
             str(sorted(get_cache_invalidating_env_vars().items())), str(key)] + [str(c) for c in configs]
    return hashlib.sha256("-".join(parts).encode("utf-8")).hexdigest(), f"{fn.__name__[:150]}.autotune.json"


def write_disk_entry(at, key: tuple, configs: list, winner, timing_ms: float) -> str:
    """Write the entry ``check_disk_cache`` reads for (key, configs) as its own: ``{"key", "configs_timings":
    [[winner's fields, [median, p20, p80]]]}`` through Triton's cache manager (atomic). The reader takes the fastest
    of what is listed, so the winner alone is listed. Returns the file's path."""
    import json

    from triton.runtime.cache import get_cache_manager

    cache_key, name = disk_cache_entry(at, key, configs)
    body = {"key": list(key), "configs_timings": [[dict(vars(winner)), [timing_ms] * 3]]}
    return get_cache_manager(cache_key).put(json.dumps(body, default=str), name, binary=False)
