"""Serve tuned winners to an unmodified ``@triton.autotune`` kernel: no search at start-up, none when it is called.

``prime(SPEC, exports_dir)`` (SPEC: what ``flytune_nb.adopt`` returned, or the decorated kernel itself once the
module adopting it is imported) reads the kernel's exported files for this device, computes the autotuner's own cache
key for every tuned shape (from ``make_inputs`` on the meta device and the adopted ``launch``: nothing allocated,
nothing launched) and puts the winner in the autotuner's in-memory cache. From then on the library's own code calling
the kernel launches the winner for each tuned key and benchmarks nothing; any other key is tuned by the decorator as
before. Each serving process primes once, at start-up (the cache lives in the kernel object).

Every primed key is checked against the installed Triton's own ``Autotuner.run``: the adopted launch is replayed on
meta inputs with nothing launched and nothing benchmarked, and a key ``run`` does not find (a Triton whose key
differs from ours) is reported and left out, never guessed.

Where the kernel reads Triton's on-disk autotune cache (``cache_results=True`` or ``TRITON_CACHE_AUTOTUNING=1`` when
it was decorated; Triton 3.4+; compiled kernels, so a GPU), ``prime`` also writes, by default, the entries that cache
reads as its own: a process that never imports flytune_nb then finds them too. Such an entry holds only for the same
Triton build, backend, kernel source, codegen environment and pruned config list.

A key coarser than the shape axes: the autotuner keeps one config per key, so when several tuned shapes share a key
(fla's l2norm keys on D and a bucket of T, not on T), one winner serves them all: the config that won the largest
share of the measured time over those shapes (each shape weighs its best latency from the export's provenance; 1
where there is none; ties go to the winner of the largest batch). A key whose shapes disagree is reported
(``PrimeReport.coarse``) and warned about once (CoarseKeyWarning).
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from flytune_nb._compat import triton as tc
from flytune_nb.core.config import Config
from flytune_nb.core.spec import KernelSpec
from flytune_nb.errors import UsageError


class CoarseKeyWarning(UserWarning):
    """Several tuned shapes share one autotuner key and their winners differ: one of them serves all."""


@dataclass
class PrimedKey:
    key: tuple
    dtype: str
    config: Config  # what the autotuner now launches for this key
    shapes: list  # the tuned shapes that map to this key
    winners: dict  # str(config) -> the shapes it won
    disk: str = ""  # the Triton disk-cache entry written for it, if any

    @property
    def agreed(self) -> bool:
        return len(self.winners) == 1


@dataclass
class PrimeReport:
    kernel: str
    device: str
    keys: list = field(default_factory=list)  # PrimedKey per primed key
    files: list = field(default_factory=list)  # exported files read
    mismatched: list = field(default_factory=list)  # (shape, dtype, our key) the installed Triton keys otherwise
    disk: str = ""  # why no disk-cache entries were written ("" when they were, or were not asked for)
    note: str = ""  # why nothing was primed, when nothing was
    stale: list = field(default_factory=list)  # files tuned for another source of the kernel: primed, but said
    skipped: list = field(default_factory=list)  # (file, why): files that could not be served, left out

    @property
    def coarse(self) -> list:
        return [k for k in self.keys if not k.agreed]

    def summary(self) -> str:
        lines = [f"{self.kernel} on {self.device}: {len(self.keys)} autotuner keys primed from "
                 f"{len(self.files)} files" + (f" ({self.note})" if self.note else "")]
        for k in self.keys:
            shapes = ", ".join(" ".join(f"{a}={v}" for a, v in s.items()) for s in k.shapes)
            lines.append(f"  {k.key}: {k.config}  <- {shapes} {k.dtype}"
                         + ("" if k.agreed else f"  (coarse key: {len(k.winners)} different winners)")
                         + (f"  [disk: {k.disk}]" if k.disk else ""))
        for shape, dtype, key in self.mismatched:
            lines.append(f"  NOT primed: {shape} {dtype}: the installed Triton does not key this call as {key}")
        for path, why in self.skipped:
            lines.append(f"  NOT primed: {Path(path).name}: {why}")
        for path in self.stale:
            lines.append(f"  stale: {Path(path).name} was tuned for another source of the kernel (flytune check "
                         f"names the sweep that makes it current)")
        if self.disk:
            lines.append(f"  Triton's disk cache: {self.disk}")
        return "\n".join(lines)


def adopted_spec(kernel, exports: Path | None = None) -> KernelSpec:
    """The spec ``flytune_nb.adopt`` made for ``kernel``: that spec itself, a kernel name or module attribute the
    registry knows, or the decorated kernel object (found among the specs adopted in this process; where several
    adopt it, the one with exports under ``exports``)."""
    from flytune_nb.core import registry

    obj = kernel
    if isinstance(kernel, str):
        if registry.is_reference(kernel) and not kernel.rpartition(":")[0].endswith(".py"):
            from flytune_nb.kit.adopt import resolve

            obj = resolve(kernel)[0]  # "package.module:attribute": a spec, or the decorated kernel itself
        else:
            obj = registry.get_kernel(kernel)
    if isinstance(obj, KernelSpec):
        spec = obj
    else:
        try:
            at = tc.unwrap_autotuned(obj)[0]
        except tc.AutotunerLayoutError as e:
            raise UsageError(f"prime: {e}") from None
        mine = [s for s in registry.loaded() if "adopted" in s.extra and s.extra["adopted"].autotuner is at]
        if not mine:
            raise UsageError(f"prime: no spec in this process adopts {tc.autotuned_name(at)}; "
                             f"import the module that adopts it first, or pass its SPEC")
        if len({s.name for s in mine}) > 1 and exports is not None:
            mine = [s for s in mine if (exports / s.name).is_dir()] or mine
        if len({s.name for s in mine}) > 1:
            raise UsageError(f"prime: several specs adopt {tc.autotuned_name(at)} "
                             f"({', '.join(sorted({s.name for s in mine}))}); pass the one to serve")
        spec = mine[-1]
    if "adopted" not in spec.extra:
        raise UsageError(f"prime: {spec.name} is not an adopted @triton.autotune kernel (flytune_nb.adopt); folder "
                         f"kernels are served by tuned(...) and lookup(...)")
    return spec


def prime(kernel, exports_dir=None, *, device=None, disk: bool | str = "auto") -> PrimeReport:
    """Prime the autotuner of an adopted kernel with the winners exported under ``exports_dir`` (default: where
    lookup reads, $FLYTUNE_CONFIG_DIR or the repository's exports/) for ``device`` (default: this one).
    ``disk``: also write Triton's on-disk autotune entries: "auto" where the kernel reads them, True to write them
    wherever this Triton can (a process decorating the kernel with TRITON_CACHE_AUTOTUNING=1 reads them), False
    never. Returns what was primed.
    Raises UsageError for a kernel that is not adopted and for an ``exports_dir`` that is not a folder; a file that
    cannot be served, a stale one, or nothing to prime is reported and warned about (ArtifactWarning), never raised:
    a serving process starts either way, its autotuner tuning what was not primed."""
    from flytune_nb.core.device import current_device
    from flytune_nb.serve.lookup import ArtifactWarning, config_dir

    root = Path(config_dir(exports_dir))
    if exports_dir is not None and not root.is_dir():
        what = "does not exist" if not root.exists() else "is a file, not a folder of exports"
        raise UsageError(f"prime: {root} {what}; give the folder `flytune export --out` wrote")
    spec = adopted_spec(kernel, root)
    adopted = spec.extra["adopted"]
    device = device or current_device()
    report = PrimeReport(spec.name, device.name)
    at = adopted.autotuner
    if not tc.tunes(at):
        report.note = "the decorator has a single config: the autotuner never searches"
        return report
    groups = _plan(spec, root, device, report)
    tc.prime_cache(at, {pk.key: adopted.to_triton(pk.config) for pk in report.keys})
    for pk in list(report.keys):
        members = groups[(pk.key, pk.dtype)]
        if not tc.hits_cache(at, lambda: adopted.launch(adopted.kernel, members[0][3])):
            tc.unprime_cache(at, pk.key)
            report.keys.remove(pk)
            report.mismatched.extend((m[0], pk.dtype, pk.key) for m in members)
    if report.coarse:
        worst = report.coarse[0]
        warnings.warn(f"{spec.name}: several tuned shapes share one autotuner key and their winners differ; each "
                      f"key serves the winner of the largest share of the measured time (the autotuner keeps one "
                      f"config per key): {len(report.coarse)} such keys, e.g. {worst.key}: {worst.winners}",
                      CoarseKeyWarning, stacklevel=2)
    _write_disk(spec, adopted, report, groups, device, disk)
    problems = [f"{Path(p).name}: {why}" for p, why in report.skipped]
    if report.stale:
        problems.append(f"{len(report.stale)} file(s) tuned for another source of the kernel, primed: "
                        f"{', '.join(Path(p).name for p in report.stale)} (flytune check {root} says how to renew them)")
    if not report.keys:
        hint = f"; {root} looks like the kernel's own folder: give its parent" if root.name == spec.name else ""
        why = report.note or ("the installed Triton keys every tuned call otherwise" if report.mismatched else
               "no entry could be served")
        problems.append(f"nothing primed ({why}){hint}; the autotuner "
                        f"benchmarks each key at its first call")
    if problems:
        warnings.warn(f"prime {spec.name}: " + "; ".join(problems), ArtifactWarning, stacklevel=2)
    return report


def _plan(spec, root: Path, device, report: PrimeReport) -> dict:
    """Fill ``report.keys`` with the config each autotuner key gets from the exports, touching no cache; returns
    {(key, dtype): [(shape, config, weight, planning inputs)]}."""
    adopted = spec.extra["adopted"]
    groups: dict[tuple, list] = {}
    for shape, dtype, config, weight in _exported(spec, root, device, report):
        inputs = _planning_inputs(spec, shape, dtype, device)
        groups.setdefault((adopted.key(inputs), dtype), []).append((shape, config, weight, inputs))
    for (key, dtype), members in groups.items():
        chosen, winners = _reduce([(shape, config, weight) for shape, config, weight, _ in members], spec)
        report.keys.append(PrimedKey(key, dtype, chosen, [m[0] for m in members], winners))
    return groups


def served(kernel, shape: dict, dtype: str, exports_dir=None, *, device=None) -> tuple[tuple, PrimedKey | None]:
    """(the autotuner key of this call, the PrimedKey that serves it or None) in a process that ran ``prime`` on
    these exports: nothing is primed or launched. None means the decorator benchmarks this key at its first call,
    even where lookup's nearest batch size answers with an exported config: the autotuner keeps one config per key
    and prime fills only the keys of exported shapes (a key coarser than the axes may still cover this shape)."""
    from flytune_nb.core.device import current_device
    from flytune_nb.serve.lookup import config_dir

    root = Path(config_dir(exports_dir))
    spec = adopted_spec(kernel, root)
    device = device or current_device()
    shape, dtype = spec.check_shape(shape), spec.check_dtype(dtype)
    key = spec.extra["adopted"].key(_planning_inputs(spec, shape, dtype, device))
    report = PrimeReport(spec.name, device.name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # lookup, beside this, already warns about the files it cannot read
        _plan(spec, root, device, report)
    return key, next((pk for pk in report.keys if pk.key == key and pk.dtype == dtype), None)


def _exported(spec, root: Path, device, report: PrimeReport) -> list:
    """(shape, dtype, config, weight) for every entry of the kernel's files for ``device``."""
    from flytune_nb.artifacts.files import (PROVENANCE, ArtifactError, of_device, parse_file_name, read_provenance,
                                            tuned_for_another_source)
    from flytune_nb.artifacts.gate import file_shape
    from flytune_nb.serve.lookup import triton_dir, validated_table

    tdir, _ = triton_dir(root / spec.name)
    if tdir is None:
        report.note = f"no exported configs for {spec.name} under {root}"
        return []
    out = []
    for path in sorted(p for p in tdir.glob("*.json") if of_device(p.name, device.name)):
        try:  # a stray file the glob matched, a hand-broken sidecar: named and left out, start-up goes on
            prov = read_provenance(path.parent / PROVENANCE).get(path.name, {})
            # another kernel's file in a folder they share (SGLang's MoE up and down GEMMs: …_down.json), as its
            # provenance says: not this kernel's to prime, nor to report
            if {p.get("kernel") for p in prov.values() if isinstance(p, dict)} - {None, spec.name}:
                continue
            rest, named, dtype = parse_file_name(path.name, spec.artifact_suffix)
            if named != device.name:  # …,device_name=<this device>_down.json without a sidecar record
                continue
            # the name may show only some axes (the provenance holds the full shape); where the two disagree, the
            # name is what lookup serves the file for, and priming it for the provenance's shape would serve a
            # config to a key no engine looks it up for
            rest, dtype = file_shape(spec, path.name, rest, dtype, prov)
            table = validated_table(spec, path, rest, dtype, device)
        except (ArtifactError, UsageError) as e:  # also a knob renamed since the export
            report.skipped.append((path, str(e).removeprefix(f"{path.name}: ")))
            continue
        report.files.append(path)
        if tuned_for_another_source(prov, spec):
            report.stale.append(path)
        for m, config in table.items():
            shape = spec.check_shape({**rest, spec.batch_axis: m})
            p50 = (prov.get(str(m)) or {}).get("best_p50_ms")
            out.append((shape, dtype, config, float(p50) if p50 and math.isfinite(p50) else None))
    if not out:
        report.note = f"no exported configs for {device.name} in {tdir}"
    return out


def _planning_inputs(spec, shape: dict, dtype: str, device) -> dict:
    from flytune_nb.kit.adopt import _inputs_for_planning

    return _inputs_for_planning(spec.make_inputs, shape, dtype, device)


def _reduce(members: list, spec) -> tuple[Config, dict]:
    """One config for shapes that share an autotuner key (see the module doc), and which shapes each winner won."""
    winners: dict[str, list] = {}
    share: dict[Config, float] = {}
    biggest: dict[Config, int] = {}
    weighted = all(w is not None for _, _, w in members)
    for shape, config, weight in members:
        winners.setdefault(str(config), []).append(shape)
        share[config] = share.get(config, 0.0) + (weight if weighted else 1.0)
        biggest[config] = max(biggest.get(config, 0), shape[spec.batch_axis])
    chosen = max(share, key=lambda c: (share[c], biggest[c]))
    return chosen, winners


def _write_disk(spec, adopted, report: PrimeReport, groups: dict, device, disk) -> None:
    at = adopted.autotuner
    if disk is False or not report.keys:
        return
    if disk == "auto" and not tc.read_autotuner(at)["cache_results"]:
        return  # the kernel does not read it (nor would another process decorating it the same way)
    why = tc.disk_cache_supported(at) or ("" if device.is_gpu else "needs a GPU (Triton asks the driver's target)")
    if why:
        report.disk = f"not written: {why}"
        return
    skipped = []
    for pk in report.keys:
        inputs = groups[(pk.key, pk.dtype)][0][3]
        pruned = adopted.pruned(inputs)
        if any(c.pre_hook for c in pruned):
            skipped.append(f"{pk.key}: Triton never disk-caches a config list with a pre_hook")
            continue
        weights = [w for _, c, w, _ in groups[(pk.key, pk.dtype)] if c == pk.config and w]
        pk.disk = tc.write_disk_entry(at, pk.key, pruned, adopted.to_triton(pk.config), min(weights, default=0.0))
    if skipped:
        report.disk = "; ".join(skipped)
