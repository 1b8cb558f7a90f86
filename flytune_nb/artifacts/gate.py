"""Regression guard for committed configs (``flytune check``), after aiter's check_tuned_op_regression.sh — except
that ours fails: every committed config for the current device is re-timed against its provenance latency and the
heuristic default. ratio = now / then: WARN above 1.10, FAIL above 1.15 or on any correctness failure.

A slowdown also has to exceed the timer's run-to-run noise, ``min_delta_us`` (default 1.0 us): on the H200 the same
config re-timed in two device calls of one session moved by up to 0.67 us (rmsnorm, p95 0.61) and 1.89 us
(fused_add_rmsnorm, p95 1.34) for kernels under 10 us, i.e. 1.12x and 1.35x — beyond the ratio thresholds, so
without the floor the guard fails on noise for 5 us kernels (one H200 check: 14 FAIL of 144 before confirmation re-timing,
2 FAIL after, 0 with the floor). Correctness failures ignore the floor.

The exported latency was measured on the export machine; another host with the same GPU can time every kernel
alike slower (on a second H200 host the heuristic defaults of the bf16 files ran a median 1.08-1.19x,
about 1 us, slower than at export, so 47 of 288 rows "failed" while each config still matched its default). The
default, timed both at export (provenance) and now, is the control: a file's drift is the median over its entries
of default now / default then (at least 1; 1 with fewer than 3 such entries), and a config fails only when it is
slower than its exported latency times that drift. A drift past the WARN line is still reported, as a WARN on each
row it covers: no config choice can fix a device- or toolchain-wide slowdown, but someone should look.

An entry is *stale* when its provenance names another source fingerprint than the kernel's current one (the kernel
was edited since it was tuned; core/key.py's fingerprint ignores comments and docstrings): its row says so, and the
summary gives the command that re-sweeps its file. A stale entry is still timed and judged like any other — stale
alone fails nothing unless asked (``fail_stale``) — because it is still what an engine would use.

Each file is timed in the timing mode its provenance records (events, or graph replay), with the same timer.
"""
from __future__ import annotations

import json
import math
import os
import shlex
import statistics
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable

import fnmatch
import time

from flytune_nb.errors import KernelUnavailable, UsageError
from flytune_nb.core.spec import ARTIFACT_SUFFIXES
from flytune_nb.artifacts.files import (PROVENANCE, ArtifactError, ProvenanceError, atomic_write, of_device,
                                        parse_file_name, read_provenance, refuse_inside_layout,
                                        tuned_for_another_source, tuned_sources)
from flytune_nb.serve.lookup import validated_table
from flytune_nb.strategies.selection import FLOOR as SELECTION_FLOOR  # a row inside it needs no confirming

WARN, FAIL = 1.10, 1.15
MIN_DELTA_US = 1.0


@dataclass(frozen=True)
class CheckRow:
    kernel: str
    file: str
    shape: dict
    dtype: str
    config: str
    status: str  # OK | WARN | FAIL
    now_ms: float
    then_ms: float | None
    default_ms: float | None
    vs_then: float | None
    vs_default: float | None
    reason: str = ""
    drift: float = 1.0  # the file's median default now / default then, at least 1 (see the module doc)
    # what the verdict is about: "exported" (slower than at export), "default" (slower than the heuristic),
    # "correctness", "drift" (the device drifted, not the config), "file" (unreadable), "budget" (not timed),
    # "unavailable" (its kernel cannot load here, e.g. sglang is not installed, or an adopted kernel whose module no
    # --path names: not timed, and a FAIL),
    # "provenance" (the provenance.json beside it is unusable: not timed, and a FAIL), ""
    kind: str = ""
    stale: bool = False  # tuned for another source of the kernel than its current one
    path: str = ""  # the artifact's path
    timing: str = "events"
    batch: int | None = None  # the entry's batch size (its key in the file)
    band: float | None = None  # the tie band the entry's selection measured (None: chosen without one)
    confirmed: bool = False  # re-timed, interleaved with the default, before this verdict


def files_for(directory: Path, device_name: str) -> list[tuple[str, Path]]:
    """(kernel, file) for every artifact of this device, in the folder lookup would read (the running Triton's, or
    FlyDSL's for a FlyDSL kernel, else the newest)."""
    from flytune_nb.serve.lookup import version_dir

    refuse_inside_layout(directory)
    out = []
    for kdir in sorted(p for p in Path(directory).iterdir() if p.is_dir() and not p.name.startswith(".")):
        tdir, _ = version_dir(kdir)
        if tdir is None:  # a kernel whose files sit one folder deeper (SGLang's MoE layout: <kernel>/configs/)
            tdir = next((t for sub in sorted(kdir.iterdir()) if sub.is_dir() for t in [version_dir(sub)[0]] if t),
                        None)
        if tdir is None:
            continue
        names = {f for f in tdir.glob("*.json") if of_device(f.name, device_name)}
        try:
            prov = read_provenance(tdir / PROVENANCE)
        except ProvenanceError:
            # That folder's problem, not the whole check's: its files are still listed, and gather() makes each a
            # FAIL naming the sidecar, beside every other folder's rows. Only the files it alone names (deleted
            # ones) and which kernel wrote each (the folder's name stands in) are unknown until it is restored.
            prov = {}
        # a file the sidecar lists but the folder lacks (deleted by hand, lost in a merge): an engine would serve its
        # defaults there, so it is checked, and fails, rather than leaving "nothing to check" to pass a CI gate
        names |= {tdir / n for n in prov if of_device(n, device_name) and not (tdir / n).exists()}
        # the kernel that wrote a file, as its provenance says (several kernels may share one folder), else the folder
        out += [(_kernel_of(prov.get(f.name, {}), kdir.name), f) for f in sorted(names)]
    return out


def _kernel_of(entries: dict, fallback: str) -> str:
    return next((p["kernel"] for p in entries.values() if isinstance(p, dict) and p.get("kernel")), fallback)


def file_shape(spec, name: str, rest: dict, dtype: str | None, prov: dict) -> tuple[dict, str]:
    """The non-batch shape and dtype a file was tuned for: its provenance says it in full (a name may show only some
    axes, and the kernel's own tag of the dtype: SGLang's ``fp8_w8a8`` for fp8); older sidecars without it fall back
    to the name."""
    meta = next((p for p in prov.values() if isinstance(p, dict) and "shape" in p), None)
    if meta:
        # What the name says is what lookup serves the file for: the sidecar only fills in what the name leaves out.
        # Where the two disagree (a file renamed to serve another dtype, a sidecar copied from another folder), a
        # check on the sidecar's shape or dtype would judge a problem no engine asks this file about.
        said = {k: int(v) for k, v in meta["shape"].items()}
        clash = sorted(a for a in rest if a in said and said[a] != rest[a])
        said_dtype = meta.get("dtype")
        if clash or (dtype is not None and said_dtype and spec.dtype_tag(said_dtype) != dtype):
            what = ", ".join(f"{a}={said[a]}" for a in clash) or f"dtype {said_dtype}"
            raise UsageError(f"{name}: {PROVENANCE} says it was tuned for {what}, which its name does not say (the "
                             f"name is what lookup serves it for)")
        rest, dtype = {**said, **rest}, said_dtype or dtype
    if dtype is None:
        raise UsageError(f"{name}: no dtype in the name and no provenance to say which; re-export it")
    return rest, dtype


def default_measure(device, timing: str = "events", timer: dict | None = None) -> Callable:
    from flytune_nb.measure.timer import make_timer
    from flytune_nb.measure.trial import evaluate

    timer = make_timer(device, **{**(timer or {}), "graph": timing == "graph"})
    return lambda spec, shape, dtype, config: evaluate(spec, shape, dtype, config, device, timer)


@dataclass
class ArtifactFile:
    """One artifact to check, read and validated (or the reason it could not be)."""
    kernel: str
    path: Path
    spec: object = None
    rest: dict | None = None
    dtype: str = ""
    prov: dict | None = None
    table: dict | None = None
    error: str = ""
    unavailable: bool = False  # the error is the kernel's: it cannot load here (a missing optional dependency)
    unknown: bool = False  # no kernel of that name is known to this process (an adopted kernel needs its --path)
    sidecar: ProvenanceError | None = None  # the error is the provenance.json's beside it: unusable as a whole

    @property
    def sources(self) -> set:
        return tuned_sources(self.prov or {})

    @property
    def current_source(self) -> str:
        from flytune_nb.core.key import current_source

        return current_source(self.spec)

    @property
    def stale(self) -> bool:
        return self.spec is not None and tuned_for_another_source(self.prov or {}, self.spec)

    @property
    def timing(self) -> str:
        modes = {p.get("timing") or "events" for p in (self.prov or {}).values() if isinstance(p, dict)}
        return modes.pop() if len(modes) == 1 else "events"


def matches_file(path: Path, globs) -> bool:
    """Whether an artifact's file name or path matches one of ``globs`` (``check --file``)."""
    return any(fnmatch.fnmatch(path.name, g) or fnmatch.fnmatch(str(path), g) for g in globs)


def gather(directory, device_name: str, *, kernels=None, files=None, paths=()) -> list[ArtifactFile]:
    """Every artifact of ``device_name`` under ``directory`` (``kernels``: only these; ``files``: only names or
    paths matching one of these globs), read and validated; unreadable ones carry their ``error``."""
    from flytune_nb.core.registry import KernelNotFound, get_kernel, kernel_paths

    out = []
    for kernel, path in files_for(Path(directory), device_name):
        if kernels and kernel not in kernels:
            continue
        if files and not matches_file(path, files):
            continue
        f = ArtifactFile(kernel, path)
        if not path.exists():
            # a link whose target is gone is in the folder, not missing from it, and provenance may not list it
            f.error = (f"a symlink to {os.readlink(path)}, which does not exist" if path.is_symlink()
                       else f"listed in {PROVENANCE} but missing from {path.parent}")
            out.append(f)
            continue
        try:
            # The sidecar first: without it the file's kernel (several may share a folder), full shape, dtype and
            # exported latencies are unknown, so an error found later would be about a guess, not about the file.
            f.prov = read_provenance(path.parent / PROVENANCE).get(path.name, {})
        except ProvenanceError as e:
            f.sidecar = e
            f.error = f"not checked: the {PROVENANCE} beside it is unusable: {e.problem}"[:200]
            # the row shows the shape and dtype the file's name says, so that the folder's rows are told apart; the
            # kernel, hence its suffix, is unknown, so the longest suffix the name ends in is taken for it
            for suffix in sorted(ARTIFACT_SUFFIXES, key=len, reverse=True):
                try:
                    f.rest, _, dtype = parse_file_name(path.name, suffix)
                except UsageError:
                    continue
                f.dtype = dtype or ""
                break
            out.append(f)
            continue
        try:
            try:
                f.spec = get_kernel(kernel, kernel_paths(paths))
            except KernelUnavailable:
                f.unavailable = True
                raise
            except KernelNotFound:
                # An exports folder names its kernel, not where it is defined: an adopted kernel (or a folder of
                # one's own) is known only once --path names it. Its registry message lists every known kernel and
                # would be cut off in the row, before the part that says this.
                f.unknown = True
                f.error = (f"no kernel {kernel!r} is known here: name the module that adopts it "
                           f"(--path my_adopt.py:SPEC) or the folder holding its kernel folder with --path")
                out.append(f)
                continue
            rest, _, dtype = parse_file_name(path.name, f.spec.artifact_suffix)
            f.rest, f.dtype = file_shape(f.spec, path.name, rest, dtype, f.prov)
        except (LookupError, ValueError) as e:  # unknown kernel, bad name, a sidecar that contradicts the name
            f.error = str(e)[:200]
        out.append(f)
    return out


def stale_files(directory, device_name: str | None = None, *, kernels=None, paths=()) -> list[dict]:
    """The artifacts under ``directory`` tuned for another source of their kernel than its current one, without
    timing anything (what the workbench shows): per file its kernel, path, the sources its provenance names, the
    kernel's current source, its batch sizes, and the command that sweeps it again."""
    from flytune_nb.core.device import current_device

    device_name = device_name or current_device().name
    out = []
    for f in gather(directory, device_name, kernels=kernels, paths=paths):
        if not f.error and f.stale:
            out.append({"kernel": f.kernel, "file": f.path.name, "path": str(f.path), "sources": sorted(f.sources),
                        "current": f.current_source, "batch": sorted(int(m) for m in f.prov if m.isdigit()),
                        "command": resweep_command(f, directory, paths)})
    return out


def resweep_command(f: ArtifactFile, directory, paths=()) -> str:
    """The commands that sweep every batch size of one artifact again (current source, selection) and export it
    over the old entries."""
    batch = sorted(int(m) for m in (f.prov or {}) if str(m).isdigit()) or sorted(f.table or [])
    axes = " ".join(f"{a}={v}" for a, v in (f.rest or {}).items())
    # a file neither readable nor in provenance.json names no batch sizes: SGLang's tuning set (the grid preset)
    grid = f"{f.spec.batch_axis}={','.join(map(str, batch)) or 'sglang'}" + (f" {axes}" if axes else "")
    # quoted: the line is pasted into a shell, where a folder with a space in its name would split into two words
    q = shlex.quote
    path_opts = "".join(f" --path {q(str(p))}" for p in paths)
    extra = path_opts + (" --timing graph" if f.timing == "graph" else "")
    db = q(f"resweep_{f.kernel}.db")
    return (f'flytune sweep {q(f.kernel)} --grid "{grid}" --dtype {f.dtype} --db {db}{extra} && '
            f"flytune export --db {db} --out {q(str(directory))} --kernel {q(f.kernel)}{path_opts}")


def check(directory, *, device=None, measure: Callable | None = None, paths=(),
          min_delta_us: float = MIN_DELTA_US, kernels=None, files=None, budget_s: float | None = None,
          progress: Callable | None = None, timer: dict | None = None) -> list[CheckRow]:
    """Re-time every committed config of this device under ``directory`` (see the module doc). ``kernels`` /
    ``files`` (globs on the file name or path) narrow it; ``budget_s``: entries not started within that many seconds
    are reported as not checked (``kind="budget"``), never as passed; ``progress(done, total, row)`` after each;
    ``timer``: the timer's options (e.g. ``{"rep_ms": 25}``) when ``measure`` is not given."""
    from flytune_nb.core.device import current_device

    device = device or current_device()
    # Interpreter timings are the CPU's wall clock, not a kernel's speed: the same config read 1.3x apart from one
    # check to the next on a 2-core machine, so a speed verdict there would fail a gate at random. Correctness and
    # the files are still checked; a given ``measure`` (a test's, a replay's) is judged as given.
    judge_speed = device.is_gpu or measure is not None
    measures = {}

    def measure_for(timing: str) -> Callable:
        if measure is not None:
            return measure
        if timing not in measures:
            measures[timing] = default_measure(device, timing, timer)
        return measures[timing]

    todo = gather(directory, device.name, kernels=kernels, files=files, paths=paths)
    rows = []
    for f in todo:
        if not f.error:
            try:
                f.table = validated_table(f.spec, f.path, f.rest, f.dtype, device)
            except (LookupError, ValueError) as e:  # malformed file
                f.error = str(e)[:200]
    total = sum(len(f.table) if not f.error else 1 for f in todo)
    t0 = time.perf_counter()

    def done(row):
        rows.append(row)
        if progress is not None:
            progress(len(rows), total, row)

    for f in todo:
        base = dict(kernel=f.kernel, file=f.path.name, dtype=f.dtype, config="", now_ms=math.inf, then_ms=None,
                    default_ms=None, vs_then=None, vs_default=None, path=str(f.path))
        if f.error:
            kind = "provenance" if f.sidecar else "unavailable" if f.unavailable or f.unknown else "file"
            done(CheckRow(**{**base, "shape": f.rest or {}, "status": "FAIL", "reason": f.error, "kind": kind}))
            continue
        spec, stale, timing = f.spec, f.stale, f.timing
        meas = measure_for(timing)
        timed, defaults, skipped = [], [], []  # defaults: (default's trial now, its exported p50), the drift's control
        for m, config in f.table.items():
            shape = spec.check_shape({**f.rest, spec.batch_axis: m})
            if budget_s is not None and time.perf_counter() - t0 > budget_s:
                skipped.append((shape, config))
                continue
            entry = f.prov.get(str(m)) or {}
            default = spec.default(shape, f.dtype, device)
            t = meas(spec, shape, f.dtype, config)
            # An entry that is the default (the selection keeps it in most row-kernel shapes) is one config: timing
            # it twice compared a 5 us kernel with itself and read up to 1.10x on the H200, a false WARN.
            d = t if spec.canonical(config) == spec.canonical(default) else meas(spec, shape, f.dtype, default)
            band = (entry.get("selection") or {}).get("band")
            timed.append((shape, config, default, entry.get("best_p50_ms"), t, d, band))
            defaults.append((d, entry.get("default_p50_ms")))
        drift = file_drift(defaults)
        for shape, config, default, then, t, d, band in timed:
            row = _judge(f.kernel, f.path.name, shape, f.dtype, config, t, d, then, min_delta_us, drift)
            if not judge_speed and t.ok:
                done(replace(row, status="OK", kind="", reason=INTERPRETER_NOTE, stale=stale, path=str(f.path),
                             timing=timing, batch=shape[spec.batch_axis], band=band))
                continue
            confirmed = False
            beyond_band = row.vs_default is not None and row.vs_default > 1 + max(SELECTION_FLOOR, band or 0)
            # an alarm is always confirmed; a row beyond its band only while the time budget lasts
            in_budget = budget_s is None or time.perf_counter() - t0 <= budget_s
            if (row.status != "OK" or (beyond_band and in_budget)) and t.ok:
                # Confirm before alarming, and before reporting a config slower than the default it was chosen
                # over beyond the band its selection measured: a 5 us kernel's median moves by up to ~1 us between
                # one measurement and the next on the H200 (fused_add_rmsnorm defaults spread 0.8-1.4x
                # run-to-run), so a suspect row is re-timed, alternating config and default on fresh inputs, and
                # judged on the fastest median of each — slow bursts can only add time.
                confirmed = True
                is_default, ts, ds = d is t, [t], [d]
                for _ in range(CONFIRM_ROUNDS):
                    ts.append(meas(spec, shape, f.dtype, config))
                    if not is_default:
                        ds.append(meas(spec, shape, f.dtype, default))
                t = _fastest(ts)
                d = t if is_default else (_fastest(ds) if d.ok else d)
                row = _judge(f.kernel, f.path.name, shape, f.dtype, config, t, d, then, min_delta_us, drift)
                if row.status != "OK":
                    row = replace(row, reason=f"{row.reason} (confirmed: fastest of {1 + CONFIRM_ROUNDS} "
                                              f"interleaved timings)")
            done(replace(row, stale=stale, path=str(f.path), timing=timing, batch=shape[spec.batch_axis], band=band,
                         confirmed=confirmed))
        for shape, config in skipped:
            done(CheckRow(**{**base, "shape": shape, "config": str(config), "status": "SKIP", "kind": "budget",
                             "reason": f"not checked: the {budget_s:g} s time budget ran out", "stale": stale,
                             "timing": timing, "batch": shape[spec.batch_axis]}))
    return rows


CONFIRM_ROUNDS = 4
INTERPRETER_NOTE = "correct; speed not judged (Triton's interpreter on the CPU)"
DRIFT_MIN_ENTRIES = 3


def file_drift(defaults) -> float:
    """Median of default now / default then over (trial, exported default p50) pairs, at least 1.0; 1.0 when fewer
    than DRIFT_MIN_ENTRIES pairs have both (a median of one or two is one noisy timing)."""
    ratios = [d.p50 / then for d, then in defaults if d.ok and then and then > 0 and math.isfinite(d.p50)]
    return max(1.0, statistics.median(ratios)) if len(ratios) >= DRIFT_MIN_ENTRIES else 1.0


def _fastest(trials):
    """The failing trial if any failed (a correctness failure is never timed away), else the fastest median."""
    bad = [t for t in trials if not t.ok]
    return bad[0] if bad else min(trials, key=lambda t: t.p50)


def _judge(kernel, fname, shape, dtype, config, t, d, then, min_delta_us: float = MIN_DELTA_US,
           drift: float = 1.0) -> CheckRow:
    base = dict(kernel=kernel, file=fname, shape=shape, dtype=dtype, config=str(config), drift=drift)
    d_ms = d.p50 if d.ok else None
    if not t.ok:
        return CheckRow(**base, status="FAIL", now_ms=math.inf, then_ms=then, default_ms=d_ms, vs_then=None,
                        vs_default=None, reason=f"{t.status}: {t.reason}", kind="correctness")
    vs_then = t.p50 / then if then else None
    vs_default = t.p50 / d_ms if d_ms else None
    # what this config would take now had nothing but the device drifted since export
    expected, beyond = (then * drift, vs_then / drift) if then else (None, None)

    def slower(ratio, ref_ms, limit):  # a ratio over the limit that is also more than the noise floor
        return ratio is not None and ratio > limit and t.p50 - ref_ms > min_delta_us * 1e-3

    def exported(ratio):
        return f"{ratio:.2f}x slower than when exported" + (
            f" ({beyond:.2f}x beyond the heuristic default's own drift, {drift:.2f}x)" if drift > 1 else "")

    status, reason, kind = "OK", "", ""
    if slower(beyond, expected, FAIL):
        status, reason, kind = "FAIL", exported(vs_then), "exported"
    elif slower(vs_default, d_ms, FAIL):
        status, reason, kind = "FAIL", f"{vs_default:.2f}x slower than the heuristic default", "default"
    elif slower(beyond, expected, WARN):
        status, reason, kind = "WARN", exported(vs_then), "exported"
    elif slower(vs_default, d_ms, WARN):
        status, reason, kind = "WARN", f"{vs_default:.2f}x slower than the heuristic default", "default"
    elif slower(vs_then, then, WARN):
        status, reason, kind = "WARN", (f"{vs_then:.2f}x slower than when exported, and so is the heuristic default "
                                        f"(median {drift:.2f}x over this file): the device or toolchain drifted, "
                                        f"not this config"), "drift"
    return CheckRow(**base, status=status, now_ms=t.p50, then_ms=then, default_ms=d_ms, vs_then=vs_then,
                    vs_default=vs_default, reason=reason, kind=kind)


HEADER = ["status", "kernel", "shape", "dtype", "now (us)", "exported (us)", "default (us)", "now/exported", "source",
          "reason"]
STATUS_ORDER = {"FAIL": 0, "WARN": 1, "SKIP": 2, "OK": 3}


def _us(v) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{v * 1e3:.2f}"


def row_cells(r: CheckRow) -> list[str]:
    """One row as display cells (the terminal table and the markdown share them)."""
    return [r.status, r.kernel, " ".join(f"{k}={v}" for k, v in r.shape.items()), r.dtype, _us(r.now_ms),
            _us(r.then_ms), _us(r.default_ms), "-" if r.vs_then is None else f"{r.vs_then:.2f}",
            "STALE" if r.stale else "current", r.reason]


def severity(r: CheckRow) -> float:
    """How bad a row is, for ordering: a correctness or file failure first, then the larger of its slowdown beyond
    the drift and against the heuristic default."""
    if r.kind in ("correctness", "file", "unavailable", "provenance"):
        return math.inf
    ratios = [x for x in ((r.vs_then / r.drift) if r.vs_then else None, r.vs_default) if x is not None]
    return max(ratios, default=0.0)


def worst(rows: list[CheckRow], n: int = 5) -> list[CheckRow]:
    """The ``n`` worst timed rows: by status (FAIL, WARN, OK), then by severity."""
    timed = [r for r in rows if r.status != "SKIP"]
    return sorted(timed, key=lambda r: (STATUS_ORDER[r.status], -severity(r)))[:n]


def summary_lines(rows: list[CheckRow], device_name: str) -> list[str]:
    n = {s: sum(r.status == s for r in rows) for s in STATUS_ORDER}
    unavailable = sum(r.kind == "unavailable" for r in rows)
    unusable = sum(r.kind == "provenance" for r in rows)
    checked = len(rows) - n["SKIP"] - unavailable - unusable
    line = f"{checked} config{'' if checked == 1 else 's'} checked on {device_name}: {n['FAIL']} FAIL, {n['WARN']} WARN"
    # a gate that cannot time a file does not pass it: each counts as a FAIL above
    if unavailable:
        line += (f"; {unavailable} file{'s' if unavailable != 1 else ''} not checked, each a FAIL: "
                 f"{'its' if unavailable == 1 else 'their'} kernel cannot load here")
    if unusable:
        line += (f"; {unusable} file{'s' if unusable != 1 else ''} not checked, each a FAIL: the {PROVENANCE} "
                 f"beside {'it' if unusable == 1 else 'them'} is unusable")
    if n["SKIP"]:
        line += f"; {n['SKIP']} not checked (time budget)"
    stale = sum(r.stale for r in rows)
    if stale:
        line += f"; {stale} stale (tuned for an older kernel source)"
    return [line]


def advice(rows: list[CheckRow], directory, paths=(), device=None) -> list[str]:
    """What to do, per file: the command that sweeps a failing or stale file again, and for a file whose only
    problem is being slower than when exported (the device, driver or toolchain changed) how to accept that."""
    from flytune_nb.core.device import current_device

    device_name = (device or current_device()).name
    by_file: dict[str, list[CheckRow]] = {}
    for r in rows:
        by_file.setdefault(r.path or r.file, []).append(r)
    files = {str(f.path): f for f in gather(directory, device_name, files=[Path(p).name for p in by_file],
                                             paths=paths)}
    out = []
    sidecars: dict[Path, tuple] = {}  # an unusable provenance.json: (its error, the files beside it) for one line
    for path, rs in by_file.items():
        bad = [r for r in rs if r.status == "FAIL"]
        stale = any(r.stale for r in rs)
        f = files.get(path)
        if not (bad or stale) or f is None or f.error:
            if bad and f is not None and f.sidecar is not None:
                sidecars.setdefault(f.sidecar.path, (f.sidecar, []))[1].append(Path(path).name)
            elif bad and f is not None and f.unavailable:  # the file may be fine: this machine cannot time it
                out.append(f"{Path(path).name} was not timed ({f.error}): install what it needs here and check "
                           f"again; until then the file fails the check")
            elif bad and f is not None and f.unknown:  # the file may be fine: nothing here could load its kernel
                out.append(f"{Path(path).name} was not checked: {f.error}, then check again; until then the file "
                           f"fails the check")
            elif bad and f is not None and f.error:
                out.append(f"{Path(path).name}: {f.error}; export it again")
            continue
        if f.table is None:
            try:
                f.table = validated_table(f.spec, f.path, f.rest, f.dtype, device or current_device())
            except (LookupError, ValueError):
                pass
        cmd = resweep_command(f, directory, paths)
        name = Path(path).name
        if bad:
            kinds = {r.kind for r in bad}
            out.append(f"FAIL {f.kernel} {name} ({len(bad)} entr{'y' if len(bad) == 1 else 'ies'}"
                       f"{', stale' if stale else ''}): sweep it again:\n    {cmd}")
            if kinds <= {"exported"}:
                out.append(f"  or, if the device, driver or toolchain changed and these latencies are the new normal, "
                           f"accept the drift (records today's latencies as the exported ones):\n"
                           f"    flytune check {directory} --file '{name}' --accept-drift")
        else:
            out.append(f"stale {f.kernel} {name}: tuned for kernel source {', '.join(sorted(f.sources))}, "
                       f"the kernel is now {f.current_source}; sweep it again:\n    {cmd}")
    for sidecar, (e, names) in sidecars.items():
        # a new sweep would not help (export refuses to merge into that folder until the sidecar reads again)
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        out.append(f"{sidecar}: {e.problem}: {len(names)} file{'s' if len(names) != 1 else ''} beside it "
                   f"{'was' if len(names) == 1 else 'were'} not checked ({shown}); {e.remedy}, then check again")
    return out


def accept_drift(rows: list[CheckRow]) -> list[CheckRow]:
    """Record today's latencies as the exported ones for the rows that failed or warned only for being slower
    than when exported (``kind`` "exported" or "drift", and not slower than the heuristic default beyond the WARN
    line either): their provenance gets ``best_p50_ms`` / ``default_p50_ms``
    from this check, and the old values under ``accepted``. A row slower than the heuristic default or incorrect
    is never accepted: that needs a new sweep. Returns the rows accepted; ArtifactError for a folder it cannot
    write."""
    from flytune_nb.artifacts.files import export_lock

    accepted = [r for r in rows if r.status in ("FAIL", "WARN") and r.kind in ("exported", "drift") and r.path
                and r.batch is not None and (r.vs_default is None or r.vs_default <= WARN)]
    by_dir: dict[Path, list[CheckRow]] = {}
    for r in accepted:
        by_dir.setdefault(Path(r.path).parent, []).append(r)
    today = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    for folder, rs in by_dir.items():
        with export_lock(folder):
            prov = read_provenance(folder / PROVENANCE)
            for r in rs:
                entry = prov.get(r.file, {}).get(str(r.batch))
                if entry is None:
                    continue
                entry["accepted"] = {"date": today, "was_best_p50_ms": entry.get("best_p50_ms"),
                                     "was_default_p50_ms": entry.get("default_p50_ms")}
                entry["best_p50_ms"] = r.now_ms
                if r.default_ms is not None:
                    entry["default_p50_ms"] = r.default_ms
            atomic_write(folder / PROVENANCE, json.dumps(dict(sorted(prov.items())), indent=1, sort_keys=True) + "\n")
    return accepted


def to_json(rows: list[CheckRow]) -> str:
    clean = [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(r).items()}
             for r in rows]
    return json.dumps(clean, indent=1) + "\n"


def to_markdown(rows: list[CheckRow], device_name: str) -> str:
    lines = [f"# flytune check on {device_name}", "", *summary_lines(rows, device_name), "",
             "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(row_cells(r)) + " |" for r in rows]
    return "\n".join(lines) + "\n"
