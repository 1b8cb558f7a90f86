"""The run path: in-memory cache -> disk cache -> offline artifact -> heuristic default -> search.

Normal calls never search. Search runs only when asked: ``FLYTUNE_AUTOTUNE=1``, ``tuned(k, autotune=True)`` or an
explicit ``.tune(...)``. Its winner is chosen as a sweep's is (strategies/selection.py): the search's fastest few and
the heuristic default re-timed in interleaved rounds, the default kept unless beaten beyond the tie band; the fastest
of one noisy pass, which ``triton.autotune`` keeps, is often only the luckiest timing. After a search on the caller's
own tensors, every in-place input is restored, and ``zeroes`` are reset before every real call too (Triton's autotuner
applies reset_to_zero only while it benchmarks, so an accumulating output keeps a stale value on its real launch after
tuning).
"""
from __future__ import annotations

import math
import os
import warnings
from typing import Any, Callable

import torch

from flytune_nb.errors import UsageError
from flytune_nb._compat.stdlib import environ_bytes
from flytune_nb.measure.timer import make_timer
from flytune_nb.serve.disk_cache import DiskCache
from flytune_nb.core.config import Config
from flytune_nb.core.device import DeviceInfo, current_device, interpreter_unusable
from flytune_nb.core.input_names import check_call
from flytune_nb.core.key import CODEGEN_ENV, make_key
from flytune_nb.measure.trial import evaluate
from flytune_nb.strategies.loop import SearchResult, search
from flytune_nb.strategies.selection import as_rule, for_device, select, shortlist

# FLYTUNE_AUTOTUNE's values. A serving process turns search off with whichever word it uses for off: read as on,
# every new shape would start a search of the kernel's whole space on the serving path.
AUTOTUNE_ON = ("1", "true", "yes", "on")
AUTOTUNE_OFF = ("0", "false", "no", "off", "")


def autotune_requested() -> bool:
    value = os.environ.get("FLYTUNE_AUTOTUNE", "0")
    word = value.strip().lower()
    if word in AUTOTUNE_ON:
        return True
    if word not in AUTOTUNE_OFF:  # read on a miss only (once per shape): a warning, not an error on the serving path
        warnings.warn(f"FLYTUNE_AUTOTUNE={value!r} is neither on ({', '.join(AUTOTUNE_ON)}) nor off "
                      f"({', '.join(AUTOTUNE_OFF[:-1])}); not searching", RuntimeWarning, stacklevel=4)
    return False


class TunedKernel:
    """``op = tuned("rmsnorm"); y = op(x=x, weight=w)`` — resolves a config per shape, then launches.

    ``last_source`` says where the last call's config came from: memory | disk | artifact | default | search.
    """

    def __init__(self, spec, *, device: DeviceInfo | None = None, cache_dir=None, autotune: bool | None = None,
                 restore: bool = True, timer=None, listener: Callable | None = None,
                 artifact_lookup: Callable | None = None, selection="auto") -> None:
        self.spec = spec
        self.rule = as_rule(selection)  # as Sweep's: "auto" is Rule() on a GPU, a short stage on the interpreter
        self.device = device or current_device()
        self.disk = DiskCache(cache_dir)
        self.autotune = autotune
        self.restore = restore
        self.timer = timer
        self.listener = listener
        self.artifact_lookup = artifact_lookup
        self._memory: dict[tuple, tuple[Config, str]] = {}
        from flytune_nb import backends

        # Why this kernel cannot launch on this device (FlyDSL off an AMD GPU: its launch would abort this process),
        # or None. Resolving a config (config_for) works anywhere.
        self._cannot_launch = backends.cannot_launch(spec, self.device)
        self.last_source: str | None = None
        self.last_result: SearchResult | None = None

    # -- the hot path --------------------------------------------------------------------------------------------
    def __call__(self, **inputs: Any) -> Any:
        # The memory hit inlined (config_for is the same test): this is the serving path, where the whole call may
        # cost at most 5% over a raw Triton launch, and every Python frame counts on a slow host.
        fast = _fast_key(inputs)
        hit = self._memory.get(fast)
        if hit is not None and not (self.autotune and hit[1] in ("default", "artifact")):
            self.last_source = "memory"
            config = hit[0]
        else:
            config = self._miss(inputs, fast)
        if self._cannot_launch:
            raise UsageError(self._cannot_launch)
        try:
            if self.spec.zeroes:
                self.spec.reset(inputs, None)  # zero the accumulators on the real call, not only while benchmarking
            return self.spec.run(inputs, config)
        except KeyError as e:
            raise UsageError(f"{self.spec.name}: missing input {e} (got {', '.join(inputs)})") from None
        except ValueError as e:  # a kernel wrapper's own argument check (a wrong weight shape, a strided out)
            raise UsageError(f"{self.spec.name}: {e}") from e
        except torch.OutOfMemoryError:
            raise
        except Exception as e:
            # eps=None or eps="1e-5" reaches Triton unchecked and fails there as "'NoneType' object has no attribute
            # 'type'", naming nothing of the call. Checked here, once the launch has failed, and not before it: a
            # check on every call would cost the serving path, and some kernels take None (SGLang's optional scales)
            odd = [f"{k}={v!r}" for k, v in inputs.items() if not isinstance(v, (torch.Tensor, bool, int, float))]
            if not odd:
                raise
            raise UsageError(f"{self.spec.name}: the launch failed ({type(e).__name__}: {e}) with inputs that are "
                             f"neither tensors nor numbers: {', '.join(odd)[:200]}; a scalar input takes a number, "
                             f"or leave it out for the kernel's own default") from e

    def config_for(self, inputs: dict) -> Config:
        fast = _fast_key(inputs)
        hit = self._memory.get(fast)
        # FLYTUNE_AUTOTUNE is part of the fast key, so a search asked for later in the session (%env
        # FLYTUNE_AUTOTUNE=1 in a notebook) misses a remembered default/artifact without a check on every hit.
        if hit is not None and not (self.autotune and hit[1] in ("default", "artifact")):
            self.last_source = "memory"
            return hit[0]
        return self._miss(inputs, fast)

    def _miss(self, inputs: dict, fast: tuple) -> Config:
        spec = self.spec
        unusable = interpreter_unusable()
        if unusable:  # the launch would fail inside Triton with a message that does not say why
            raise UsageError(f"{spec.name}: {unusable}")
        # Once per memory key (the input names are in it), before anything launches: fused_add_rmsnorm's residual is
        # written in place, so a refusal after the launch would leave the caller's tensors changed for the retry.
        check_names(spec, inputs)
        shape = _shape_of(spec, inputs)
        dtype = spec.check_dtype(spec.dtype_of(inputs))
        _check_outputs(spec, inputs)  # once per memory key: the outputs' shapes are in it
        config, source = self._resolve(shape, dtype, inputs)
        # A default is remembered too, so the next call with this shape is a dict lookup; a later explicit tune
        # overwrites it.
        self._memory[fast] = (config, source)
        self.last_source = source
        return config

    def _resolve(self, shape: dict, dtype: str, inputs: dict) -> tuple[Config, str]:
        key = make_key(self.spec, shape, dtype, inputs, self.device)
        cached = self.disk.get(self.spec.name, key.digest)
        if cached is not None:
            return cached, "disk"
        if self._want_search():
            result = self._search(shape, dtype, inputs, key)
            return result.pick.config, "search"
        lookup = self.artifact_lookup  # step 3, the offline artifact: None means the exported files
        if lookup is None:
            from flytune_nb.serve.lookup import artifact_hook as lookup
        found = lookup(self.spec, shape, dtype, self.device)
        if found is not None:
            return found, "artifact"
        return self.spec.default(shape, dtype, self.device), "default"

    def _want_search(self) -> bool:
        return self.autotune if self.autotune is not None else autotune_requested()

    # -- explicit tuning -----------------------------------------------------------------------------------------
    def tune(self, **inputs: Any) -> SearchResult:
        """Search now on these inputs (restored afterwards), store the winner in memory and on disk."""
        spec = self.spec
        check_names(spec, inputs)
        shape = _shape_of(spec, inputs)
        dtype = spec.check_dtype(spec.dtype_of(inputs))
        key = make_key(spec, shape, dtype, inputs, self.device)
        result = self._search(shape, dtype, inputs, key)
        self._memory[_fast_key(inputs)] = (result.pick.config, "search")
        return result

    def _search(self, shape: dict, dtype: str, inputs: dict, key) -> SearchResult:
        if self._cannot_launch:
            raise UsageError(self._cannot_launch)
        timer = self.timer or make_timer(self.device)
        result = search(self.spec, shape, dtype, self.device, timer, inputs=inputs, restore=self.restore,
                        listener=self.listener)
        self.last_result = result
        result.require_best()  # every config failed: one message naming why, before any re-timing
        rule = for_device(self.rule, self.device.is_gpu)
        if rule.on:
            def retime(config: Config, _round: int):
                return evaluate(self.spec, shape, dtype, config, self.device, timer, inputs=inputs,
                                restore=self.restore)

            result.selection = select(result.default, shortlist(result.trials, result.default, rule), retime, rule)
        best = result.pick
        meta = {"key": key.to_dict(), "p50_ms": best.p50, "default": result.default.to_dict(),
                "default_p50_ms": getattr(result.default_trial, "p50", None)}
        if result.selection is not None:
            meta["selection"] = result.selection.summary()
            for name, config in (("p50_ms", best.config), ("default_p50_ms", result.default)):
                retimed = result.selection.p50(config)  # unbiased, where re-timed: the search's minimum is not
                if math.isfinite(retimed):
                    meta[name] = retimed
        try:
            self.disk.put(self.spec.name, key.digest, best.config, meta)
        except OSError as e:
            # The search is done and its winner is served from memory: a cache folder this user cannot write (a
            # service account whose home does not exist, a read-only home) must not throw the search away
            warnings.warn(f"{self.spec.name}: could not cache the tuned winner in {self.disk.root}: "
                          f"{e.strerror or e}; it is kept for this process only (set FLYTUNE_CACHE_DIR to a "
                          f"writable folder to keep it)", RuntimeWarning, stacklevel=3)
        return result

    def clear(self) -> None:
        """Forget in-memory decisions (e.g. after editing the heuristic in a notebook)."""
        self._memory.clear()


def _fast_key(inputs: dict) -> tuple:
    """The memory cache's key, built for a ~2 us hit on the serving path: exact dtype, shape and strides of every
    tensor (finer than the tuning key, so a miss only costs one slow resolution that stores under this key too) and
    the codegen variables we list. Triton's own cache-invalidating-env query costs 4 us and is left to the slow path
    (TuningKey); computing the full key here measured 17 us per call on our CPU. Scalar inputs are in too: a
    plugin's shape_of may read one (e.g. a top-k passed as an int). Any other input is in by its name alone: the
    names decide whether check_names refuses a call, which a hit under another call's key would skip."""
    parts = []  # a loop, not a generator: 0.8 us against 1.3 us for three tensors on our CPU
    for k, v in inputs.items():
        if type(v) is _Tensor or isinstance(v, _Tensor):  # the first test is the cheap one; Parameters pass the second
            parts.append((k, v.dtype, v.shape, v.stride()))
        elif isinstance(v, (int, float)):
            parts.append((k, v))
        else:  # None, a string: its name alone
            parts.append(k)
    return tuple(parts), _env_signature()


_Tensor = torch.Tensor


_ENV_KEYS = tuple(k.encode() for k in CODEGEN_ENV + ("FLYTUNE_AUTOTUNE",))


def _env_signature() -> tuple:
    """The codegen variables' values. os.environ.get costs ~0.5 us a key (it encodes the name every time); on POSIX
    the mapping's own bytes dict answers in ~0.05 us, so read that when it is there."""
    data = environ_bytes()
    if data is not None:
        return tuple(map(data.get, _ENV_KEYS))  # map: 0.3 us against 0.5 for a generator over 11 keys
    return tuple(os.environ.get(k) for k in CODEGEN_ENV + ("FLYTUNE_AUTOTUNE",))


def check_names(spec, inputs: dict) -> None:
    """Every input the call names is one the kernel reads: a misspelled optional input (``epsilon=`` for ``eps``,
    ``output=`` for ``out``) would otherwise be ignored, the kernel running with its default or writing a new tensor
    while the caller's buffer stays unwritten. How the names are known: flytune_nb.core.input_names."""
    check_call(spec, inputs)


def _check_outputs(spec, inputs: dict) -> None:
    """Every declared output the call passes (``spec.outputs``, e.g. ``out``) has the shape the kernel writes there,
    which is the shape of its reference's result, run on meta tensors (no data, no compute). A smaller buffer would be
    written past its end (memory corruption on a GPU; a crash in the interpreter), a larger one left partly unwritten.
    A reference that cannot run on meta tensors vouches for nothing and the call goes on unchecked. Checked here, for
    every kernel, rather than in each kernel's wrapper: an edit there changes the kernel folder's source fingerprint
    and makes every export of it stale."""
    given = [n for n in spec.outputs if isinstance(inputs.get(n), torch.Tensor)]
    if not given or spec.reference is None:
        return
    try:
        meta = {k: v.to("meta") if isinstance(v, torch.Tensor) else v for k, v in inputs.items() if k not in given}
        result = spec.reference(meta)
    except Exception:  # noqa: BLE001 - an unchecked call is what it was before; the kernel's own checks still run
        return
    results = result if isinstance(result, (tuple, list)) else (result,)
    for name, want in zip(spec.outputs, results):
        got = inputs.get(name)
        if name in given and isinstance(want, torch.Tensor) and tuple(got.shape) != tuple(want.shape):
            raise UsageError(f"{spec.name}: {name} has shape {tuple(got.shape)}, but the kernel writes "
                             f"{tuple(want.shape)} there; pass a tensor of that shape, or omit {name} to get a "
                             f"new one")


def _shape_of(spec, inputs: dict) -> dict:
    """The spec's shape_of, with a clear message when the call's inputs are not what the kernel expects."""
    try:
        shape = spec.shape_of(inputs)
    except (KeyError, IndexError, AttributeError, ZeroDivisionError, TypeError) as e:
        names = ", ".join(inputs) or "none"
        empty = next(((k, v) for k, v in inputs.items() if isinstance(v, torch.Tensor) and v.numel() == 0), None)
        if empty is not None:  # a row of zero columns: the names are right, the advice below would mislead
            raise UsageError(f"{spec.name}: cannot read the shape from inputs ({names}): {empty[0]} is empty "
                             f"(shape {tuple(empty[1].shape)}); every axis must be >= 1") from None
        raise UsageError(f"{spec.name}: cannot read the shape from inputs ({names}): "
                         f"{type(e).__name__}: {e}. Pass tensors by the names its make_inputs uses.") from None
    return spec.check_shape(shape)


def tuned(kernel, **kwargs) -> TunedKernel:
    """``tuned("rmsnorm")`` or ``tuned(spec)``; kwargs as for TunedKernel."""
    from flytune_nb.core.registry import get_kernel

    from flytune_nb.core.spec import KernelSpec

    spec = get_kernel(kernel) if isinstance(kernel, str) else kernel
    if not isinstance(spec, KernelSpec):
        raise UsageError(f"tuned() takes a kernel's name or its KernelSpec, got {type(kernel).__name__} {kernel!r}")
    return TunedKernel(spec, **kwargs)
