"""Every private FlyDSL internal flytune_nb touches, in one place, each with a fallback.

Verified against flydsl 0.5.0 (``VERIFIED``; tests/compat/test_flydsl_internals.py reads the installed package).
Nothing here imports FlyDSL at module level: importing ``flydsl.compiler`` costs ~2 s on the 2-core CPU box, which a
kernel listing must never pay.

- ``compiler_key()``: FlyDSL's own compile-cache fingerprint (``jit_function._flydsl_key()``: every .py of its
  compiler, the native libraries' digest table, its version, the ROCm bitcode it links). Fallback: the sha256 of the
  installed wheel's RECORD (the installed files' hashes), which needs no import.
- ``cache_invalidating_env()``: the variables FlyDSL folds into its compile-cache key
  (``jit_function._CACHE_INVALIDATING_ENV_VARS`` and the per-arch table). Fallback: 0.5.0's list.
- ``compile_hints(hints)``: how FlyDSL applies ``waves_per_eu`` (``CompilationContext.compile_hints``, which its own
  Autotuner uses around a compile). ``flyc.compile[{...}]`` would be public, but it writes the hints into the
  function for good (a later plain compile keeps them), so a sweep cannot use it.
- ``jit_signature(fn)``: the @flyc.jit function's parameters (``JitFunction.func``, the rewritten function).
- ``check_annotation(annotation, value)``: the check FlyDSL's artifact loader applies (``Constexpr[int].__coerce__``);
  a direct call does not check, and ``VEC=8.0`` reaching the tracer crashes the process (SIGSEGV).
- ``compiled_ir(compiled)``: the compiled module's MLIR text (``CompiledFunction._keepalive.ir``), whose
  ``gpu.binary`` carries each kernel's metadata (registers, LDS, scratch, spills) and code object.
- ``forget_compiled(fn)``: empties a @jit function's in-memory artifact cache (``JitFunction._mem_cache``), so that
  a compile report really compiles (a hit there, like a disk-cache hit, shows none of LLVM's diagnostics).
- ``device_descriptor()``: the identity FlyDSL's Autotuner gives the GPU of a call (``autotune._device_descriptor``).
- ``final_isa(folder)``: FlyDSL writes each module it compiles as AMD assembly (``<kernel>/NN_final_isa.s``) under
  ``folder`` (its debug options ``FLYDSL_DEBUG_DUMP_ASM`` and ``FLYDSL_DUMP_DIR``, read at each compile; the same
  code object, through a second ``gpu-module-to-binary{format=isa}`` on a clone of the module: ~0.2 s for
  rmsnorm on gfx942). It prints a line per file on stdout, which this keeps off the caller's output. Nothing is
  written with an external LLVM (``FLYDSL_COMPILE_LLVM_DIR``): FlyDSL raises on every compile asked to dump there.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.metadata
from functools import lru_cache

from flytune_nb._compat import distribution_version, version_listed

VERIFIED = {(0, 5)}

# flydsl 0.5.0's jit_function._CACHE_INVALIDATING_ENV_VARS (plus its gfx1250-only variable), for a FlyDSL without it.
KNOWN_ENV = ("FLYDSL_COMPILE_OPT_LEVEL", "FLYDSL_COMPILE_BACKEND", "FLYDSL_COMPILE_LLVM_DIR",
             "FLYDSL_DEBUG_ENABLE_DEBUG_INFO", "FLYDSL_EXTRA_SOURCE_DIRS", "FLYDSL_KTRACE_ENABLE",
             "FLYDSL_KTRACE_BLOCKS", "FLYDSL_KTRACE_BUFFER_BYTES", "LLVM_GFX1250_ANY_XNACK_CODEGEN")


def installed_version() -> str | None:
    """The installed flydsl's version, from its metadata (no import); None when it is not installed."""
    return distribution_version("flydsl")


def verified() -> bool:
    return version_listed(installed_version(), VERIFIED, 2)


@lru_cache(maxsize=None)
def record_digest() -> str:
    """sha256 of the installed wheel's RECORD: a change to any installed file changes it."""
    text = importlib.metadata.distribution("flydsl").read_text("RECORD") or ""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@lru_cache(maxsize=None)
def compiler_key() -> str:
    """sha256 (16 hex digits) of FlyDSL's compile-cache fingerprint, ``record:<digest>`` where it cannot be read.
    Read once per process: its ROCm part depends on ROCM_PATH, which a process does not change under a sweep."""
    try:
        from flydsl.compiler.jit_function import _flydsl_key

        return hashlib.sha256(_flydsl_key().encode()).hexdigest()[:16]
    except Exception:  # noqa: BLE001 - another FlyDSL's layout: the installed files still identify it
        return "record:" + record_digest()


def cache_invalidating_env() -> tuple[str, ...]:
    try:
        from flydsl.compiler import jit_function as jf

        names = list(jf._CACHE_INVALIDATING_ENV_VARS)
        for per_arch in jf._TARGET_CACHE_INVALIDATING_ENV_VARS.values():
            names += list(per_arch)
        return tuple(dict.fromkeys(names))
    except Exception:  # noqa: BLE001
        return KNOWN_ENV


@contextlib.contextmanager
def compile_hints(hints: dict):
    """Compile hints (``{"waves_per_eu": 2}``) for the compiles in this block, on this thread only."""
    if not hints:
        yield
        return
    from flydsl.compiler.kernel_function import CompilationContext

    with CompilationContext.compile_hints(hints):
        yield


def jit_signature(fn):
    """inspect.Signature of a @flyc.jit function."""
    import inspect

    return inspect.signature(getattr(fn, "func", fn))


def is_constexpr(annotation) -> bool:
    from flydsl.expr.typing import Constexpr

    return Constexpr.is_constexpr_annotation(annotation)


def is_stream(annotation) -> bool:
    return bool(getattr(annotation, "_is_stream_param", False))


def check_annotation(annotation, value) -> None:
    """TypeError when ``value`` is not what a ``Constexpr[T]`` parameter takes (FlyDSL's own loader rule)."""
    coerce = getattr(annotation, "__coerce__", None)
    if callable(coerce):
        coerce(value)


def compiled_ir(compiled) -> str:
    """The MLIR text of a CompiledFunction's module; "" when this FlyDSL keeps it elsewhere."""
    try:
        return str(compiled._keepalive.ir)
    except Exception:  # noqa: BLE001
        return ""


def device_descriptor() -> dict | None:
    """{"name", "arch", "compute_units"} as FlyDSL's Autotuner identifies the current GPU; None without one."""
    at = importlib.import_module("flydsl.autotune")  # not `import flydsl.autotune as at`: that binds the decorator
    return at._device_descriptor()


def forget_compiled(fn) -> None:
    cache = getattr(fn, "_mem_cache", None)
    if isinstance(cache, dict):
        cache.clear()


@contextlib.contextmanager
def final_isa(folder):
    """See the module doc. Not for threads: it sets process-wide variables and sys.stdout for the block."""
    import io
    import os

    if os.environ.get("FLYDSL_COMPILE_LLVM_DIR", "").strip():  # as FlyDSL decides (_use_external_binary_codegen)
        yield
        return
    from flytune_nb.core.environ import environ

    # FLYDSL_DUMP_IR unset: else every IR stage is written too
    with environ({"FLYDSL_DEBUG_DUMP_ASM": "1", "FLYDSL_DUMP_DIR": str(folder), "FLYDSL_DUMP_IR": None}), \
            contextlib.redirect_stdout(io.StringIO()):
        yield
