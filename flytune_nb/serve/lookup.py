"""Runtime lookup of exported configs: the serving path, with zero search.

``lookup(spec, shape, dtype)`` -> (config, source) where source is ``artifact`` or ``default``. Nearest batch size by
absolute distance; a tie goes to the entry first in the file, as SGLang's ``min(keys, key=abs(k - M))`` over the
file's keys (an exported file lists them ascending: there, the smaller). A FlyDSL kernel gets its exact batch size
only, as FlyDSL's own offline configs serve it (docs/flydsl.md, section 2): another is the heuristic default.
Per file, as SGLang's MoE loader looks (REFERENCE.md): the running Triton's folder (FlyDSL's, for a FlyDSL kernel) if
it holds the file, else the newest other ``triton_*`` (``flydsl_*``) folder that holds it, with a warning naming that
folder. A missing, malformed or foreign file, or a config folder this process cannot read -> the heuristic default
with one warning (per file), never an exception. Device names are SGLang's (spaces as ``_``, parentheses kept:
``Intel(R)_Arc(TM)_A770_Graphics``); one holding a path separator is refused, and the resolved path must stay under
the config dir.

Parsed tables are cached per (kernel, non-batch shape, dtype, device, dir), so a hit is a dict lookup plus a bisect.
"""
from __future__ import annotations

import bisect
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

from flytune_nb.artifacts.files import (
    BUILTIN_DIR,
    PROVENANCE,
    ArtifactError,
    ProvenanceError,
    device_name_problem,
    file_name,
    kernel_dir,
    read_provenance,
    read_table,
    tuned_for_another_source,
)
from flytune_nb.core.config import Config, ConfigError, HIP_OPTIONS, knob_value_problem



class ArtifactWarning(UserWarning):
    pass


@dataclass(frozen=True)
class Table:
    ms: tuple  # sorted batch sizes
    configs: tuple  # Config per batch size, same order
    order: tuple  # each batch size's position in the file, same order: a tie of distance goes to the first
    path: str


def config_dir(explicit: str | os.PathLike | None = None) -> Path:
    """The config dir read: ``explicit``, else $FLYTUNE_CONFIG_DIR, else the package's. A leading ``~`` is the home
    folder: no shell expands it in a container's or a service unit's environment, nor in a Python argument."""
    return Path(explicit or os.environ.get("FLYTUNE_CONFIG_DIR") or BUILTIN_DIR).expanduser()


def config_dir_problem(explicit: str | os.PathLike | None = None) -> str | None:
    """Why ``config_dir(explicit)`` cannot be read as a config dir (it is no folder), naming what named it: the
    variable, when that is where it came from. None when it is a folder."""
    if config_dir(explicit).is_dir():
        return None
    env = os.environ.get("FLYTUNE_CONFIG_DIR")
    return (f"FLYTUNE_CONFIG_DIR={env} is not a folder" if not explicit and env else
            f"{config_dir(explicit)} is not a folder")


def version_key(name: str) -> tuple:
    return tuple(int(p) for p in re.findall(r"\d+", name))


def triton_dir(kdir: Path) -> tuple[Path | None, str]:
    """(folder to read, the running Triton's folder name): ``triton_<running version>`` under a kernel's config
    folder if present, else the newest ``triton_*`` there, else None. Lookup warns when it is not the running one."""
    return version_dir(kdir, "triton")


def version_dir(kdir: Path, backend: str | None = None) -> tuple[Path | None, str]:
    """``triton_dir`` for the kernel's backend (``flydsl_<version>`` for a FlyDSL kernel). ``backend`` None: the one
    whose folders ``kdir`` holds (Triton's when it holds both or neither)."""
    from flytune_nb import backends

    if backend is None:
        backend = next((n for n in backends.NAMES if any(d.is_dir() for d in kdir.glob(
            backends.get(n).CONFIG_DIR_PREFIX + "*"))), backends.DEFAULT)
    b = backends.get(backend)
    running = b.running_config_dir_name()
    if (kdir / running).is_dir():
        return kdir / running, running
    present = sorted((d for d in kdir.glob(b.CONFIG_DIR_PREFIX + "*") if d.is_dir()), key=lambda d: version_key(d.name))
    return (present[-1] if present else None), running


def version_dirs(kdir: Path, backend: str) -> tuple[list[Path], str]:
    """(the version folders a file is looked for in, in order; the running version's folder name): the running one
    where present, then every other ``triton_*`` (``flydsl_*``) folder newest first. The first that holds the file
    serves it, so a file only an older Triton's folder has is still found beside a running folder without it."""
    from flytune_nb import backends

    b = backends.get(backend)
    running = b.running_config_dir_name()
    others = sorted((d for d in kdir.glob(b.CONFIG_DIR_PREFIX + "*") if d.is_dir() and d.name != running),
                    key=lambda d: version_key(d.name), reverse=True)
    return ([kdir / running] if (kdir / running).is_dir() else []) + others, running


def validated_table(spec, path: Path, rest: dict, dtype: str, device, raw: dict | None = None) -> dict[int, Config]:
    """{M: Config} from one artifact (``raw``: its read_table, when read already), or ArtifactError: every entry must
    hold exactly the knobs the kernel's launcher consumes (those its heuristic names, plus the kernel's optional
    knobs; AMD ones may be added on HIP) — no missing knob silently defaulted."""
    raw = read_table(path) if raw is None else raw
    expected = set(spec.default({**rest, spec.batch_axis: min(raw)}, dtype, device).to_dict())
    optional = set(HIP_OPTIONS) if device.backend == "hip" else set()
    out = {}
    for m in sorted(raw):
        knobs = raw[m]
        missing, extra = (k - optional for k in spec.knob_mismatch(knobs, expected))
        if missing or extra:
            raise ArtifactError(f"{Path(path).name}: entry {m}: " + "; ".join(
                p for p in (f"missing knob {sorted(missing)}" if missing else "",
                            f"unknown knob {sorted(extra)}" if extra else "") if p))
        bad = next((why for k, v in sorted(knobs.items()) if (why := knob_value_problem(k, v))), "")
        if bad:
            raise ArtifactError(f"{Path(path).name}: entry {m}: {bad}")
        out[m] = spec.canonical(Config.from_dict(knobs))
    return out


def too_deep(spec, root: Path) -> str:
    """A hint where ``root`` is (a folder inside) the kernel's own export folder rather than the config dir that holds
    it: ``exports/rmsnorm`` for ``exports``, or ``runs/sglang_fused_moe`` (the value SGLANG_MOE_CONFIG_DIR takes)
    for ``runs``."""
    parts = Path(spec.artifact_folder).parts
    if root.name not in parts:
        return ""
    above = root.parents[parts.index(root.name)] if parts.index(root.name) < len(root.parents) else root.parent
    return f" ({root} looks like the kernel's own folder, {spec.artifact_folder}/: give the folder above it, {above})"


class Lookup:
    def __init__(self) -> None:
        self._tables: dict[tuple, Table | None] = {}

    def clear(self) -> None:
        self._tables.clear()

    def __call__(self, spec, shape: dict, dtype: str, device, directory=None) -> Config | None:
        found = self.entry(spec, shape, dtype, device, directory)
        return None if found is None else found[0]

    def entry(self, spec, shape: dict, dtype: str, device, directory=None) -> tuple[Config, str, int] | None:
        """(config, the file's path, the batch size of the entry served) for one call, or None (the default)."""
        where = str(directory or os.environ.get("FLYTUNE_CONFIG_DIR") or "")
        rest = tuple((a, shape[a]) for a in spec.axes if a != spec.batch_axis)
        key = (spec.name, spec.fingerprint, rest, dtype, device.name, device.backend, where)
        table = self._tables.get(key, False)
        if table is False:
            table = self._load(spec, dict(rest), dtype, device, config_dir(where or None))
            self._tables[key] = table
        if table is None:
            return None
        m, ms = shape[spec.batch_axis], table.ms
        i = bisect.bisect_left(ms, m)
        if spec.backend == "flydsl":  # FlyDSL serves its offline configs by exact key: a batch size not swept has none
            if i < len(ms) and ms[i] == m:
                return table.configs[i], table.path, m
            return None
        if i == len(ms):
            i -= 1
        elif i > 0:
            below, above = m - ms[i - 1], ms[i] - m
            if below < above or (below == above and table.order[i - 1] < table.order[i]):
                i -= 1  # nearest by absolute distance; a tie goes to the entry first in the file, as SGLang's min()
        return table.configs[i], table.path, ms[i]

    def _load(self, spec, rest: dict, dtype: str, device, root: Path) -> Table | None:
        try:
            path = self._resolve(spec, rest, dtype, device.name, root)
            if path is None:
                return None
            raw = read_table(path)
            table = validated_table(spec, path, rest, dtype, device, raw)
            first = {m: i for i, m in enumerate(raw)}
            return Table(tuple(table), tuple(table.values()), tuple(first[m] for m in table), str(path))
        except (ArtifactError, ConfigError) as e:
            warnings.warn(f"{e}; using the heuristic default", ArtifactWarning, stacklevel=3)
            return None
        except OSError as e:  # a folder this process may not read or enter (an unreadable file is an ArtifactError)
            warnings.warn(f"cannot reach {e.filename or root} ({e.strerror or e}): a config folder on its path is "
                          f"not readable for this user; using the heuristic default", ArtifactWarning, stacklevel=3)
            return None

    def _resolve(self, spec, rest: dict, dtype: str, device_name: str, root: Path) -> Path | None:
        problem = device_name_problem(device_name)
        if problem:
            raise ArtifactError(problem)
        kdir = kernel_dir(spec, root)
        folders, running = version_dirs(kdir, spec.backend)
        if not folders:
            warnings.warn(f"no exported configs for {spec.name} under {root}{too_deep(spec, root)}; using the "
                          f"heuristic default", ArtifactWarning, stacklevel=4)
            return None
        name = file_name(spec, rest, device_name, dtype)
        found = next((d for d in folders if (d / name).is_file()), None)
        if found is None:
            want = folders[0]
            if (want / name).is_symlink():
                warnings.warn(f"{want / name} is a symlink to {os.readlink(want / name)}, which does not exist; "
                              f"using the heuristic default", ArtifactWarning, stacklevel=4)
                return None
            others = sorted(p.name for p in want.glob("*.json") if p.name != PROVENANCE)
            hint = f" (files there: {', '.join(others[:3])}{'...' if len(others) > 3 else ''})" if others else ""
            older = f" or {', '.join(d.name for d in folders[1:])}" if folders[1:] else ""
            warnings.warn(f"no config file {name} for {device_name} in {want}{older}{hint}; using the heuristic "
                          f"default", ArtifactWarning, stacklevel=4)
            return None
        if found.name != running:
            why = f"no {name} in {running}" if folders[0].name == running else f"no {running} in {kdir}"
            warnings.warn(f"{spec.name}: {why}; using {found.name}'s, the newest folder that holds it",
                          ArtifactWarning, stacklevel=4)
        path = (found / name).resolve()
        if not path.is_relative_to(root.resolve()):
            raise ArtifactError(f"{path} resolves outside the config dir {root}")
        return path


LOOKUP = Lookup()


def lookup(spec, shape: dict, dtype: str, *, device=None, directory=None) -> tuple[Config, str]:
    """(config, "artifact" | "default") for one call. ``spec``: a KernelSpec or a kernel's name; ``device``: a
    DeviceInfo or a named target ("h200", "mi300x"; default: the current device). A shape without one of the kernel's
    axes, with a non-integer or non-positive size, or an unknown dtype is one SpecError / UsageError."""
    from flytune_nb.core.device import current_device

    if isinstance(spec, str):
        from flytune_nb.core.registry import get_kernel

        spec = get_kernel(spec)
    if isinstance(device, str):
        from flytune_nb.core.targets import get_target

        device = get_target(device).device()
    device = device or current_device()
    shape, dtype = spec.check_shape(shape), spec.check_dtype(dtype)
    found = LOOKUP(spec, shape, dtype, device, directory)
    if found is not None:
        return found, "artifact"
    return spec.default(shape, dtype, device), "default"


def stale_entry(spec, shape: dict, dtype: str, device, directory=None) -> tuple[str, int, str] | None:
    """(the file's path, the entry's batch size, the kernel source it was tuned for) where the export entry that
    serves this call was tuned for another source of the kernel than the installed one: it is still served (its knobs
    are the kernel's), but its timing was taken on code that changed since. None: no entry serves the call, it is
    current, or its sidecar does not say (or cannot be read: what lookup serves does not depend on it, and
    ``flytune check`` reports it)."""
    found = LOOKUP.entry(spec, shape, dtype, device, directory)
    if found is None:
        return None
    _, path, m = found
    try:
        record = read_provenance(Path(path).parent / PROVENANCE).get(Path(path).name, {}).get(str(m))
    except ProvenanceError:
        return None
    if not isinstance(record, dict) or not tuned_for_another_source({str(m): record}, spec):
        return None
    return path, m, record["source"]


def artifact_hook(spec, shape: dict, dtype: str, device) -> Config | None:
    """The tuner's step 3 (offline artifact): a Config or None."""
    return LOOKUP(spec, shape, dtype, device)
