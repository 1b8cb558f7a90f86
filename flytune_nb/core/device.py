"""Which device we are tuning on: backend, SGLang-style name, arch, SM/CU count, L2 size.

The name is what SGLang writes into artifact file names: ``torch.cuda.get_device_name(0)`` with spaces replaced by
``_`` (``NVIDIA_H200``, ``AMD_Instinct_MI300X``). Without a GPU, Triton runs through its interpreter and every timing is
labelled ``CPU_interpreter`` so that it can never be mistaken for (or exported as) a GPU result.

A process may instead *compile for* a GPU it does not have (``enter_compile_mode``: a census of an MI300X's binaries on
a CPU machine). Then ``current_device()`` answers that GPU's description and Triton stays a compiler: nothing in the
process launches a kernel.
"""
from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

INTERPRETER_NAME = "CPU_interpreter"


@dataclass(frozen=True)
class DeviceInfo:
    backend: str  # "cuda" | "hip" | "interpreter"
    name: str  # SGLang-normalised, e.g. NVIDIA_H200
    arch: str  # sm_90 | gfx942 | cpu
    sm_count: int  # SMs (NVIDIA) / CUs (AMD) / CPU cores (interpreter)
    l2_bytes: int  # 0 when unknown
    total_memory: int  # bytes; 0 when unknown
    torch_device: str = "cpu"  # where inputs are allocated: "cuda:0" or "cpu"
    smem_bytes: int = 0  # shared memory (LDS) one block may use, opt-in maximum; 0 when unknown (interpreter)
    # torch's own name for the GPU ("AMD Instinct MI300X"), before normalising: FlyDSL's offline configs are
    # identified by it. "" when unknown (the interpreter, a device described by hand).
    raw_name: str = ""

    @property
    def is_gpu(self) -> bool:
        return self.backend in ("cuda", "hip")

    @property
    def label(self) -> str:
        return f"{self.name} ({self.arch}, {self.backend})"


# What a file name cannot hold: "/" separates folders (so does "\" on Windows, where flytune runs too) and NUL ends
# the name. SGLang replaces spaces only, so for a name holding one of these it looks its file up by a path into a
# sub-folder, which no export can match; no GPU name torch reports has one. Such a name is made into a file-name part
# (each replaced by "_") rather than refused: tuning on that GPU still works, and its files never land outside their
# folder.
NOT_IN_FILE_NAMES = re.compile(r"[/\\\x00]")


def normalise_name(raw: str) -> str:
    """SGLang's rule, ``get_device_name().replace(" ", "_")``, and nothing more: ``Intel(R) Arc(TM) A770 Graphics``
    -> ``Intel(R)_Arc(TM)_A770_Graphics``, parentheses kept and nothing stripped, since that is the very name SGLang
    looks its files up by (it ships some for ``Intel(R)_Arc(TM)_Pro_B60_Graphics``). The one exception: characters
    no file name can hold (NOT_IN_FILE_NAMES)."""
    return NOT_IN_FILE_NAMES.sub("_", raw.replace(" ", "_"))


def from_properties(props: Any, *, hip: bool, index: int = 0) -> DeviceInfo:
    """Build a DeviceInfo from ``torch.cuda.get_device_properties`` (or any object with the same attributes, which is
    how the HIP branch is tested without an AMD GPU)."""
    if hip:
        # gcnArchName looks like "gfx942:sramecc+:xnack-"; the features after ':' do not change codegen choices we key on.
        arch = str(getattr(props, "gcnArchName", "") or "gfx_unknown").split(":")[0]
        backend = "hip"
    else:
        arch = f"sm_{props.major}{props.minor}"
        backend = "cuda"
    l2 = int(getattr(props, "L2_cache_size", 0) or 0)
    # CUDA: the opt-in per-block maximum (227 KiB on H100/H200) is what Triton may use; HIP reports LDS (64 KiB on
    # MI300X, 160 KiB on MI355X) as shared_memory_per_block.
    smem = int(getattr(props, "shared_memory_per_block_optin", 0) or getattr(props, "shared_memory_per_block", 0) or 0)
    return DeviceInfo(
        backend=backend,
        name=normalise_name(props.name),
        arch=arch,
        sm_count=int(props.multi_processor_count),
        l2_bytes=l2,
        total_memory=int(getattr(props, "total_memory", 0) or 0),
        torch_device=f"cuda:{index}",
        smem_bytes=smem,
        raw_name=str(props.name),
    )


# GPUs as current_device() described them where flytune's stored sweeps ran: for re-scoring a heuristic on stored
# timings (benchmarks/heuristic_regret.py's "heuristic now") and CPU tests of GPU-only decisions. Nothing runs on
# them.
DESCRIBED = {
    "NVIDIA_H200": DeviceInfo("cuda", "NVIDIA_H200", "sm_90", 132, 60 << 20, 140 << 30, "cuda:0", 227 << 10),
    # as current_device() reported an H100 SXM5 (its stores' runs table): 79.2 GiB of its 80 usable
    "NVIDIA_H100_80GB_HBM3": DeviceInfo("cuda", "NVIDIA_H100_80GB_HBM3", "sm_90", 132, 50 << 20, 85017493504,
                                        "cuda:0", 227 << 10),
}


def interpreter_device() -> DeviceInfo:
    return DeviceInfo("interpreter", INTERPRETER_NAME, "cpu", os.cpu_count() or 1, 0, 0, "cpu")


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


_COMPILING_FOR: list = [None]  # the DeviceInfo this process compiles for without it (enter_compile_mode), or None


def compiling_for() -> DeviceInfo | None:
    """The GPU this process compiles for without having it, or None (it runs on what it finds)."""
    return _COMPILING_FOR[0]


def enter_compile_mode(device: DeviceInfo) -> None:
    """From now on this process compiles for ``device`` and has no device of its own: ``current_device()`` answers
    ``device`` (the launchers that ask it size their grids and pick their paths for that GPU) and
    ``ensure_backend()`` leaves Triton a compiler even where there is no GPU (the interpreter's kernels would be
    InterpretedFunctions, which compile nothing).

    For the life of the process, one target: Triton's JIT keeps one compiled-kernel cache per device index, made for
    the target of its first compile (one target per process), so a second, different target is refused. Call it
    before any kernel folder is imported; a process whose Triton was already imported for the interpreter is
    refused too (``triton.language``'s own jitted helpers are made for one mode at import). A census process also
    gets its own TRITON_CACHE_DIR from its parent (flytune_nb.engine.census_pool)."""
    from flytune_nb.errors import RunError, UsageError

    if not device.is_gpu:
        raise UsageError(f"compiling needs a GPU target, got {device.label}")
    have = _COMPILING_FOR[0]
    if have is not None:
        if have == device:
            return
        raise RunError(f"this process already compiles for {have.label}; a second target ({device.label}) needs "
                       f"a process of its own")
    if interpreting():
        if "triton.language" in sys.modules:
            raise RunError("Triton was imported here for its interpreter (TRITON_INTERPRET=1); compiling for "
                           f"{device.label} needs a fresh process without it")
        del os.environ["TRITON_INTERPRET"]
    _COMPILING_FOR[0] = device


def ensure_backend() -> None:
    """Switch Triton to its interpreter when there is no GPU (unless this process compiles for a named one).

    Must run before any ``@triton.jit`` function is defined: Triton reads TRITON_INTERPRET at decoration time. The
    registry calls this before importing a kernel folder.
    """
    if not interpreting() and _COMPILING_FOR[0] is None:
        import torch

        if not torch.cuda.is_available():
            os.environ["TRITON_INTERPRET"] = "1"
            reason = interpreter_unusable()
            if reason:  # said once, where the switch happens; every in-process launch would fail without a word why
                import warnings

                warnings.warn(reason, InterpreterWarning, stacklevel=3)
    if interpreting():  # the interpreter is not thread-safe: one interpreted launch at a time in this process
        from flytune_nb._compat.triton import fix_interpreter_bf16_dot, serialise_interpreter

        serialise_interpreter()
        fix_interpreter_bf16_dot()  # its bf16 tl.dot is wrong as shipped (Triton 3.6)


def choose_interpreter_early() -> None:
    """At ``import flytune_nb``: with a CPU-only torch build there is no GPU to find, so the interpreter is chosen
    now, and a ``import triton`` on the notebook's next line is decorated for it (Triton decides at import; chosen
    later, every in-process launch would fail). A CUDA or ROCm build waits for ensure_backend: asking the driver
    whether a GPU is there would cost every import a driver initialisation. A census process entering compile mode
    takes the choice back (enter_compile_mode), as Triton is not imported yet."""
    if interpreting() or _COMPILING_FOR[0] is not None or "triton.language" in sys.modules:
        return
    if not torch_has_gpu_build():
        os.environ["TRITON_INTERPRET"] = "1"


def torch_has_gpu_build() -> bool:
    """Whether the installed torch was built for CUDA or ROCm (whether or not a GPU is present)."""
    import torch

    return torch.version.cuda is not None or getattr(torch.version, "hip", None) is not None


class InterpreterWarning(UserWarning):
    """Kernels cannot run on Triton's CPU interpreter in this process (see interpreter_unusable)."""


def interpreter_unusable() -> str:
    """Why kernels cannot run interpreted in this process, or "": Triton was imported before the interpreter was
    chosen (a notebook whose first cell imports triton, on a machine without a GPU). Worker processes (sweeps'
    default) start clean and are not affected."""
    if not interpreting():
        return ""
    from flytune_nb._compat.triton import stdlib_compiled_for_gpu

    if not stdlib_compiled_for_gpu():
        return ""
    return ("Triton was imported before flytune_nb chose its CPU interpreter (there is no GPU here), so Triton's own "
            "functions (tl.sum, tl.max, ...) cannot run interpreted in this process: restart it and import flytune_nb "
            "(or any of its parts) before triton, or set TRITON_INTERPRET=1 before starting Python or Jupyter")


def current_device(index: int = 0) -> DeviceInfo:
    """The device this process tunes on: the GPU at ``index``, the interpreter without one, or the GPU it compiles
    for (enter_compile_mode)."""
    target = _COMPILING_FOR[0]
    if target is not None:
        return target
    return _local_device(index)


@lru_cache(maxsize=None)
def _local_device(index: int) -> DeviceInfo:
    ensure_backend()
    if interpreting():
        return interpreter_device()
    import torch

    props = torch.cuda.get_device_properties(index)
    return from_properties(props, hip=bool(getattr(torch.version, "hip", None)), index=index)
