"""FlyDSL (AMD's MLIR-based Python kernel DSL, PyPI ``flydsl``) as a flytune backend: the only flytune module that
drives FlyDSL (its private internals sit behind flytune_nb._compat.flydsl).

What a FlyDSL kernel folder gets from here (through flytune_nb.kit.flydsl):

- ``require()``: KernelUnavailable with the install line when flydsl is not installed. It asks importlib, it does not
  import flydsl: ``import flydsl.compiler`` costs ~2 s on the 2-core CPU box (torch first: ~4 s), which
  ``flytune kernels`` must not pay for every FlyDSL kernel it lists.
- ``launch(fn, args, config, **constexprs)``: call a ``@flyc.jit`` launcher with a flytune Config. Its structural
  knobs (BLOCK_THREADS, VEC, ...) are the launcher's ``Constexpr`` parameters; ``waves_per_eu`` is a compile hint,
  applied as FlyDSL's own Autotuner applies it (a compile-hints context around the compile); FlyDSL has no
  ``num_warps`` or ``num_stages``, and a config carrying one is refused. One CompiledFunction per config and
  specialisation, compiled from meta placeholders of the call's tensors: ``flyc.compile`` on live device tensors
  launches once while compiling, which for an in-place kernel is one update too many. Inputs on the meta device
  compile and launch nothing (the precompile pool's way in). An LLVM ``error:`` line while compiling (LLVM
  writes it to file descriptor 2 and FlyDSL still returns a function) or an LDS size over the target's limit is
  that config's compile error.

What the core gets (the protocol of flytune_nb.backends): the toolchain part of the tuning key (FlyDSL's version and
its own compile-cache fingerprint), its cache-invalidating environment, the devices it launches on (AMD GPUs only:
FlyDSL launches through HIP) and that its launches run in worker processes only (without ROCm's
``libamdhip64.so.7`` the first launch aborts the process, SIGABRT, rc 134; a GPU fault does the same).

What a census gets: ``compile_report(spec, shape, dtype, config, arch)`` compiles a config through the kernel's own
``run`` for gfx942 / gfx950 on any machine, nothing launched, and reads each kernel's registers, LDS, scratch and
spills from the compiled object's metadata; ``census_record`` turns a report into a census process's record. A CPU
machine needs only an LLVM linker (``linker_root``; ``use_linker`` points ROCM_PATH at one where none is found).
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from flytune_nb._compat import flydsl as compat
from flytune_nb._compat.stdlib import environ_bytes
from flytune_nb.core.config import Config, ConfigError
from flytune_nb.core.environ import environ
from flytune_nb.errors import KernelUnavailable, RunError, UsageError, compile_error_line

# -- the backend protocol (flytune_nb.backends) ----------------------------------------------------------------------
LABEL = "FlyDSL"
DEVICE_BACKENDS = ("hip",)
DEVICE_NAMES = ("AMD GPUs (ROCm)",)
ELSEWHERE = ("Here its configs can still be compiled for gfx942 / gfx950 and their registers and LDS read: "
             "flytune_nb.backends.flydsl.compile_report (docs/flydsl.md).")
ISOLATED = True  # a launch that faults (or finds no HIP runtime) aborts its process: trials run in workers only
CONFIG_DIR_PREFIX = "flydsl_"
REQUIREMENT = "needs flydsl: pip install 'flytune_nb[flydsl]'"

# Variables that pick the compile target besides FlyDSL's own list: ARCH is the target the ROCm backend compiles for,
# FLYDSL_GPU_ARCH (or HSA_OVERRIDE_GFX_VERSION) what get_rocm_arch() answers, which kernels, the autotune key and
# the offline-config identity read. Set both to compile for another GPU.
TARGET_ENV = ("ARCH", "FLYDSL_GPU_ARCH", "HSA_OVERRIDE_GFX_VERSION")
# LDS one workgroup may use (LLVM's per-arch limit: "local memory (N) exceeds limit (65536)").
LDS_LIMIT = {"gfx942": 64 * 1024, "gfx950": 160 * 1024}
ARCHS = tuple(LDS_LIMIT)
LLD_MIN = 22  # ld.lld 14 fails on gfx942 code objects: "unknown abi version"


def available() -> bool:
    return importlib.util.find_spec("flydsl") is not None


def require() -> None:
    """What a FlyDSL kernel folder's ``__init__`` calls first."""
    if not available():
        raise KernelUnavailable(REQUIREMENT)


def version() -> str:
    return compat.installed_version() or "0"


def toolchain() -> dict[str, str]:
    """The tuning key's toolchain part for a FlyDSL kernel: flytune_nb, FlyDSL (version and compiler fingerprint),
    torch and the HIP it was built for. Triton is no part of it."""
    import torch

    from flytune_nb import __version__

    return {"flytune_nb": __version__, "flydsl": version(), "flydsl_compiler": compat.compiler_key(),
            "torch": torch.__version__, "hip": str(getattr(torch.version, "hip", None) or "")}


def codegen_env() -> dict[str, str]:
    names = compat.cache_invalidating_env() + TARGET_ENV
    return dict(sorted((k, os.environ[k]) for k in dict.fromkeys(names) if k in os.environ))


def config_dir_name(toolchain: dict) -> str:
    """``flydsl_0_5_0``: the version folder of a FlyDSL kernel's exported files, as ``triton_3_6_0`` is Triton's."""
    core = re.match(r"^(\d+(?:\.\d+)*)", str(toolchain.get("flydsl", "0")))
    return CONFIG_DIR_PREFIX + (core.group(1) if core else "0").replace(".", "_")


def running_config_dir_name() -> str:
    return config_dir_name({"flydsl": version()})


# -- launching ---------------------------------------------------------------------------------------------------------
class FlyDSLCompileError(RunError):
    """A config that does not compile (FlyDSL raised, LLVM printed an error, the LDS exceeds the target)."""

    trial_status = "compile_error"  # what a trial records it as (flytune_nb.measure.trial.classify)


@dataclass(frozen=True)
class _Entry:
    compiled: object  # flydsl's CompiledFunction
    tail: tuple  # the values of every parameter after the launch's leading args, in order (stream: a slot)
    stream_at: int  # index of the stream parameter in tail; -1 when the launcher declares none


_COMPILED: dict[tuple, _Entry] = {}
_COLLECT: list = []  # compile_report's collectors: each a list of (entry, stderr text, seconds)
_ENV_KEYS = tuple(k.encode() for k in compat.KNOWN_ENV + TARGET_ENV)


def launch(fn, args: tuple, config: Config, **constexprs) -> None:
    """``fn(*args, **constexprs, **config's knobs)`` through a CompiledFunction kept per config and specialisation.

    ``fn``: a ``@flyc.jit`` launcher; ``args``: its leading parameters, positionally (tensors, runtime ints);
    ``constexprs``: later parameters by name (the shape's N, a dtype tag, eps). Every other parameter comes from
    ``config`` (its knobs by name) or its default; a ``fx.Stream`` parameter gets torch's current stream."""
    key = (fn, config, tuple(sorted(constexprs.items())), _specialisation(args), _env_signature())
    entry = None if _COLLECT else _COMPILED.get(key)
    if entry is None:
        entry = _compile(fn, args, config, constexprs)
        if not _COLLECT:  # a compile report's functions never serve a launch
            _COMPILED[key] = entry
    if any(getattr(a, "is_meta", False) for a in args):
        return None  # shapes and dtypes only: compiled, nothing to launch
    if entry.stream_at < 0 or not any(getattr(a, "is_cuda", False) for a in args):
        entry.compiled(*args, *entry.tail)  # no stream parameter, or no GPU tensor: FlyDSL's default queue
    else:
        import torch

        tail = list(entry.tail)
        tail[entry.stream_at] = torch.cuda.current_stream()  # the timer's events (and a graph capture) are on it
        entry.compiled(*args, *tail)
    return None


def clear() -> None:
    """Forget the compiled functions of this process (FlyDSL's own disk cache stays)."""
    _COMPILED.clear()


def _specialisation(args: tuple) -> tuple:
    """What FlyDSL compiles a launcher's arguments into: per tensor its dtype, rank and which dimension has unit
    stride (layout-dynamic tensors keep every shape and every other stride a runtime value, so one compile serves
    every M and every row pitch); for anything else its type (its value is a runtime argument)."""
    out = []
    for a in args:
        stride = getattr(a, "stride", None)
        if callable(stride):
            s = stride()
            out.append((a.dtype, len(s), s.index(1) if 1 in s else -1))
        else:
            out.append(type(a))
    return tuple(out)


def _env_signature() -> tuple:
    data = environ_bytes()
    if data is not None:
        return tuple(map(data.get, _ENV_KEYS))
    return tuple(os.environ.get(k.decode()) for k in _ENV_KEYS)


def _compile(fn, args: tuple, config: Config, constexprs: dict) -> _Entry:
    import torch

    import flydsl.compiler as flyc

    for option in ("num_warps", "num_stages", "num_ctas", "maxnreg", "matrix_instr_nonkdim", "kpack"):
        if getattr(config, option) is not None:
            raise ConfigError(f"{option} is not a FlyDSL option (FlyDSL kernels take their knobs as Constexpr "
                              f"parameters and waves_per_eu as a compile hint); got {config}")
    name = getattr(getattr(fn, "func", fn), "__name__", "launcher")
    params = list(compat.jit_signature(fn).parameters.values())
    if len(args) > len(params):
        raise ConfigError(f"{name} takes {len(params)} parameters, {len(args)} given positionally")
    given = {**constexprs, **config.kwargs}
    later = params[len(args):]
    unknown = sorted(set(given) - {p.name for p in later})
    if unknown:
        raise ConfigError(f"{name} has no parameter {unknown[0]!r} after its {len(args)} leading ones "
                          f"(config {config}, constants {sorted(constexprs)})")
    tail, stream_at = [], -1
    for p in later:
        if p.name in given:
            value = given[p.name]
        elif compat.is_stream(p.annotation):
            value = p.default if p.default is not p.empty else None
            stream_at = len(tail)
        elif p.default is not p.empty:
            value = p.default
        else:
            raise ConfigError(f"{name}: parameter {p.name!r} gets no value (not among the leading args, the "
                              f"constants or config {config})")
        if p.annotation is not p.empty and compat.is_constexpr(p.annotation):
            try:
                compat.check_annotation(p.annotation, value)
            except (TypeError, ValueError) as e:
                raise ConfigError(f"{name}: {p.name}={value!r}: {e}") from None
        tail.append(value)
    placeholders = tuple(torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device="meta")
                         if isinstance(a, torch.Tensor) else a for a in args)
    hints = {"waves_per_eu": config.waves_per_eu} if config.waves_per_eu else {}
    if _COLLECT:
        compat.forget_compiled(fn)  # a report compiles for real (see compile_report)
    t0 = time.perf_counter()
    with capture_fd2() as err:
        try:
            with compat.compile_hints(hints):
                compiled = flyc.compile(fn, *placeholders, *tail)
        except ConfigError:
            raise
        except Exception as e:  # noqa: BLE001 - FlyDSL's compile errors (DSLCompileError, trace-time errors)
            line = compile_error_line(e)
            raise FlyDSLCompileError(f"{name} {config}: {line}{linker_hint(line)}") from e
    seconds = time.perf_counter() - t0
    entry = _Entry(compiled, tuple(tail), stream_at)
    if _COLLECT:  # a compile report reads what happened, and nothing is refused
        _COLLECT[-1].append((entry, err["text"], seconds))
        return entry
    if err["text"]:
        sys.stderr.write(err["text"])  # LLVM's warnings stay visible where they would have gone
    errors = llvm_errors(err["text"])
    if errors:
        raise FlyDSLCompileError(f"{name} {config}: LLVM: {errors[0]}")
    for r in resources(compiled):
        limit = LDS_LIMIT.get(r.arch)
        if limit is not None and r.lds > limit:
            raise FlyDSLCompileError(f"{name} {config}: {r.lds} bytes of LDS exceed {r.arch}'s {limit}")
    return entry


@contextlib.contextmanager
def capture_fd2():
    """File descriptor 2 (not only sys.stderr) into a temporary file for the block; yields a dict whose "text" is
    filled in on exit. LLVM prints its diagnostics straight to fd 2."""
    box = {"text": ""}
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield box
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            box["text"] = tmp.read().decode("utf-8", "replace")


def llvm_errors(text: str) -> list[str]:
    """The error lines of LLVM's diagnostics (``error: <unknown>:0:0: local memory (200000) exceeds limit ...``)."""
    return [line.strip() for line in text.splitlines() if re.match(r"^\s*(error|LLVM ERROR)\b:?", line)]


# -- resources, from the compiled object's metadata --------------------------------------------------------------------
@dataclass(frozen=True)
class Resources:
    """One kernel of a compiled module: what the code object's metadata says it uses."""

    kernel: str  # symbol name
    arch: str  # the target it was compiled for (gfx942)
    vgpr: int
    agpr: int
    sgpr: int
    lds: int  # bytes of LDS per workgroup (group_segment_fixed_size)
    scratch: int  # bytes of private memory per lane (private_segment_fixed_size): spilled registers land here
    vgpr_spill: int
    sgpr_spill: int
    max_workgroup: int  # max_flat_workgroup_size
    code_object: str  # sha256 of the code object's text (configs differing only in a hint often share one)
    # static instruction counts of its body (triton_resources.amd_instruction_counts), from the assembly FlyDSL
    # writes beside the object; None where none was written
    insn: dict | None = None


_META = re.compile(r'#gpu\.kernel_metadata<"([^"]+)".*?metadata = \{([^}]*)\}', re.S)
_CHIP = re.compile(r'#rocdl\.target<[^>]*chip = "([^"]+)"')
_BIN = re.compile(r'bin = "((?:[^"\\]|\\.)*)"', re.S)


def resources(compiled) -> list[Resources]:
    """Resources of every kernel in a CompiledFunction (from its module's ``gpu.binary`` metadata)."""
    import hashlib

    text = compat.compiled_ir(compiled)
    chips = _CHIP.findall(text)
    bins = _BIN.findall(text)
    digest = hashlib.sha256("".join(bins).encode()).hexdigest()[:16] if bins else ""
    out = []
    for name, body in _META.findall(text):
        m = {k: int(v) for k, v in re.findall(r"(\w+) = (-?\d+) : i\d+", body)}
        out.append(Resources(name, chips[0] if chips else "", m.get("vgpr_count", 0), m.get("agpr_count", 0),
                             m.get("sgpr_count", 0), m.get("group_segment_fixed_size", 0),
                             m.get("private_segment_fixed_size", 0), m.get("vgpr_spill_count", 0),
                             m.get("sgpr_spill_count", 0), m.get("max_flat_workgroup_size", 0), digest))
    return out


# -- compiling without a GPU -------------------------------------------------------------------------------------------
@contextlib.contextmanager
def target(arch: str):
    """Compile for ``arch`` in this block (both variables FlyDSL reads, see TARGET_ENV); the previous values after."""
    with environ({"ARCH": arch, "FLYDSL_GPU_ARCH": arch}):
        yield


def find_lld() -> str | None:
    """An ``ld.lld`` of LLVM >= 22 on this machine (FlyDSL's ROCm backend links code objects with it), or None."""
    candidates = [shutil.which(f"ld.lld-{v}") for v in range(30, LLD_MIN - 1, -1)]
    candidates += [f"/usr/lib/llvm-{v}/bin/ld.lld" for v in range(30, LLD_MIN - 1, -1)] + [shutil.which("ld.lld")]
    for c in candidates:
        if c and os.path.exists(c) and _lld_major(c) >= LLD_MIN:
            return c
    return None


def _lld_major(path: str) -> int:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    m = re.search(r"LLD (\d+)", out)
    return int(m.group(1)) if m else 0


def linker_hint(error: str) -> str:
    """What to do, for a compile error that is FlyDSL's ``lld invocation failed`` while the linker it runs is missing
    (that message names neither the linker nor the variable); "" for any other error."""
    lld = Path(os.environ.get("ROCM_PATH") or "/opt/rocm") / "llvm" / "bin" / "ld.lld"  # ROCDL's own lookup
    if "lld invocation failed" not in error or lld.exists():
        return ""
    return (f" (there is no {lld}: point ROCM_PATH at a ROCm installation, or at "
            f"flytune_nb.backends.flydsl.linker_root(folder), which needs ld.lld >= {LLD_MIN}: "
            f"apt-get install lld-{LLD_MIN})")


def linker_root(folder: str | os.PathLike) -> Path:
    """A ROCm-layout folder FlyDSL can compile with on a machine without ROCm: ``<folder>/llvm/bin/ld.lld``, a link
    to this machine's ld.lld >= 22 (Debian: ``apt-get install lld-22``). Point ROCM_PATH at it. RunError when
    there is no such linker. (A kernel that calls ROCm's device libraries would also need their bitcode; these
    do not.)"""
    root = Path(folder)
    link = root / "llvm" / "bin" / "ld.lld"
    if link.exists() and _lld_major(str(link)) >= LLD_MIN:
        return root
    lld = find_lld()
    if lld is None:
        raise RunError(f"FlyDSL links AMD code objects with ld.lld >= {LLD_MIN}, and this machine has none "
                       f"(Debian/Ubuntu: apt-get install lld-{LLD_MIN}; or set ROCM_PATH to a ROCm installation)")
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(lld)
    return root


def check_target(spec, device) -> None:
    """UsageError unless FlyDSL compiles ``spec`` for ``device`` (gfx942 / gfx950): said by a census before it
    starts and by its processes."""
    if device.arch not in ARCHS:
        raise UsageError(f"{spec.name} is a FlyDSL kernel: it compiles for {', '.join(ARCHS)} only, not for "
                         f"{device.name} ({device.arch})")


def use_linker(folder: str | os.PathLike) -> None:
    """Point ROCM_PATH at ``linker_root(folder)`` unless FlyDSL finds an ld.lld already (ROCM_PATH's, else
    /opt/rocm's), so this process compiles with no ROCM_PATH set: a census process. RunError (what to install or
    set) when this machine has no such linker. The tuning key does not move: FlyDSL's fingerprint hashes the root's
    device bitcode, which neither a missing /opt/rocm nor a linker folder has."""
    if not (Path(os.environ.get("ROCM_PATH") or "/opt/rocm") / "llvm" / "bin" / "ld.lld").exists():
        os.environ["ROCM_PATH"] = str(linker_root(folder))


@dataclass(frozen=True)
class CompileReport:
    """One config compiled for one target: each kernel's resources, what LLVM printed, and what is wrong with it."""

    arch: str
    config: Config
    seconds: float
    kernels: tuple  # Resources per kernel the run compiled
    stderr: str
    errors: tuple  # LLVM error lines
    problems: tuple  # errors, spills, LDS over the target's limit, a kernel built for another target
    # those problems that leave nothing to launch: what the run raised, LLVM's errors, a kernel built for another
    # target, no kernel at all (a spill or an LDS figure is about an object that compiled)
    failed: tuple = ()

    @property
    def ok(self) -> bool:
        return not self.problems


def compile_report(spec, shape: dict, dtype: str, config: Config, arch: str) -> CompileReport:
    """Compile ``config`` for ``arch`` through the kernel's own ``run`` on meta inputs (nothing launches, no GPU
    needed) and read what it compiled to. A config whose run raises while compiling reports that as its problem."""
    from flytune_nb.core.device import interpreter_device
    from flytune_nb.measure.memory import meta_inputs

    if arch not in LDS_LIMIT:
        raise UsageError(f"arch must be one of {', '.join(ARCHS)}, got {arch!r}")
    # A wrapper reads its knobs itself (config["VEC"]) before anything compiles: without this, a KeyError: 'VEC'.
    knobs = dict(spec.default(shape, dtype, interpreter_device()).params)
    missing, _ = spec.knob_mismatch(dict(config.params), knobs)
    if missing:
        raise ConfigError(f"{spec.name} config {config} lacks {', '.join(sorted(missing))} (its knobs: "
                          f"{', '.join(sorted(set(knobs) | set(spec.optional_knobs)))})")
    memo = (spec.name, spec.fingerprint, tuple(sorted(shape.items())), dtype, config, arch, _env_signature(),
            os.environ.get("ROCM_PATH"))  # it picks the linker: a report that failed without one is no answer after
    if memo in _REPORTS:  # compiled again, FlyDSL would answer from its memory cache, without LLVM's diagnostics
        return _REPORTS[memo]
    inputs = meta_inputs(spec, shape, dtype, interpreter_device())
    if inputs is None:
        raise RunError(f"{spec.name}: make_inputs cannot build meta tensors, so nothing can compile without a GPU")
    collected: list = []
    failed, t0 = [], time.perf_counter()
    isa_dir = tempfile.mkdtemp(prefix="flytune-isa-")
    try:
        with target(arch), _without_disk_cache(), compat.final_isa(isa_dir):
            _COLLECT.append(collected)
            try:
                spec.run(inputs, config)
            except Exception as e:  # noqa: BLE001 - the config's failure is the report
                failed.append(compile_error_line(e))
            finally:
                _COLLECT.pop()
        isa = "".join(p.read_text(errors="replace") for p in sorted(Path(isa_dir).rglob("*.s")))
    finally:
        shutil.rmtree(isa_dir, ignore_errors=True)
    stderr = "".join(text for _, text, _ in collected)
    errors = tuple(llvm_errors(stderr))
    kernels = tuple(dataclasses.replace(r, insn=kernel_instructions(isa, r.kernel))
                    for entry, _, _ in collected for r in resources(entry.compiled))
    failed += list(errors)
    failed += [f"{r.kernel} was compiled for {r.arch or 'an unknown target'}, not {arch}" for r in kernels
               if r.arch != arch]
    if not kernels and not failed:
        failed.append("the run compiled no FlyDSL kernel")
    problems = list(failed)
    for r in kernels:
        if r.vgpr_spill or r.sgpr_spill:
            problems.append(f"{r.kernel} spills {r.vgpr_spill} VGPRs and {r.sgpr_spill} SGPRs")
        if r.lds > LDS_LIMIT[arch]:
            problems.append(f"{r.kernel} uses {r.lds} bytes of LDS, over {arch}'s {LDS_LIMIT[arch]}")
    seconds = sum(s for _, _, s in collected) or time.perf_counter() - t0
    report = _REPORTS[memo] = CompileReport(arch, config, seconds, kernels, stderr, errors, tuple(problems),
                                            tuple(failed))
    return report


_REPORTS: dict[tuple, CompileReport] = {}


def kernel_instructions(isa: str, kernel: str) -> dict | None:
    """Instruction counts of ``kernel``'s body in the assembly of the module(s) compiled (from its label to its
    kernel descriptor; a module may hold several kernels), or None where it is not there."""
    from flytune_nb.backends.triton_resources import amd_instruction_counts

    start = re.search(rf"^{re.escape(kernel)}:", isa, re.M)
    end = isa.find(f".amdhsa_kernel {kernel}\n", start.end()) if start else -1
    return amd_instruction_counts(isa[start.start():end]) if end > 0 else None


def census_record(report: CompileReport, device) -> dict:
    """A census process's record (flytune_nb.engine.census_worker) of one report, for ``device`` (the target's
    DeviceInfo): per kernel the figures a Triton AMD kernel's row has (flytune_nb.backends.triton_resources),
    read from the code object's metadata, its instruction counts from the assembly FlyDSL wrote of it, and a digest
    of the code objects, so configs that build the same object count once (it holds the workgroup size:
    reqd_workgroup_size). A spill or an LDS figure over the target's is a row that compiled, as for Triton."""
    import hashlib

    from flytune_nb.backends.triton_resources import amd_occupancy
    from flytune_nb.core.targets import arch_rules

    if report.failed:
        return {"status": "error", "error": report.failed[0][:300], "compile_s": report.seconds, "binary": None,
                "kernels": []}
    rules = arch_rules(device)
    kernels = []
    for r in report.kernels:
        # The metadata's vgpr_count is already VGPRs + AGPRs (LLVM's total). It is also what a wave allocates: the
        # descriptor pads beyond it only for a waves_per_eu maximum, and a Config's hint is a minimum (FlyDSL's
        # "2"): 35 VGPRs -> 40 allocated (its 8-register granule) with no hint and with 1, 2 and 4.
        # waves a workgroup: FlyDSL's launch fixes max_flat_workgroup_size at the block (256 for BLOCK_THREADS=256)
        k = {"name": r.kernel, "num_warps": -(-r.max_workgroup // rules.warp_size), "shared": r.lds,
             "vgprs": r.vgpr, "agprs": r.agpr, "sgprs": r.sgpr, "vgpr_spills": r.vgpr_spill,
             "sgpr_spills": r.sgpr_spill, "scratch_bytes": r.scratch, "vgpr_alloc": r.vgpr,
             "waves_per_eu": report.config.waves_per_eu, "code_object": r.code_object}
        k.update(amd_occupancy(k, rules))
        if r.insn is not None:
            k["insn"] = r.insn
        k["smem_over_limit"] = bool(device.smem_bytes) and r.lds > device.smem_bytes
        kernels.append(k)
    objects = "".join(dict.fromkeys(k["code_object"] for k in kernels))  # one module's kernels share one object
    return {"status": "ok", "error": "", "compile_s": report.seconds,
            "binary": hashlib.sha256(objects.encode()).hexdigest()[:16], "kernels": kernels}


@contextlib.contextmanager
def _without_disk_cache():
    """A report compiles for real: a hit in FlyDSL's disk cache (~/.flydsl/cache) would bring back the object
    without LLVM's diagnostics (and FlyDSL caches a module LLVM complained about like any other)."""
    with environ({"FLYDSL_RUNTIME_ENABLE_CACHE": "0"}):
        yield


# -- FlyDSL's own autotuner over a flytune FlyDSL kernel ---------------------------------------------------------------
def autotuner(spec, *, device=None, warmup: int = 5, rep: int = 25):
    """``flydsl.autotune(...)`` over a FlyDSL kernel folder's launcher, as a serving process uses it: the spec's
    space and heuristic as FlyDSL Configs, its FlyDSLArtifact's name and key, so that with tuning off and
    ``FLYDSL_AUTOTUNE_CONFIG_DIR`` pointing at an export's ``flydsl_autotune/`` a call is served the exported config
    with no search (a key with no file: the heuristic default; ``FLYDSL_AUTOTUNE=1``: FlyDSL's own search).
    Call it like the launcher, without the knobs: ``op(x, w, out, M, N, "bf16")``. ``device``: the DeviceInfo the
    space and heuristic are asked about (default: this machine's)."""
    import flydsl

    from flytune_nb.artifacts.flydsl import FlyDSLArtifact

    art = spec.extra.get("flydsl")
    if not isinstance(art, FlyDSLArtifact) or art.launcher is None:
        raise ConfigError(f"{spec.name} declares no FlyDSL artifact with a launcher (extra={{'flydsl': "
                          f"FlyDSLArtifact(name, key, launcher=...)}})")
    missing = [a for a in spec.axes if a not in art.key.values()] + (["dtype"] if "dtype" not in art.key.values()
                                                                     else [])
    if missing:
        raise ConfigError(f"{spec.name}: its FlyDSL key {dict(art.key)} must name every axis and the dtype to pick "
                          f"a config per call; it lacks {missing}")
    fn = art.launcher()
    sig = compat.jit_signature(fn)
    if device is None:
        from flytune_nb.core.device import current_device

        device = current_device()

    def shape_of(args, kwargs):
        values = sig.bind_partial(*args, **kwargs).arguments
        shape = {axis: int(values[arg]) for arg, axis in art.key.items() if axis != "dtype"}
        dtype = next(values[arg] for arg, axis in art.key.items() if axis == "dtype")
        return shape, dtype

    def as_flydsl(c: Config):
        return flydsl.Config(waves_per_eu=c.waves_per_eu, **c.kwargs)

    def configs(*args, **kwargs):
        shape, dtype = shape_of(args, kwargs)
        return [as_flydsl(c) for c in spec.configs(shape, dtype, device)]

    def default(*args, **kwargs):
        shape, dtype = shape_of(args, kwargs)
        return as_flydsl(spec.default(shape, dtype, device))

    return flydsl.autotune(configs=configs, key=list(art.key), default=default, artifact_name=art.name,
                           restore_value=list(art.restore_value) or None, warmup=warmup, rep=rep)(fn)
