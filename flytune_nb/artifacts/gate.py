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
"""
from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable

from flytune_nb.errors import UsageError
from flytune_nb.artifacts.files import PROVENANCE, read_provenance
from flytune_nb.serve.lookup import validated_table

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


def parse_name(name: str) -> tuple[dict, str, str | None]:
    """``N=4096,device_name=NVIDIA_H200,dtype=bf16.json`` -> ({"N": 4096}, "NVIDIA_H200", "bf16"); the dtype is None
    for names without one (SGLang's bf16/fp16 MoE files)."""
    try:
        fields = dict(p.split("=", 1) for p in name.removesuffix(".json").split(","))
        device, dtype = fields.pop("device_name"), fields.pop("dtype", None)
        return {k: int(v) for k, v in fields.items()}, device, dtype
    except (ValueError, KeyError):
        raise UsageError(f"{name}: not an artifact name (AXIS=v,...,device_name=D,dtype=T.json)") from None


def files_for(directory: Path, device_name: str) -> list[tuple[str, Path]]:
    """(kernel, file) for every artifact of this device, in the folder lookup would read (the running Triton's, or
    FlyDSL's for a FlyDSL kernel, else the newest)."""
    from flytune_nb.serve.lookup import version_dir

    out = []
    for kdir in sorted(p for p in Path(directory).iterdir() if p.is_dir() and not p.name.startswith(".")):
        tdir, _ = version_dir(kdir)
        if tdir is None:  # a kernel whose files sit one folder deeper (SGLang's MoE layout: <kernel>/configs/)
            tdir = next((t for sub in sorted(kdir.iterdir()) if sub.is_dir() for t in [version_dir(sub)[0]] if t),
                        None)
        if tdir is None:
            continue
        # "…,device_name=D,dtype=T.json", "…,device_name=D.json" where the kernel writes no dtype part (MoE), and
        # either with a kernel's lower-case name suffix ("…_down.json").
        mine = re.compile(rf"device_name={re.escape(device_name)}(,|(_[a-z]+)?\.json$)")
        names = {f for f in tdir.glob("*.json") if mine.search(f.name)}
        prov = read_provenance(tdir / PROVENANCE)
        # the kernel that wrote a file, as its provenance says (several kernels may share one folder), else the folder
        out += [(_kernel_of(prov.get(f.name, {}), kdir.name), f) for f in sorted(names)]
    return out


def _kernel_of(entries: dict, fallback: str) -> str:
    return next((p["kernel"] for p in entries.values() if isinstance(p, dict) and p.get("kernel")), fallback)


def _full_shape(name: str, rest: dict, dtype: str | None, prov: dict) -> tuple[dict, str]:
    """The non-batch shape and dtype a file was tuned for: its provenance says it in full (a name may show only some
    axes); older sidecars without it fall back to the name."""
    meta = next((p for p in prov.values() if isinstance(p, dict) and "shape" in p), None)
    if meta:
        rest, dtype = {k: int(v) for k, v in meta["shape"].items()}, meta.get("dtype") or dtype
    if dtype is None:
        raise UsageError(f"{name}: no dtype in the name and no provenance to say which; re-export it")
    return rest, dtype


def default_measure(device) -> Callable:
    from flytune_nb.measure.timer import make_timer
    from flytune_nb.measure.trial import evaluate

    timer = make_timer(device)
    return lambda spec, shape, dtype, config: evaluate(spec, shape, dtype, config, device, timer)


def check(directory, *, device=None, measure: Callable | None = None, paths=(),
          min_delta_us: float = MIN_DELTA_US) -> list[CheckRow]:
    from flytune_nb.core.device import current_device
    from flytune_nb.core.registry import get_kernel

    device = device or current_device()
    measure = measure or default_measure(device)
    rows = []
    for kernel, path in files_for(Path(directory), device.name):
        base = dict(kernel=kernel, file=path.name, dtype="", config="", now_ms=math.inf, then_ms=None,
                    default_ms=None, vs_then=None, vs_default=None)
        try:
            spec = get_kernel(kernel, list(paths))
            rest, _, dtype = parse_name(path.name)
            prov = read_provenance(path.parent / PROVENANCE).get(path.name, {})
            rest, dtype = _full_shape(path.name, rest, dtype, prov)
            table = validated_table(spec, path, rest, dtype, device)
        except (LookupError, ValueError) as e:  # unknown kernel, bad name, malformed file or sidecar
            rows.append(CheckRow(**{**base, "shape": {}, "status": "FAIL", "reason": str(e)[:200]}))
            continue
        timed, defaults = [], []  # defaults: (default's trial now, its exported p50), the drift's control
        for m, config in table.items():
            shape = spec.check_shape({**rest, spec.batch_axis: m})
            entry = prov.get(str(m)) or {}
            default = spec.default(shape, dtype, device)
            t, d = measure(spec, shape, dtype, config), measure(spec, shape, dtype, default)
            timed.append((shape, config, default, entry.get("best_p50_ms"), t, d))
            defaults.append((d, entry.get("default_p50_ms")))
        drift = file_drift(defaults)
        for shape, config, default, then, t, d in timed:
            row = _judge(kernel, path.name, shape, dtype, config, t, d, then, min_delta_us, drift)
            if row.status != "OK" and t.ok:
                # Confirm before alarming: a 5 us kernel's median moves by up to ~1 us between one measurement
                # and the next on the H200 (fused_add_rmsnorm defaults spread 0.8-1.4x run-to-run), so a
                # suspect row is re-timed, alternating config and default on fresh inputs, and judged on the
                # fastest median of each — slow bursts can only add time.
                ts, ds = [t], [d]
                for _ in range(CONFIRM_ROUNDS):
                    ts.append(measure(spec, shape, dtype, config))
                    ds.append(measure(spec, shape, dtype, default))
                t = _fastest(ts)
                d = _fastest(ds) if d.ok else d
                row = _judge(kernel, path.name, shape, dtype, config, t, d, then, min_delta_us, drift)
                if row.status != "OK":
                    row = replace(row, reason=f"{row.reason} (confirmed: fastest of {1 + CONFIRM_ROUNDS} "
                                              f"interleaved timings)")
            rows.append(row)
    return rows


CONFIRM_ROUNDS = 4
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
                        vs_default=None, reason=f"{t.status}: {t.reason}")
    vs_then = t.p50 / then if then else None
    vs_default = t.p50 / d_ms if d_ms else None
    # what this config would take now had nothing but the device drifted since export
    expected, beyond = (then * drift, vs_then / drift) if then else (None, None)

    def slower(ratio, ref_ms, limit):  # a ratio over the limit that is also more than the noise floor
        return ratio is not None and ratio > limit and t.p50 - ref_ms > min_delta_us * 1e-3

    def exported(ratio):
        return f"{ratio:.2f}x slower than when exported" + (
            f" ({beyond:.2f}x beyond the heuristic default's own drift, {drift:.2f}x)" if drift > 1 else "")

    status, reason = "OK", ""
    if slower(beyond, expected, FAIL):
        status, reason = "FAIL", exported(vs_then)
    elif slower(vs_default, d_ms, FAIL):
        status, reason = "FAIL", f"{vs_default:.2f}x slower than the heuristic default"
    elif slower(beyond, expected, WARN):
        status, reason = "WARN", exported(vs_then)
    elif slower(vs_default, d_ms, WARN):
        status, reason = "WARN", f"{vs_default:.2f}x slower than the heuristic default"
    elif slower(vs_then, then, WARN):
        status, reason = "WARN", (f"{vs_then:.2f}x slower than when exported, and so is the heuristic default "
                                  f"(median {drift:.2f}x over this file): the device or toolchain drifted, not "
                                  f"this config")
    return CheckRow(**base, status=status, now_ms=t.p50, then_ms=then, default_ms=d_ms, vs_then=vs_then,
                    vs_default=vs_default, reason=reason)


HEADER = ["status", "kernel", "shape", "dtype", "now (us)", "exported (us)", "default (us)", "now/exported", "reason"]


def _us(v) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{v * 1e3:.2f}"


def row_cells(r: CheckRow) -> list[str]:
    """One row as display cells (the terminal table and the markdown share them)."""
    return [r.status, r.kernel, " ".join(f"{k}={v}" for k, v in r.shape.items()), r.dtype, _us(r.now_ms),
            _us(r.then_ms), _us(r.default_ms), "-" if r.vs_then is None else f"{r.vs_then:.2f}", r.reason]


def to_markdown(rows: list[CheckRow], device_name: str) -> str:
    lines = [f"# flytune check on {device_name}", "", "| " + " | ".join(HEADER) + " |",
             "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(row_cells(r)) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def to_json(rows: list[CheckRow]) -> str:
    clean = [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(r).items()}
             for r in rows]
    return json.dumps(clean, indent=1) + "\n"
