"""Config: one point of a kernel's search space.

Frozen and hashable so it can key dicts and sets; its string form and JSON form are stable (sorted keys) so that the
same config always prints, hashes and diffs the same way across processes and machines.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping

from flytune_nb.errors import UsageError

# Launch options understood by Triton's launcher on every backend. num_warps and num_stages default to 4 and 1 when
# a Config is built in code; a config *read* without them (a FlyDSL kernel's, which has neither) has None, and None
# options are neither passed to a launch nor written out. num_ctas and maxnreg (Hopper clusters, a register cap) are
# None unless set: an adopted @triton.autotune config may carry them.
LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")
# AMD-only launch options: legal only when the backend is HIP. On CUDA they are never passed (Triton would reject or
# silently ignore them, and a config that differs only in an ignored knob would be timed twice for nothing).
HIP_OPTIONS = ("waves_per_eu", "matrix_instr_nonkdim", "kpack")


_ABSENT = object()

# Knob names whose value is a tile size, a group or a split count, by the naming every Triton kernel here and SGLang's
# follow: 0 or less makes no launch (rmsnorm's wrapper divides N by BLOCK_N).
_COUNT_PREFIXES = ("BLOCK", "GROUP", "SPLIT")


def knob_value_problem(name: str, value: int) -> str:
    """Why ``value`` cannot be the knob ``name`` of any launch, or "". Read where a config comes from a file (a hand
    edit), so that it fails there, naming the knob, and not as a ZeroDivisionError or a Triton error in a serving
    call (num_warps is checked where a Config is built). Only what no kernel accepts is refused: 0 is legal for HIP's
    waves_per_eu and matrix_instr_nonkdim and for a kernel's on/off knobs (SWAP_AB)."""
    if name.upper().startswith(_COUNT_PREFIXES) and value < 1:
        return f"{name}={value} is not a size or count >= 1"
    return ""


class ConfigError(UsageError):
    """A config that cannot be built or launched as written (unknown option, wrong type, HIP knob on CUDA)."""


@dataclass(frozen=True)
class Config:
    """Kernel meta-parameters (``params``) plus launch options.

    ``params`` is stored as a sorted tuple of ``(name, int)`` pairs so that equality and hashing do not depend on the
    order the caller wrote them in.
    """

    params: tuple = ()
    num_warps: int | None = 4
    num_stages: int | None = 1
    num_ctas: int | None = None
    maxnreg: int | None = None
    waves_per_eu: int | None = None
    matrix_instr_nonkdim: int | None = None
    kpack: int | None = None
    _index: dict = field(default=None, init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        params = self.params.items() if isinstance(self.params, Mapping) else self.params
        items = tuple(sorted((str(k), _as_int(k, v)) for k, v in params))
        names = [k for k, _ in items]
        if len(set(names)) != len(names):
            raise ConfigError(f"duplicate kernel parameter in {names}")
        clash = set(names) & set(LAUNCH_OPTIONS + HIP_OPTIONS)
        if clash:
            raise ConfigError(f"{sorted(clash)} are launch options, not kernel parameters")
        object.__setattr__(self, "params", items)
        for opt in LAUNCH_OPTIONS + HIP_OPTIONS:
            value = getattr(self, opt)
            if value is not None:
                object.__setattr__(self, opt, _as_int(opt, value))
        w = self.num_warps
        if w is not None and (w < 1 or w & (w - 1)):
            raise ConfigError(f"num_warps must be a power of two >= 1, got {w}")
        for opt in ("num_stages", "num_ctas", "maxnreg"):
            if getattr(self, opt) is not None and getattr(self, opt) < 1:
                raise ConfigError(f"{opt} must be >= 1, got {getattr(self, opt)}")
        object.__setattr__(self, "_index", dict(items))

    # -- access ------------------------------------------------------------------------------------------------
    def __getitem__(self, name: str) -> int:
        if name in self._index:
            return self._index[name]
        if name in LAUNCH_OPTIONS + HIP_OPTIONS and getattr(self, name) is not None:
            return getattr(self, name)
        raise KeyError(name)

    def get(self, name: str, default: Any = None) -> Any:
        # Launchers read optional knobs (BLOCK_M, TMA) on every call, usually absent: one dict lookup, no KeyError
        # raised and caught (0.11 against 0.31 us a call on the 2-core CPU box, timeit).
        value = self._index.get(name, _ABSENT)
        if value is not _ABSENT:
            return value
        if name in LAUNCH_OPTIONS + HIP_OPTIONS and getattr(self, name) is not None:
            return getattr(self, name)
        return default

    @property
    def kwargs(self) -> dict[str, int]:
        """The kernel's meta-parameters, ready to pass as ``constexpr`` keyword arguments."""
        return dict(self.params)

    @property
    def hip_only(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in HIP_OPTIONS if getattr(self, k) is not None}

    def launch_options(self, backend: str) -> dict[str, int]:
        """Launch keyword arguments for ``kernel[grid](..., **opts)`` on ``backend`` (cuda | hip | interpreter)."""
        opts = {k: getattr(self, k) for k in LAUNCH_OPTIONS if getattr(self, k) is not None}
        if self.hip_only:
            if backend != "hip":
                raise ConfigError(f"{sorted(self.hip_only)} are AMD-only launch options; backend is {backend}")
            opts.update(self.hip_only)
        return opts

    def replace(self, **changes: int | None) -> "Config":
        """This config with some knobs changed; a knob set to None is removed (``waves_per_eu=None``: unset)."""
        d = {**self.to_dict(), **changes}
        return Config.from_dict({k: v for k, v in d.items() if v is not None})

    # -- serialisation -------------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, int]:
        """Flat dict: kernel params and launch options side by side (the SGLang artifact's shape)."""
        d = dict(self.params)
        d.update({k: getattr(self, k) for k in LAUNCH_OPTIONS if getattr(self, k) is not None})
        d.update(self.hip_only)
        return dict(sorted(d.items()))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Config":
        if not isinstance(d, Mapping):
            raise ConfigError(f"a config must be a JSON object, got {type(d).__name__}")
        nulls = sorted(k for k, v in d.items() if v is None)
        if nulls:  # an option a config does not have is left out, never written as null
            raise ConfigError(f"{', '.join(nulls)} must be an integer, got None")
        launch = {k: d[k] for k in LAUNCH_OPTIONS + HIP_OPTIONS if k in d}
        params = {k: v for k, v in d.items() if k not in launch}
        # absent num_warps / num_stages: a config of a DSL without them (see LAUNCH_OPTIONS)
        return cls(params=params, **{"num_warps": None, "num_stages": None, **launch})

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "Config":
        try:
            return cls.from_dict(json.loads(text))
        except json.JSONDecodeError as e:
            raise ConfigError(f"config is not valid JSON: {e}") from None

    def __str__(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.to_dict().items())

    @classmethod
    def parse(cls, text: str) -> "Config":
        """Inverse of ``str()``: ``"BLOCK_N=1024,num_stages=1,num_warps=4"``."""
        d = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            name, sep, value = part.partition("=")
            if not sep:
                raise ConfigError(f"expected NAME=INT in config string, got {part!r}")
            d[name.strip()] = value.strip()
        return cls.from_dict(d)


def _as_int(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise ConfigError(f"{name} must be an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise ConfigError(f"{name} must be an integer, got {value!r}")
