"""What a worker does, as plain functions of plain (picklable) arguments: the same code runs in-process, in a forked
worker process, in a precompile pool and in a Ray actor. Results are dicts, so they cross any process boundary.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict
from functools import lru_cache

from flytune_nb.core.config import Config
from flytune_nb.measure.trial import Trial

BASELINES = ("torch_eager", "torch_compile")  # what a sweep can time beside the kernel: eager, then compiled


# A sweep's own name for a KernelSpec object given directly to an in-process Sweep (e.g. with an edited heuristic)
# -> that object; set and cleared by Sweep.run. Worker processes never see it: they load kernels by name.
_OVERRIDES: dict = {}


def _spec(kernel: str, paths: tuple):
    """The kernel as its folder is now: the registry re-imports a folder whose source changed (its fingerprint keys
    the module) and otherwise answers from sys.modules (0.17 ms a call), so an edit made in an editor, a git checkout
    or the workbench is what the next trial runs."""
    if kernel in _OVERRIDES:
        return _OVERRIDES[kernel]
    from flytune_nb.core.registry import get_kernel

    return get_kernel(kernel, list(paths))


@lru_cache(maxsize=None)
def _timer(items: tuple):
    from flytune_nb.measure.timer import make_timer
    from flytune_nb.core.device import current_device

    return make_timer(current_device(), **dict(items))


def trial_to_dict(t: Trial) -> dict:
    d = asdict(t)
    d["config"] = t.config.to_dict()
    return d


def trial_from_dict(d: dict) -> Trial:
    return Trial(**{**d, "config": Config.from_dict(d["config"])})


def describe(kernel: str, paths: tuple, shape: dict, dtype: str, timing: str = "events") -> dict:
    """Everything the parent needs to plan a shape without touching the GPU itself: key, device, default, space, and
    whether the kernel's binaries can be hashed here (``binaries``: Triton on a GPU, or a kernel's own
    ``extra["binary"]``)."""
    from flytune_nb.backends.triton import current_target
    from flytune_nb.core.device import current_device
    from flytune_nb.core.key import make_key

    from flytune_nb.measure.memory import ShapeTooLarge, check_fits

    spec, dev = _spec(kernel, paths), current_device()
    shape, dtype = spec.check_shape(shape), spec.check_dtype(dtype)
    try:
        check_fits(spec, shape, dtype, dev)
    except ShapeTooLarge as e:
        return {"too_large": str(e)}
    inputs = spec.make_inputs(shape, dtype, dev)
    spec.check_made_inputs(inputs, dtype)
    key = make_key(spec, shape, dtype, inputs, dev, timing=timing)
    target = current_target()
    return {"key": key.digest, "key_fields": key.to_dict(), "device": asdict(dev),
            "default": spec.default(shape, dtype, dev).to_dict(),
            "named": {label: c.to_dict() for label, c in spec.named(shape, dtype, dev).items()},
            "space": [c.to_dict() for c in dict.fromkeys(spec.configs(shape, dtype, dev))],
            "has_baseline": spec.baseline is not None, "target": target,
            "binaries": callable(spec.extra.get("binary")) or (dev.is_gpu and target is not None)}


def _own_binary(spec, shape: dict, dtype: str, config: Config, dev) -> tuple[bool, str | None]:
    """(whether the kernel hashes its own binaries, the hash): a kernel that is not Triton's, or a test's stand-in,
    can say what a config compiles to with ``extra["binary"](shape, dtype, config, device) -> str | bytes | None``."""
    fn = spec.extra.get("binary")
    if not callable(fn):
        return False, None
    try:
        h = fn(dict(shape), dtype, config, dev)
    except Exception:  # noqa: BLE001 - unknown, so timed: the trial records any real failure
        return True, None
    if isinstance(h, bytes):
        import hashlib

        h = hashlib.sha256(h).hexdigest()[:16]
    return True, (None if h is None else str(h))


def binary(kernel: str, paths: tuple, shape: dict, dtype: str, config: dict, device: dict | None = None,
           target: tuple | None = None) -> str | None:
    """The hash of what ``config`` compiles to and how it launches (flytune_nb.backends.triton.launch_digest), or
    None when it cannot be known: what the timing worker asks before timing a config when no precompile pool
    compiled it. Compiling here fills Triton's caches, so the trial that follows does not compile again."""
    from flytune_nb.backends.triton import binary_hash
    from flytune_nb.core.device import DeviceInfo, current_device

    spec = _spec(kernel, paths)
    dev = DeviceInfo(**device) if device is not None else current_device()
    cfg = Config.from_dict(config)
    own, h = _own_binary(spec, shape, dtype, cfg, dev)
    if own:
        return h
    if not dev.is_gpu or target is None:
        return None
    meta = _meta_inputs(kernel, paths, tuple(sorted(shape.items())), dtype, dev)
    return binary_hash(spec, meta, cfg, tuple(target)) if meta is not None else None


def trial(kernel: str, paths: tuple, shape: dict, dtype: str, config: dict, timer: tuple = ()) -> dict:
    from flytune_nb.core.device import current_device
    from flytune_nb.measure.trial import evaluate

    spec, dev = _spec(kernel, paths), current_device()
    t = evaluate(spec, shape, dtype, Config.from_dict(config), dev, _timer(timer))
    return trial_to_dict(t)


def warm_up(kernel: str, paths: tuple, helpers: bool = False) -> float:
    """Import the kernel (and, with ``helpers``, build Triton's C helpers: compiling.prebuild_c_helpers): what a
    fresh pool process spends its first moments on. Submitted while the sweep plans, so that cost overlaps the
    timing worker's own start. No device context: compiling needs none (see compile_one), and 16 processes creating
    contexts at once held the timing worker's own start back ~4 s on the H200
    (benchmarks/results/NVIDIA_H200/startup_profile.md)."""
    t0 = time.perf_counter()
    _spec(kernel, paths)
    if helpers:
        from flytune_nb.backends.triton import prebuild_c_helpers

        prebuild_c_helpers()
    return time.perf_counter() - t0


@lru_cache(maxsize=8)
def _meta_inputs(kernel: str, paths: tuple, shape_key: tuple, dtype: str, dev) -> dict | None:
    """A shape's inputs on the meta device (shapes and dtypes only, nothing allocated), shared by every config a
    pool process compiles; a few shapes kept, as lanes interleave them. None (remembered): the kernel's make_inputs
    cannot build meta tensors."""
    from flytune_nb.measure.memory import meta_inputs

    return meta_inputs(_spec(kernel, paths), dict(shape_key), dtype, dev)


@lru_cache(maxsize=1)
def _real_inputs(kernel: str, paths: tuple, shape_key: tuple, dtype: str, dev) -> dict:
    """The same on the device, for a kernel that cannot compile on meta inputs: one shape kept (a MoE shape is ~3 GB,
    in each of up to 16 pool processes). Outputs are overwritten by every launch, which compiling does not mind."""
    return _spec(kernel, paths).make_inputs(dict(shape_key), dtype, dev)


_NO_META: set = set()  # (kernel, paths, shape, dtype) whose wrapper cannot compile on meta inputs: not retried


def compile_one(kernel: str, paths: tuple, shape: dict, dtype: str, config: dict, device: dict | None = None,
                target: tuple | None = None, census: bool = False) -> tuple:
    """Precompile through the kernel's own ``run``: generic (no per-kernel hook), and it fills Triton's on-disk cache
    exactly as the timing worker's first launch will look it up (same args, same specialisation). ``device`` (the
    timing worker's DeviceInfo) and ``target`` (its Triton target): given both, a GPU kernel compiles on meta inputs
    without initialising the GPU in this process (flytune_nb.backends.triton); a kernel whose wrapper cannot, or a call
    without them, compiles on real inputs in compile-only mode (launching only what bypasses flytune_nb.kit.launcher).
    Returns (status, seconds, binary hash or None: see ``binary``, census record or None). ``census``: also read the
    compiled kernels' resources (registers, spills, shared memory, occupancy: the record a census process answers,
    flytune_nb.engine.census_worker), so a sweep pruning by census on the GPU it times takes them from the compiles
    it makes anyway instead of compiling the space a second time; only on the meta path (real inputs keep no
    CompiledKernel to read), else None."""
    from flytune_nb._compat.triton import launch_enter_hook, set_launch_enter_hook
    from flytune_nb.backends.triton import compile_on_meta, launch_digest
    from flytune_nb.core.device import DeviceInfo, current_device
    from flytune_nb.kit.launcher import compile_only

    spec = _spec(kernel, paths)
    dev = DeviceInfo(**device) if device is not None else current_device()
    cfg, case = Config.from_dict(config), (kernel, paths, tuple(sorted(shape.items())), dtype)
    t0 = time.perf_counter()
    own, own_hash = _own_binary(spec, shape, dtype, cfg, dev)
    record: list = []
    try:
        if dev.is_gpu and target is not None and case not in _NO_META:
            meta = _meta_inputs(*case, dev)
            if meta is not None and compile_on_meta(spec, meta, cfg, tuple(target), record=record):
                seconds = time.perf_counter() - t0
                return ("ok", seconds, own_hash if own else launch_digest(record),
                        _census_record(record, dev, seconds) if census else None)
            _NO_META.add(case)
        record.clear()
        direct = []  # a launch that bypasses the launcher runs for real and is not recorded: the digest is unknown
        prev = launch_enter_hook()
        set_launch_enter_hook(lambda metadata: direct.append(1))
        try:
            with compile_only(dev.backend, record=record):
                spec.run(_real_inputs(*case, dev), cfg)
        finally:
            set_launch_enter_hook(prev)
        if dev.is_gpu:
            import torch

            torch.cuda.synchronize()
        digest = own_hash if own else (None if direct else launch_digest(record))
        return "ok", time.perf_counter() - t0, digest, None
    except Exception as e:  # noqa: BLE001 - the timing worker records the real failure
        return f"{type(e).__name__}: {e}"[:200], time.perf_counter() - t0, None, None


def _census_record(record: list, dev, compile_s: float) -> dict | None:
    """The census record (census_worker's reply) of the kernels a meta compile launched; None when unknown (no
    launch recorded, or the resources could not be read: the config is then timed, not pruned)."""
    from flytune_nb.backends.triton import binary_digest
    from flytune_nb.backends.triton_resources import kernel_resources

    kernels = [k for k, _, _ in record if k is not None]
    if not kernels:
        return None
    try:
        return {"status": "ok", "error": "", "compile_s": compile_s, "binary": binary_digest(kernels),
                "kernels": [kernel_resources(k, dev) for k in kernels]}
    except Exception:  # noqa: BLE001 - a Triton whose CompiledKernel we cannot read: no census, no pruning
        return None


def baselines(kernel: str, paths: tuple, shape: dict, dtype: str, names: tuple, timer: tuple = ()) -> list[dict]:
    """Time the kernel's torch baseline eagerly and under torch.compile, with the same timer as the trials."""
    from flytune_nb.core.device import current_device

    spec, dev = _spec(kernel, paths), current_device()
    if spec.baseline is None:
        return []
    inputs = spec.make_inputs(shape, dtype, dev)
    snap = spec.snapshot(inputs)
    setup = spec.rep_setup(inputs, snap)
    out = []
    for name in names:
        try:
            fn = spec.baseline
            if name == "torch_compile":
                import torch

                from flytune_nb._compat.torch import dynamo_reset

                dynamo_reset()  # one worker serves every shape of a sweep
                fn = torch.compile(spec.baseline, dynamic=False)
                fn(inputs)  # compile outside the timing
                if setup:
                    setup()
            elif name != "torch_eager":
                raise ValueError(f"unknown baseline {name!r}")
            t = _timer(timer).measure(lambda: fn(inputs), setup)
            out.append({"name": name, "status": "ok", "reason": "", "p20": t.p20, "p50": t.p50, "p80": t.p80})
        except Exception as e:  # noqa: BLE001 - a baseline that cannot run is recorded, not fatal
            out.append({"name": name, "status": "error", "reason": f"{type(e).__name__}: {str(e)[:200]}",
                        "p20": math.inf, "p50": math.inf, "p80": math.inf})
        finally:
            if setup:
                setup()
    return out


HANDLERS = {"describe": describe, "trial": trial, "baselines": baselines, "compile_one": compile_one, "binary": binary}
