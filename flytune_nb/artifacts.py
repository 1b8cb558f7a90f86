"""SGLang-format config artifacts: names, export from a results store, provenance sidecars.

A file ``<dir>/<kernel>/triton_<X_Y_Z>/<axis>=<v>,...,device_name=<Dev>,dtype=<d>.json`` holds exactly
``{"<M>": {knob: int, ...}, ...}``: SGLang's loader applies ``int()`` to every key, so nothing else may go in. What we
know about each entry (device, toolchain, source fingerprint, run, latencies) goes in ``provenance.json`` beside it.
Writes are atomic (temp file + rename) under a per-directory file lock, and the output is sorted and formatted the
same way every time, so exporting the same data twice gives byte-identical files.
"""
from __future__ import annotations

import json
import math
import os
import re
import tempfile
from pathlib import Path

from filelock import FileLock

from .device import INTERPRETER_NAME

SAFE = re.compile(r"^[A-Za-z0-9._-]+$")
BUILTIN_DIR = Path(__file__).resolve().parent.parent / "exports"  # the committed configs
PROVENANCE = "provenance.json"
LOCK = ".flytune-export.lock"


class ArtifactError(ValueError):
    pass


def triton_dir_name(version: str) -> str:
    """``3.6.0`` -> ``triton_3_6_0`` (SGLang's rule; local suffixes such as ``+git…`` dropped)."""
    core = re.match(r"^(\d+(?:\.\d+)*)", version)
    if not core:
        raise ArtifactError(f"cannot read a Triton version from {version!r}")
    return "triton_" + core.group(1).replace(".", "_")


def file_name(spec, shape: dict, device_name: str, dtype: str) -> str:
    """``N=4096,device_name=NVIDIA_H200,dtype=bf16.json``: the kernel's file axes (by default every non-batch axis)
    in its order, then the device, then the dtype tag unless the kernel maps it to none (SGLang's bf16 MoE files:
    ``E=8,N=14336,device_name=NVIDIA_H200.json``)."""
    if not SAFE.match(device_name):
        raise ArtifactError(f"device name {device_name!r} may only hold letters, digits, '.', '_' and '-'")
    parts = [f"{a}={int(shape[a])}" for a in spec.file_axes] + [f"device_name={device_name}"]
    tag = spec.dtype_tag(dtype)
    return ",".join(parts + ([f"dtype={tag}"] if tag else [])) + ".json"


def render(table: dict[int, dict]) -> str:
    """The file's text: batch keys in numeric order, knobs in name order, 4-space indent, trailing newline."""
    body = {str(m): {k: int(v) for k, v in sorted(table[m].items())} for m in sorted(table)}
    return json.dumps(body, indent=4) + "\n"


# Read once, at import: os.umask can only be read by setting it, and setting it per write would race with other
# threads creating files (a threaded sweep, a serving process).
_UMASK = os.umask(0)
os.umask(_UMASK)


def atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; a committed or shared config must be readable
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def plan_export(store, out_dir: str | Path, *, kernel: str | None = None, paths=()) -> list[dict]:
    """What an export would write: per file {"path", "by_m": {M: config dict}, "prov": {M: provenance}}."""
    from .registry import get_kernel

    df = store.frame(kernel)
    if df.empty:
        return []
    out_dir = Path(out_dir)
    candidates, specs = [], {}
    for (kname, shape_json, dtype, device, key), g in df.groupby(["kernel", "shape", "dtype", "device", "key"]):
        ok = g[(g["status"] == "ok") & (g["fidelity"] == "full")]
        if ok.empty:
            continue
        spec = specs.get(kname) or specs.setdefault(kname, get_kernel(kname, list(paths)))
        shape = json.loads(shape_json)
        best = ok.loc[ok["p50"].idxmin()]
        dflt = g[(g["is_default"] == 1) & (g["fidelity"] == "full")]
        toolchain = json.loads(best["toolchain"] or "{}")
        rest = {a: v for a, v in shape.items() if a != spec.batch_axis}
        path = out_dir / kname / triton_dir_name(toolchain.get("triton", "0")) / file_name(spec, rest, device, dtype)
        d_p50 = float(dflt["p50"].iloc[0]) if len(dflt) and dflt["status"].iloc[0] == "ok" else math.nan
        candidates.append({
            "path": path, "m": int(shape[spec.batch_axis]), "last_id": int(g["id"].max()),
            "version": (best["source"] or "", best["toolchain"] or ""), "config": json.loads(best["config"]),
            "prov": _clean({
                "device": device, "arch": best["arch"], "toolchain": toolchain, "source": best["source"] or "",
                "run_id": best["run_id"], "date": best["created"], "best_p50_ms": float(best["p50"]),
                "default_p50_ms": d_p50, "speedup": d_p50 / float(best["p50"]) if d_p50 == d_p50 else None,
                "rel_error": float(best["rel_error"]), "key": key, "shape": rest, "dtype": dtype,
                "default_config": json.loads(dflt["config"].iloc[0]) if len(dflt) else None})})
    groups: dict[Path, dict] = {}
    for path in {c["path"] for c in candidates}:
        mine = [c for c in candidates if c["path"] == path]
        # One file = one kernel-source version and toolchain: the most recently measured. Rows of an older
        # version (the kernel was edited since) are never mixed in, whatever their timestamps.
        newest = max(mine, key=lambda c: c["last_id"])["version"]
        entry = groups[path] = {"path": path, "by_m": {}, "prov": {}}
        for c in sorted((c for c in mine if c["version"] == newest), key=lambda c: c["last_id"]):
            # A file name may leave axes or the dtype out (SGLang's MoE names show E and N only): two shapes that
            # differ only there would land in one file and the later would silently win.
            seen = entry["prov"].get(c["m"])
            if seen and (seen["shape"], seen["dtype"]) != (c["prov"]["shape"], c["prov"]["dtype"]):
                raise ArtifactError(
                    f"{path.name}: batch size {c['m']} was measured for {seen['shape']} {seen['dtype']} and for "
                    f"{c['prov']['shape']} {c['prov']['dtype']}; the file name cannot tell them apart. Export them "
                    f"to separate config dirs (flytune export --kernel, or one store per model).")
            entry["by_m"][c["m"]], entry["prov"][c["m"]] = c["config"], c["prov"]
    return [groups[p] for p in sorted(groups)]


def _merge(entry: dict, table: dict, old_prov: dict) -> tuple[dict, dict]:
    """The file's new table and provenance: entries for other batch sizes are kept, unless they came from another
    kernel source or toolchain, in which case the file is replaced (never mixed)."""
    version = {(p["source"], json.dumps(p["toolchain"], sort_keys=True)) for p in entry["prov"].values()}
    if any((p.get("source"), json.dumps(p.get("toolchain"), sort_keys=True)) not in version
           for p in old_prov.values()):
        table, old_prov = {}, {}
    per_m = {**old_prov, **{str(m): v for m, v in entry["prov"].items()}}
    return {**table, **entry["by_m"]}, {k: per_m[k] for k in sorted(per_m, key=int)}


def preview(store, out_dir: str | Path, *, kernel: str | None = None, paths=()) -> list[tuple[Path, str, str]]:
    """(path, text an export would write, text there now or "") per file, writing nothing — the same merge as
    ``export``."""
    out = []
    for entry in plan_export(store, out_dir, kernel=kernel, paths=paths):
        path = entry["path"]
        old = path.read_text() if path.exists() else ""
        try:
            table = read_table(path) if old else {}
            prov = read_provenance(path.parent / PROVENANCE).get(path.name, {})
        except ArtifactError:
            table, prov = {}, {}
        out.append((path, render(_merge(entry, table, prov)[0]), old))
    return out


def refuse_interpreter_timings(out_dir: str | Path, devices) -> None:
    """ArtifactError when timings of the CPU interpreter (one of ``devices``) would go into the repository's
    committed exports/: they say nothing about GPU speed."""
    if INTERPRETER_NAME in devices and Path(out_dir).resolve() == BUILTIN_DIR:
        raise ArtifactError(f"not written: these are {INTERPRETER_NAME} timings, and {out_dir} is the repository's "
                            f"committed GPU configs; choose a scratch folder (flytune export --out DIR)")


def export(store, out_dir: str | Path, *, kernel: str | None = None, paths=()) -> list[Path]:
    """Write the winners of every (kernel, non-batch shape, device, dtype) found in ``store``. Returns the files.
    Entries already in a file for other batch sizes are kept (merged); the same batch size is replaced. Interpreter
    timings are refused for the repository's committed exports/ (BUILTIN_DIR): they say nothing about GPU speed, and
    `flytune export` writes there by default."""
    plan = plan_export(store, out_dir, kernel=kernel, paths=paths)
    refuse_interpreter_timings(out_dir, {p.get("device") for entry in plan for p in entry["prov"].values()})
    written = []
    for entry in plan:
        path = entry["path"]
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ArtifactError(f"cannot create {path.parent}: {e.strerror or e}") from None
        with FileLock(str(path.parent / LOCK)):
            # Read and check both files before writing either: a bad sidecar must not leave a new artifact behind
            # with no provenance.
            prov_path = path.parent / PROVENANCE
            prov = read_provenance(prov_path)
            table = read_table(path) if path.exists() else {}
            table, prov[path.name] = _merge(entry, table, prov.get(path.name, {}))
            atomic_write(path, render(table))
            atomic_write(prov_path, json.dumps(dict(sorted(prov.items())), indent=1, sort_keys=True) + "\n")
        written.append(path)
    return written


def read_table(path: Path) -> dict[int, dict]:
    """Strict read of one artifact (export merges into it): raises ArtifactError on anything malformed."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ArtifactError(f"{path}: not readable JSON ({e})") from None
    if not isinstance(data, dict) or not data:
        raise ArtifactError(f"{path}: expected a non-empty JSON object of batch size -> config")
    table = {}
    for k, v in data.items():
        try:
            m = int(k)
        except ValueError:
            raise ArtifactError(f"{path}: key {k!r} is not a batch size (SGLang applies int() to every key)") from None
        if not isinstance(v, dict) or not v:
            raise ArtifactError(f"{path}: entry {k!r} is not a config object")
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in v.values()):
            raise ArtifactError(f"{path}: entry {k!r} holds a non-integer knob")
        table[m] = v
    return table


def read_provenance(path: Path) -> dict:
    """The sidecar as {file name: {M: record}}; {} when absent; ArtifactError (naming the file) when malformed."""
    if not Path(path).exists():
        return {}
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ArtifactError(f"{path}: not readable JSON ({e})") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise ArtifactError(f"{path}: expected {{file name: {{batch size: record}}}}")
    return data


def _clean(d: dict) -> dict:
    """JSON has no NaN: unknown numbers become null."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}

