"""KernelSpec: the plugin contract. A kernel is a folder exposing one ``SPEC``; adding one never edits the core.

Nothing here assumes Triton: ``run`` is any callable that launches something built from a config.
See docs/kernel-plugins.md for the contract explained with a worked example.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from flytune_nb.errors import UsageError
from flytune_nb.core import dtypes
from flytune_nb.core.config import Config
from flytune_nb.core.device import DeviceInfo
from flytune_nb.core.shapes import ShapeRuleError, parse_rule, rule_holds

Shape = Mapping[str, int]
Inputs = dict  # name -> torch.Tensor (or scalar)


class SpecError(UsageError):
    """A KernelSpec that breaks the contract (e.g. its batch axis is not one of its axes)."""


@dataclass(frozen=True)
class KernelSpec:
    name: str
    axes: tuple[str, ...]  # shape axes, e.g. ("M", "N")
    batch_axis: str  # the axis that is the inner key of an exported file (SGLang's M)
    dtypes: tuple[str, ...]  # canonical short names: "bf16", "fp16", "fp32"
    make_inputs: Callable[[Shape, str, DeviceInfo], Inputs]  # fresh random inputs (never zeros) + output buffers
    run: Callable[[Inputs, Config], Any]  # launch; returns output tensor or tuple of tensors
    reference: Callable[[Inputs], Any]  # torch result in fp32 or better, same structure as run's
    configs: Callable[[Shape, str, DeviceInfo], Sequence[Config]]  # the pruned search space
    default: Callable[[Shape, str, DeviceInfo], Config]  # the heuristic: zero-search config
    shape_of: Callable[[Inputs], dict]  # recover the shape from real call inputs
    outputs: tuple[str, ...] = ()  # input names that are pure outputs: poisoned with NaN before a checked launch
    mutates: tuple[str, ...] = ()  # written in place: snapshotted and restored before every rep (restore_value)
    zeroes: tuple[str, ...] = ()  # accumulated into: zeroed before every rep and before the real call (reset_to_zero)
    bytes: Callable[[Shape, str], float] | None = None  # minimum bytes moved, for roofline %
    flops: Callable[[Shape, str], float] | None = None
    tolerance: Callable[[str], float] | None = None  # rel-error bound per dtype, when the default table is not right
    # Outputs that go through several storage roundings (e.g. a GEMM whose intermediate is stored in bf16) scale both
    # default bounds, norm and element-wise, rather than replacing them with a norm-only one.
    tolerance_scale: float = 1.0
    baseline: Callable[[Inputs], Any] | None = None  # eager torch as a user would write it: timed eager + compiled
    source_dir: Path | None = None  # folder fingerprinted into the tuning key
    dtype_from: str = ""  # the input whose dtype is "the" dtype of a real call (default: first floating tensor)
    fingerprint: str = ""  # hash of source_dir as it was when this spec was imported (set by the registry)
    description: str = ""
    extra: dict = field(default_factory=dict)
    # Artifact file names. SGLang's MoE files name only E and N (not K or top-k) and carry no dtype part for bf16/fp16,
    # so a kernel can narrow the axes its file names show and map dtypes to name tags (None: no dtype part).
    artifact_axes: tuple[str, ...] = ()  # default: every non-batch axis, in axis order
    # A representative shape (axes left out default to 4096): what `flytune kernels` sizes the space at and what the
    # workbench pre-fills. 4096 everywhere is right for a norm, absurd for MoE (4096 experts, top-4096).
    example_shape: dict = field(default_factory=dict)
    artifact_dtype: Callable[[str], str | None] | None = None  # default: the short name, e.g. "bf16"
    # Knobs a config may leave out, with the value their absence means (rmsnorm's BLOCK_M: 1 row per program). A knob
    # added to a kernel this way keeps the names of its older configs, so stored trials and exported files stay valid.
    optional_knobs: dict = field(default_factory=dict)
    # Knobs that change only which tile a program computes (the order of the work), not the code's resources: an AMD
    # census compiles one config per combination of the other knobs and gives its siblings that binary's resources.
    # GROUP_SIZE_M=1/8/16/32 of one gfx942 matmul tile differ in 2 of ~1900 instructions, with identical registers,
    # LDS, MFMA and loads; a census of the whole 4096^3 matmul space compiles 426 configs instead of 1620. (On sm_90
    # GROUP_SIZE_M=1 changes registers and occupancy: NVIDIA censuses compile every config.)
    schedule_knobs: tuple[str, ...] = ()
    # Configs other than the heuristic that a result should be able to stand beside the best, by label: the config an
    # engine ships for this shape and device ({"SGLang shipped": ...}), a colleague's pick. Each is measured right
    # after the default, whatever the strategy and (beyond the budget) however small the budget, and kept in
    # SearchResult.named. Returns {} when there is none for this shape.
    named_configs: Callable[[Shape, str, DeviceInfo], Mapping[str, Config]] | None = None
    # Where a config dir holds this kernel's triton_X_Y_Z/ folders (default: the kernel's name), a suffix for its
    # file names, and how a file's text is written (default: artifacts.files.render, knobs sorted). SGLang's MoE files
    # live under <dir>/configs/, name a separately tuned down GEMM "…_down.json" and order the knobs as SGLang's tuner.
    artifact_path: str = ""
    artifact_suffix: str = ""
    artifact_render: Callable[[dict], str] | None = None
    # The DSL the kernel is written in (flytune_nb.backends: "triton" or "flydsl"): the toolchain part of its tuning
    # key, the devices it launches on, the version folder of its exported files.
    backend: str = "triton"
    # The names a call may pass, for a run that reads its inputs out of sight (fn(**inputs), a library's launcher
    # handed the whole dict): tuned() refuses any other name, so that a misspelled optional input (epsilon= for eps)
    # is one message, not a silent default. Empty: read from the code of run, reference, shape_of, baseline and
    # make_inputs (flytune_nb.core.input_names), which needs nothing declared where they read inputs by literal name.
    input_names: tuple[str, ...] = ()
    # Shapes the kernel cannot run whatever the config, as {rule: why}: {"topk <= E": "each token is routed to topk
    # distinct experts"}. A rule compares axes and whole numbers (core.shapes.parse_rule); check_shape refuses a
    # shape that breaks one, so a sweep, a census or a lookup says so before anything is compiled. A kernel folder
    # may instead list them in shape_rules.json beside its parts (core.registry): that file is not part of the
    # folder's source fingerprint, so adding a rule keeps its stored trials and exports valid.
    shape_rules: Mapping[str, str] = field(default_factory=dict)

    def canonical(self, config):
        """``config`` without the optional knobs that are at their default (``TMA=0`` -> no TMA), the name the
        kernel's space gives that config."""
        drop = {k for k, v in self.optional_knobs.items() if config.get(k) == v}
        if not drop:
            return config
        return Config.from_dict({k: v for k, v in config.to_dict().items() if k not in drop})

    def knob_mismatch(self, have, want) -> tuple[set, set]:
        """(missing, extra): the knobs a config naming ``have`` lacks or adds against one naming ``want`` (the
        heuristic default's); optional knobs may be absent on either side."""
        optional = set(self.optional_knobs)
        return set(want) - set(have) - optional, set(have) - set(want) - optional

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or not self.name.replace("_", "").isalnum():
            raise SpecError(f"kernel name must be letters, digits and '_', got {self.name!r}")
        _check_types(self)
        from flytune_nb.backends import NAMES

        if self.backend not in NAMES:
            raise SpecError(f"{self.name}: backend must be one of {', '.join(NAMES)}, got {self.backend!r}")
        if self.batch_axis not in self.axes:
            raise SpecError(f"{self.name}: batch axis {self.batch_axis!r} is not one of its axes {self.axes}")
        object.__setattr__(self, "dtypes", tuple(dtypes.canonical(d) for d in dtypes.parse_list(self.dtypes)))
        if not self.dtypes:
            raise SpecError(f"{self.name}: dtypes is empty; name at least one (bf16, fp16, fp32)")
        object.__setattr__(self, "artifact_axes", tuple(self.artifact_axes))
        object.__setattr__(self, "schedule_knobs", tuple(self.schedule_knobs))
        if set(self.example_shape) - set(self.axes):
            raise SpecError(f"{self.name}: example_shape names {sorted(set(self.example_shape) - set(self.axes))}, "
                            f"not axes of {self.axes}")
        bad = [a for a in self.artifact_axes if a not in self.axes or a == self.batch_axis]
        if bad:
            raise SpecError(f"{self.name}: artifact axes {bad} must be non-batch axes of {self.axes}")
        parts = self.artifact_path.split("/") if self.artifact_path else []
        if any(not p or p in (".", "..") or not p.replace("_", "").replace("-", "").replace(".", "").isalnum()
               for p in parts):
            raise SpecError(f"{self.name}: artifact_path must be a relative folder of letters, digits, '_', '-', '.' "
                            f"joined by '/', got {self.artifact_path!r}")
        if self.input_names:
            undeclared = [n for n in (*self.outputs, *self.mutates, *self.zeroes, self.dtype_from)
                          if n and n not in self.input_names]
            if undeclared:
                raise SpecError(f"{self.name}: {sorted(set(undeclared))} missing from input_names "
                                f"{self.input_names}; a call may pass them")
        check_shape_rules(self.name, self.shape_rules, self.axes)
        overlap = set(self.outputs) & set(self.mutates)
        if overlap:
            raise SpecError(f"{self.name}: {sorted(overlap)} cannot be both a pure output and mutated in place")
        if self.optional_knobs:  # the heuristic and the space name configs as canonical() does, whoever wrote them
            object.__setattr__(self, "default", _canonical_result(self.default, self.canonical))
            object.__setattr__(self, "configs", _canonical_result(self.configs, self.canonical))

    # -- helpers the core uses -----------------------------------------------------------------------------------
    @property
    def artifact_folder(self) -> str:
        return self.artifact_path or self.name

    def named(self, shape: Shape, dtype: str, device: DeviceInfo) -> dict[str, Config]:
        """The named configs for this shape, canonical, without the heuristic default itself."""
        if self.named_configs is None:
            return {}
        default = self.default(shape, dtype, device)
        out = {}
        for label, config in dict(self.named_configs(shape, dtype, device) or {}).items():
            config = self.canonical(config)
            if config != default:
                out[str(label)] = config
        return out

    def example(self) -> dict[str, int]:
        return {a: int(self.example_shape.get(a, 4096)) for a in self.axes}

    @property
    def file_axes(self) -> tuple[str, ...]:
        """The axes an artifact's file name shows (the rest of the shape lives in its provenance)."""
        return self.artifact_axes or tuple(a for a in self.axes if a != self.batch_axis)

    def dtype_tag(self, dtype: str) -> str | None:
        """The ``dtype=`` part of an artifact name, or None for none."""
        d = dtypes.canonical(dtype)
        return self.artifact_dtype(d) if self.artifact_dtype is not None else d

    def check_shape(self, shape: Shape) -> dict[str, int]:
        """Validate a shape dict against the axes; returns it in axis order with int values."""
        if not isinstance(shape, Mapping):
            raise SpecError(f"{self.name}: a shape is a mapping of {self.axes}, got {shape!r}")
        missing = [a for a in self.axes if a not in shape]
        extra = [a for a in shape if a not in self.axes]
        if missing or extra:
            raise SpecError(f"{self.name}: shape needs axes {list(self.axes)}; missing {missing}, unknown {extra}")
        out = {}
        for a in self.axes:
            v = shape[a]
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise SpecError(f"{self.name}: axis {a} must be a positive integer, got {v!r}")
            out[a] = v
        for rule, why in self.shape_rules.items():
            if not rule_holds(parsed_rule(rule, self.axes), out):
                raise ShapeRuleError(self.name, out, rule, why)
        return out

    @property
    def default_dtype(self) -> str:
        """What a sweep or census runs when no dtype is given: bf16, the serving dtype, where the kernel has it;
        otherwise the first it lists (an adopted fp32-only kernel)."""
        return "bf16" if "bf16" in self.dtypes else self.dtypes[0]

    def check_dtypes(self, wanted) -> list[str]:
        """The dtypes a sweep or census runs: ``wanted`` ("bf16,fp16", a list), or None for ``default_dtype``. Each
        once, in the order first named: "fp16 float16" is one dtype, swept once."""
        checked = [self.check_dtype(d) for d in (dtypes.parse_list(wanted) if wanted is not None
                                                 else [self.default_dtype])]
        return list(dict.fromkeys(checked))

    def check_dtype(self, dtype: Any) -> str:
        try:
            d = dtypes.canonical(dtype)
        except dtypes.DtypeError:  # name this kernel's dtypes, not every dtype flytune knows
            # torch.float64 is a real dtype no kernel here runs: "unknown" would read as a typo to look for
            what = f"{self.name} does not run {dtype}" if dtypes.is_torch_dtype(dtype) else f"unknown dtype {dtype!r}"
            raise dtypes.DtypeError(f"{what}; {self.name} supports {', '.join(self.dtypes)}") from None
        if d not in self.dtypes:
            raise dtypes.DtypeError(f"{self.name} supports {', '.join(self.dtypes)}; got {d}")
        return d

    def dtype_of(self, inputs: Mapping[str, Any]):
        """The torch dtype of a call: that of ``dtype_from``, else of the first floating-point tensor."""
        if self.dtype_from:
            if self.dtype_from not in inputs:
                raise UsageError(f"{self.name}: missing input {self.dtype_from!r} (got {', '.join(inputs) or 'none'})")
            return inputs[self.dtype_from].dtype
        for v in inputs.values():
            if hasattr(v, "dtype") and getattr(v, "is_floating_point", lambda: False)():
                return v.dtype
        raise UsageError(f"{self.name}: no floating-point tensor among the inputs to take the dtype from")

    def check_made_inputs(self, inputs: Mapping[str, Any], dtype: str) -> None:
        """make_inputs honoured ``dtype``: a make_inputs that ignores it would have every result stored, exported
        and served under a dtype it never ran (bf16 files holding fp32 timings)."""
        if not isinstance(inputs, Mapping):
            raise SpecError(f"{self.name}: make_inputs returned {type(inputs).__name__}, not a dict of named inputs")
        try:
            got = self.dtype_of(inputs)
        except UsageError as e:
            raise SpecError(f"make_inputs for {dtype}: {e}") from None
        try:
            name = dtypes.canonical(got)
        except dtypes.DtypeError:
            name = str(got).removeprefix("torch.")
        if name != dtype:
            source = f"input {self.dtype_from!r}" if self.dtype_from else "its first floating-point input"
            raise SpecError(f"{self.name}: make_inputs(shape, {dtype!r}, device) made {name} tensors ({source}); "
                            f"it must make {dtype} ones (flytune_nb.core.dtypes.to_torch(dtype))")

    def tol(self, dtype: str) -> float:
        if self.tolerance is not None:
            return float(self.tolerance(dtype))
        return self.tolerance_scale * dtypes.DEFAULT_TOLERANCE[dtypes.canonical(dtype)]

    def element_tol(self, dtype: str) -> tuple[float, float] | None:
        """(rtol, atol) per element; None when the kernel sets its own norm ``tolerance`` (it knows better)."""
        if self.tolerance is not None:
            return None
        rtol, atol = dtypes.ELEMENT_TOLERANCE[dtypes.canonical(dtype)]
        return self.tolerance_scale * rtol, self.tolerance_scale * atol

    def reset(self, inputs: Inputs, snapshot: Mapping[str, Any] | None) -> None:
        """Put in-place state back: restore ``mutates`` from ``snapshot`` and zero ``zeroes``."""
        if snapshot:
            for name, saved in snapshot.items():
                inputs[name].copy_(saved)
        for name in self.zeroes:
            inputs[name].zero_()

    def snapshot(self, inputs: Inputs) -> dict[str, Any]:
        return {name: inputs[name].clone() for name in self.mutates}

    def rep_setup(self, inputs: Inputs, snapshot: Mapping[str, Any] | None):
        """What a timer runs before every timed rep: in-place state put back (``mutates`` from ``snapshot``,
        ``zeroes`` zeroed); None for a kernel without in-place state, so its reps carry no setup at all."""
        if not (self.mutates or self.zeroes):
            return None
        return lambda: self.reset(inputs, snapshot)


_NAME_TUPLES = ("axes", "outputs", "mutates", "zeroes", "artifact_axes", "schedule_knobs", "input_names")
_FUNCTIONS = ("make_inputs", "run", "reference", "configs", "default", "shape_of")
_OPTIONAL_FUNCTIONS = ("bytes", "flops", "tolerance", "baseline", "named_configs", "artifact_dtype", "artifact_render")
_MAPPINGS = ("example_shape", "optional_knobs", "extra", "shape_rules")


def _check_types(spec: KernelSpec) -> None:
    """Each field of the type the core reads it as, checked once here: a field of the wrong type otherwise fails far
    from where it was written (``outputs="out"`` reads as the names 'o', 'u', 't'; ``tolerance=1e-3`` as a function
    called on every trial). Name lists become tuples; ``dtypes`` may also be text ("bf16,fp16")."""
    def refuse(field_name: str, want: str, value) -> SpecError:
        return SpecError(f"{spec.name}: {field_name} must be {want}, got {type(value).__name__} {value!r:.80}")

    for f in _NAME_TUPLES:
        value = getattr(spec, f)
        if isinstance(value, str):
            example = "('M', 'N')" if f in ("axes", "artifact_axes") else f"({value!r},)"
            raise refuse(f, f"a tuple of names, e.g. {example}", value)
        if not isinstance(value, Sequence) or not all(isinstance(v, str) and v for v in value):
            raise refuse(f, "a tuple of names (non-empty strings)", value)
        object.__setattr__(spec, f, tuple(value))
    if not spec.axes:
        raise SpecError(f"{spec.name}: axes is empty; name the shape axes, e.g. ('M', 'N')")
    if len(set(spec.axes)) != len(spec.axes):
        raise refuse("axes", "distinct names", spec.axes)
    if not isinstance(spec.batch_axis, str):
        raise refuse("batch_axis", "one of the axes' names", spec.batch_axis)
    if not isinstance(spec.dtypes, (str, Sequence)):
        raise refuse("dtypes", "a tuple of dtype names, e.g. ('bf16', 'fp16')", spec.dtypes)
    for f in _FUNCTIONS:
        if not callable(getattr(spec, f)):
            raise refuse(f, "a function", getattr(spec, f))
    for f in _OPTIONAL_FUNCTIONS:
        value = getattr(spec, f)
        if value is not None and not callable(value):
            hint = " (a bound per dtype: lambda dtype: 1e-3)" if f == "tolerance" else ""
            raise refuse(f, f"a function or None{hint}", value)
    for f in _MAPPINGS:
        if not isinstance(getattr(spec, f), Mapping):
            raise refuse(f, "a dict", getattr(spec, f))
    scale = spec.tolerance_scale
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not scale > 0:
        raise refuse("tolerance_scale", "a positive number", scale)
    for f in ("dtype_from", "description", "artifact_path", "artifact_suffix", "backend"):
        if not isinstance(getattr(spec, f), str):
            raise refuse(f, "text", getattr(spec, f))
    if spec.artifact_suffix not in ARTIFACT_SUFFIXES:
        raise refuse("artifact_suffix", " or ".join(map(repr, ARTIFACT_SUFFIXES)), spec.artifact_suffix)


# The suffixes a kernel's file names may carry before ".json": SGLang's, whose only one marks a separately tuned MoE
# down GEMM. A closed list because a file name alone must say whose it is: a device named ``A`` must not claim the
# files of a device ``A_foo`` (artifacts.files.of_device), which any lower-case suffix would allow.
ARTIFACT_SUFFIXES = ("", "_down")


@functools.lru_cache(maxsize=256)
def parsed_rule(rule: str, axes: tuple[str, ...]):
    """parse_rule, once per rule and axes: check_shape runs on every call of a tuned kernel."""
    return parse_rule(rule, axes)


def check_shape_rules(name: str, rules: Mapping[str, str], axes: tuple[str, ...]) -> None:
    """SpecError naming the kernel unless every rule reads as a comparison of ``axes`` and its why is text."""
    for rule, why in rules.items():
        try:
            parsed_rule(rule, tuple(axes))
        except UsageError as e:
            raise SpecError(f"{name}: {e}") from None
        if not isinstance(why, str):
            raise SpecError(f"{name}: shape rule {rule!r}: its reason must be text, got {type(why).__name__}")


def _canonical_result(fn, canonical):
    """``fn`` (a heuristic or a space) with its Config, or each Config of its list, put through ``canonical``.
    functools.wraps keeps the function's module and name, and inspect.unwrap finds its source (the workbench's
    heuristic editor reads it); a function wrapped once is not wrapped again (dataclasses.replace re-runs
    __post_init__)."""
    if getattr(fn, "_flytune_canonical", False):
        return fn

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        out = fn(*args, **kwargs)
        return canonical(out) if isinstance(out, Config) else [canonical(c) for c in out]

    wrapped._flytune_canonical = True
    return wrapped
