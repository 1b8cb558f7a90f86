"""FlyDSL's offline autotune configs (artifact format v1, flydsl 0.4.2 and 0.5.0), written from a results store.

A FlyDSL kernel wrapped in ``flydsl.autotune(..., key=[...], artifact_name=NAME)`` and called with tuning off and
``FLYDSL_AUTOTUNE_CONFIG_DIR=DIR`` set looks for exactly one file per call, and serves its config with no search:

    DIR/<NAME>-<sha256 of the canonical identity JSON>.json
    canonical JSON = json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
    identity       = {"name": NAME, "key": {declared key arg: its value in the call},
                      "device": {"name": torch's raw device name, "arch": "gfx942", "compute_units": CUs}}
    file text      = json.dumps({"version": 1, "identity": identity, "config": {...}}, indent=2, sort_keys=True,
                                allow_nan=False) + "\\n"

FlyDSL serves the file only when its identity equals the call's and its config completes the ``@jit`` signature
with values of exactly the annotated types (``Constexpr[int]`` takes 256, not 256.0 or true; ``waves_per_eu`` an
int); anything else is ignored with a warning on the ``flydsl`` logger (silent unless it has a handler) and the
heuristic default is served. So this writer refuses up front what FlyDSL would refuse, and imports nothing from
FlyDSL: tests/artifacts/test_flydsl_artifacts.py checks its bytes against FlyDSL's own ``_emit_artifact`` and has
FlyDSL's ``resolve_config`` serve them with zero benchmarks.

The lookup is by exact key: there is no nearest batch size, so a consumer whose key includes the batch (``m_in``)
finds configs only for the sizes swept. One file per exact key; what flytune knows about each (device, toolchain,
kernel source, run, latencies) goes in ``provenance.json`` beside them, which FlyDSL never reads.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from flytune_nb.artifacts.files import PROVENANCE, ArtifactError, atomic_write, atomic_write_all
from flytune_nb.artifacts.unfinished import unfinished_keys
from flytune_nb.core.config import Config

VERSION = 1
DIR = "flydsl_autotune"  # under a config dir, beside the kernels' SGLang-style folders: FLYDSL_AUTOTUNE_CONFIG_DIR
COMPILER_HINTS = ("waves_per_eu",)  # flydsl.Config.compiler_opts() in 0.5.0 (it has no maxnreg)
_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


def check_name(name: str) -> str:
    """FlyDSL's rule for ``artifact_name``: 1-64 ASCII letters, digits, '.', '_' or '-', not only punctuation."""
    if not isinstance(name, str) or not _NAME.match(name) or not re.search(r"[A-Za-z0-9]", name):
        raise ArtifactError(f"a FlyDSL artifact name is 1-64 letters, digits, '.', '_' or '-', got {name!r}")
    return name


@dataclass(frozen=True)
class FlyDSLArtifact:
    """How a FlyDSL kernel's winners become FlyDSL offline configs, declared in its spec
    (``extra={"flydsl": FlyDSLArtifact(...)}``).

    ``name``: the ``artifact_name`` of the consumer's ``flydsl.autotune``. ``key``: its declared key args (names of
    the ``@jit`` launcher's parameters) in its order, each mapped to what flytune knows of a call: a shape axis
    (``"M"``) or ``"dtype"`` (the short name, ``"bf16"``, which is what the launcher's ``dtype: Constexpr[str]``
    receives). The consumer must declare the same names, and pass those values. ``restore_value``: the launcher's
    parameters written in place (FlyDSL's own ``restore_value``, for a search FlyDSL runs itself). ``launcher``:
    returns the ``@jit`` launcher (imported only when asked), so that flytune_nb.backends.flydsl.autotuner(spec) can
    build that consumer from the spec."""

    name: str
    key: Mapping[str, str] = field(default_factory=dict)
    restore_value: tuple = ()
    launcher: Callable[[], Any] | None = None

    def __post_init__(self) -> None:
        check_name(self.name)
        if not self.key:
            raise ArtifactError(f"{self.name}: a FlyDSL artifact needs the key args its consumer declares")
        object.__setattr__(self, "key", dict(self.key))
        object.__setattr__(self, "restore_value", tuple(self.restore_value))

    def check(self, spec) -> None:
        bad = [v for v in self.key.values() if v != "dtype" and v not in spec.axes]
        if bad:
            raise ArtifactError(f"{spec.name}: FlyDSL artifact key maps to {bad}, which are neither axes of "
                                f"{spec.axes} nor 'dtype'")

    def key_values(self, shape: Mapping[str, int], dtype: str) -> dict:
        return {arg: (dtype if what == "dtype" else int(shape[what])) for arg, what in self.key.items()}


# -- the format ----------------------------------------------------------------------------------------------------
def canonical_json(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def key_value(value):
    """How FlyDSL records a declared key arg: anything with ``.shape`` (a tensor) as its shape (a list; its dtype is
    NOT recorded), else anything with ``.dtype`` as ``str(value.dtype)``, else the value itself."""
    if hasattr(value, "shape"):
        return [int(s) for s in tuple(value.shape)]
    if hasattr(value, "dtype"):
        return str(value.dtype)
    return value


def device_identity(name: str, arch: str, compute_units: int) -> dict:
    """What FlyDSL's Autotuner calls the GPU: torch's raw device name ("AMD Instinct MI300X", not flytune's
    file-name form "AMD_Instinct_MI300X"), its arch ("gfx942", features stripped) and its CU count."""
    if not isinstance(name, str) or not name:
        raise ArtifactError("the device's raw name is unknown (a store from before runs recorded it?)")
    if not isinstance(arch, str) or not arch.startswith("gfx"):
        raise ArtifactError(f"a FlyDSL device arch looks like gfx942, got {arch!r}")
    if type(compute_units) is not int or compute_units <= 0:
        raise ArtifactError(f"compute_units must be a positive int, got {compute_units!r}")
    return {"name": name, "arch": arch, "compute_units": compute_units}


def identity(name: str, key: Mapping, device: Mapping) -> dict:
    ident = {"name": check_name(name), "key": {k: key_value(v) for k, v in key.items()},
             "device": device_identity(device["name"], device["arch"], device["compute_units"])}
    try:
        canonical_json(ident)
    except (TypeError, ValueError) as e:
        raise ArtifactError(f"{name}: the identity is not JSON FlyDSL can hash: {e}") from None
    return ident


def file_name(ident: Mapping) -> str:
    return f"{ident['name']}-{hashlib.sha256(canonical_json(ident).encode()).hexdigest()}.json"


def body_of(config, key_args=()) -> dict:
    """A flytune Config as a FlyDSL config body: its knobs, plus ``waves_per_eu`` when set. FlyDSL has no
    num_warps / num_stages (it would pass num_warps to the launcher, which has no such parameter) and no other AMD
    launch options, so a config carrying one is refused."""
    foreign = [k for k in ("num_warps", "num_stages", "num_ctas", "maxnreg", "matrix_instr_nonkdim", "kpack")
               if getattr(config, k) is not None]
    if foreign:
        raise ArtifactError(f"{config}: {', '.join(foreign)} mean nothing to FlyDSL; its configs are the kernel's "
                            f"Constexpr knobs and waves_per_eu")
    return check_body({**config.kwargs, **config.hip_only}, key_args)


def check_body(body: dict, key_args=()) -> dict:
    """Refuse a config FlyDSL would ignore: not an object, a pre_hook, a value JSON changes, a non-int knob or hint
    (FlyDSL refuses 256.0 and true for a Constexpr[int]), a knob that is also a key arg."""
    if not isinstance(body, dict) or not body:
        raise ArtifactError("a FlyDSL config is a non-empty object of knob -> value")
    if "pre_hook" in body:
        raise ArtifactError("offline configs cannot carry a pre_hook")
    for k, v in body.items():
        if type(v) is not int:
            raise ArtifactError(f"config value for {k!r} must be an int, got {v!r}")
    overlap = sorted(set(body) & set(key_args))
    if overlap:
        raise ArtifactError(f"the config would override the call's key args {overlap}")
    return body


def render(ident: Mapping, body: Mapping) -> str:
    """The bytes FlyDSL's ``_emit_artifact`` writes for this identity and config."""
    for v in body.values():
        if isinstance(v, float) and not math.isfinite(v):
            raise ArtifactError("NaN and inf are not JSON")
    return json.dumps({"version": VERSION, "identity": ident, "config": body}, indent=2, sort_keys=True,
                      allow_nan=False) + "\n"


def write(directory, name: str, key: Mapping, device: Mapping, body: dict) -> Path:
    """Write one offline config atomically; returns its path."""
    ident = identity(name, key, device)
    check_body(body, tuple(key))
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    path = root / file_name(ident)
    atomic_write(path, render(ident, body))
    return path


def read(path) -> dict:
    """Parse one offline config and check its envelope: version 1, an identity and a config object, and a file name
    that is its identity's hash (FlyDSL would never find it under another)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ArtifactError(f"{path}: not readable JSON ({e})") from None
    if not isinstance(data, dict) or type(data.get("version")) is not int or data["version"] != VERSION:
        raise ArtifactError(f"{path.name}: not a version {VERSION} FlyDSL offline config")
    if not isinstance(data.get("identity"), dict) or not isinstance(data.get("config"), dict):
        raise ArtifactError(f"{path.name}: needs an identity object and a config object")
    if file_name(data["identity"]) != path.name:
        raise ArtifactError(f"{path.name}: the name is not <artifact name>-<sha256 of its identity>.json")
    return data


# -- from a results store ------------------------------------------------------------------------------------------
def plan(store, out_dir, *, kernel: str | None = None, paths=(), cut_off: set[str] | None = None,
         dtype: str | None = None) -> list[dict]:
    """What an export writes for the store's FlyDSL kernels: per file {"path", "text", "prov"}. ArtifactError
    (nothing written) when a winner was not timed on an AMD GPU, when the store does not say which GPU it was, or when
    two different winners would share one identity (the kernel's key cannot tell their shapes apart). ``cut_off``:
    the store's unfinished_keys, when the caller has them already; ``dtype``: only that dtype's rows."""
    from flytune_nb import backends
    from flytune_nb.artifacts.export import _of_dtype
    from flytune_nb.core.registry import get_kernel, kernel_paths

    df = store.on_search_clock(_of_dtype(store.frame(kernel), dtype))
    if df.empty:
        return []
    devices, specs, entries = None, {}, {}  # entries: path -> candidates
    root = Path(out_dir) / DIR
    if cut_off is None:  # export's SGLang files leave these out and say so
        cut_off = unfinished_keys(store, kernel)
    for (kname, shape_json, dtype, key), g in df.groupby(["kernel", "shape", "dtype", "key"]):
        spec = specs.get(kname) or specs.setdefault(kname, get_kernel(kname, kernel_paths(paths)))
        if spec.backend != "flydsl" or key in cut_off:
            continue
        art = spec.extra.get("flydsl")
        if not isinstance(art, FlyDSLArtifact):
            continue  # a FlyDSL kernel without a consumer-facing autotuner: SGLang-style files only
        art.check(spec)
        ok = g[(g["status"] == "ok") & (g["fidelity"] == "full")]
        if ok.empty:
            continue
        best = ok.loc[ok["p50"].idxmin()]
        if devices is None:
            devices = store.run_devices()
        dev = devices.get(best["run_id"])
        if dev is None:
            raise ArtifactError(f"not written: the store does not record which GPU {kname}'s run {best['run_id']} "
                                f"measured on (swept by an older flytune?); FlyDSL configs name it exactly. Re-sweep.")
        if dev.get("backend") not in backends.get("flydsl").DEVICE_BACKENDS:
            raise ArtifactError(f"not written: FlyDSL offline configs need timings from an AMD GPU (HIP), and "
                                f"{kname}'s are {dev.get('name')} ({dev.get('backend')}) timings")
        shape = json.loads(shape_json)
        values = art.key_values(shape, dtype)
        ident = identity(art.name, values, {"name": dev.get("raw_name", ""), "arch": dev.get("arch"),
                                             "compute_units": dev.get("sm_count")})
        config = Config.from_json(best["config"])
        body = body_of(config, tuple(art.key))
        from flytune_nb.core.device import DeviceInfo

        want = spec.default(shape, dtype, DeviceInfo(**dev)).to_dict()
        missing, extra = spec.knob_mismatch({k: v for k, v in body.items() if k not in COMPILER_HINTS}, want)
        if missing or extra:
            raise ArtifactError(f"not written: {kname}'s winner {config} for {shape} {dtype} does not have the "
                                f"kernel's knobs ({', '.join(sorted(want))}): FlyDSL would ignore it")
        dflt = g[(g["is_default"] == 1) & (g["fidelity"] == "full")]
        d_p50 = float(dflt["p50"].iloc[0]) if len(dflt) and dflt["status"].iloc[0] == "ok" else None
        prov = {"kernel": kname, "shape": shape, "dtype": dtype, "device": dev.get("name"),
                "toolchain": json.loads(best["toolchain"] or "{}"), "source": best["source"] or "",
                "run_id": best["run_id"], "date": best["created"], "key": key, "best_p50_ms": float(best["p50"]),
                "default_p50_ms": d_p50, "speedup": d_p50 / float(best["p50"]) if d_p50 else None,
                "default_config": json.loads(dflt["config"].iloc[0]) if len(dflt) else None,
                "last_id": int(g["id"].max())}
        entries.setdefault(root / file_name(ident), []).append(
            {"text": render(ident, body), "body": body, "prov": prov, "version": (prov["source"], best["toolchain"])})
    out = []
    for path, cands in sorted(entries.items()):
        # One file per identity, from the newest kernel source and toolchain measured (as the SGLang-style export):
        # older versions' winners are never mixed in.
        newest = max(cands, key=lambda c: c["prov"]["last_id"])
        mine = [c for c in cands if c["version"] == newest["version"]]
        if len({json.dumps(c["body"], sort_keys=True) for c in mine}) > 1:
            shapes = ", ".join(f"{c['prov']['shape']} {c['prov']['dtype']}" for c in mine)
            raise ArtifactError(f"not written: {newest['prov']['kernel']}'s winners for {shapes} differ but share one "
                                f"FlyDSL identity ({path.name}): its artifact key names too few axes to tell them "
                                f"apart")
        prov = {k: v for k, v in newest["prov"].items() if k != "last_id"}
        out.append({"path": path, "text": newest["text"], "prov": prov})
    return out


def read_sidecar(prov_path: Path) -> dict:
    """The provenance.json beside FlyDSL configs as {file name: record}; {} when absent; ProvenanceError when it
    cannot be read (it is rewritten whole: the other files' records would be lost)."""
    from flytune_nb.artifacts.files import RESTORE_PROVENANCE, ProvenanceError

    if not prov_path.exists():
        return {}
    try:
        prov = json.loads(prov_path.read_text())
    except (OSError, ValueError) as e:
        raise ProvenanceError(prov_path, f"not readable JSON ({e})", RESTORE_PROVENANCE) from None
    if not isinstance(prov, dict):
        raise ProvenanceError(prov_path, "expected {file name: record}", RESTORE_PROVENANCE)
    return prov


def check_sidecars(entries: list[dict]) -> None:
    """ProvenanceError for the first unreadable sidecar planned entries would merge into: export asks before it
    writes any file, so that a refusal here leaves no other file of the export written."""
    for root in sorted({e["path"].parent for e in entries}):
        read_sidecar(root / PROVENANCE)


def write_planned(entries: list[dict]) -> list[Path]:
    """Write planned files (each replaces the file of its identity) and merge their provenance beside them."""
    from flytune_nb.artifacts.files import export_lock

    written = []
    for root in sorted({e["path"].parent for e in entries}):
        mine = [e for e in entries if e["path"].parent == root]
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ArtifactError(f"cannot create {root}: {e.strerror or e}") from None
        with export_lock(root):
            prov_path = root / PROVENANCE
            prov = read_sidecar(prov_path)
            for e in mine:
                prov[e["path"].name] = e["prov"]
            # the configs and their sidecar are renamed into place only once all of them are written in full
            atomic_write_all([(e["path"], e["text"]) for e in mine]
                             + [(prov_path, json.dumps(dict(sorted(prov.items())), indent=1, sort_keys=True) + "\n")])
            written += [e["path"] for e in mine]
    return written
