"""``flytune audit-sglang``: re-time the fused-MoE configs an installed SGLang ships for this GPU against SGLang's
own default, check each for correctness, and write a markdown report one can paste into a pull request to SGLang.

For every unquantised file of this device that SGLang would read (the running Triton's folder, else the newest that
has it — a fallback SGLang warns about), every batch size in it is timed on SGLang's kernel with the shipped config
and with ``get_default_config``'s (a ``_down`` file on the down GEMM alone, against the up config SGLang would run
there). An entry is *slower than the default* beyond a tie band (TIE, and at least MIN_DELTA_US), confirmed by
re-timing both alternately. With ``search`` > 0 a quick search (that many configs of SGLang's space, the shipped and
default ones included) says how much is left on the table. *Missing*: the model shapes asked for (or known, below)
that have no file for this device at all (SGLang then runs its default), files that exist only for another Triton
version, and SGLang's default batch sizes a file lacks.

A file's name gives only E and N; the hidden size K and the top-k come from ``shapes``, else from the
provenance.json beside the file (``flytune export`` writes one; SGLang's own files have none), else, for files of the
models listed in MODELS (at tensor-parallel degrees 1-8), from that table. ``dtype`` picks the files: bf16/fp16 the
unquantised ones, fp8 the ``dtype=fp8_w8a8`` ones (per-tensor fp8); other quantised files (block-wise, per-channel,
int8, int4) are listed, not timed.
"""
from __future__ import annotations

import json
import math
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from flytune_nb.artifacts import sglang as files
from flytune_nb.artifacts.files import PROVENANCE, read_provenance
from flytune_nb.core.shapes import ShapeRuleError, shape_text
from flytune_nb.errors import UsageError

TIE = 0.03  # within 3% of the default is a tie: run-to-run spread of one config on the H200 was up to ~2%
MIN_DELTA_US = 1.0  # and a slowdown must exceed the timer's noise floor (artifacts.gate says why 1 us)
CONFIRM_ROUNDS = 2
TIMED = {"graph": "as SGLang's tuner times (10 calls captured in one CUDA graph, per call)",
         "events": "one launch per sample with the L2 flushed (host gaps between SGLang's launches included)",
         "given": "by the caller's measure"}
# Without a GPU Triton's interpreter runs the kernel on the CPU: no CUDA graph, no events (measure.timer.CpuTimer)
TIMED_CPU = {"graph": "on the CPU by Triton's interpreter, wall clock of 10 back-to-back calls per sample, per call "
                      "(no GPU, no CUDA graph: these times exercise the audit and say nothing about GPU speed)",
             "events": "on the CPU by Triton's interpreter, wall clock of one call per sample (no GPU: these times "
                       "exercise the audit and say nothing about GPU speed)"}

# Models whose MoE shapes SGLang ships files for: (experts, moe intermediate size, hidden size, top-k), from each
# model's config.json (num_local_experts / num_experts, intermediate_size / moe_intermediate_size, hidden_size,
# num_experts_per_tok).
MODELS = {
    "Mixtral-8x7B": (8, 14336, 4096, 2),
    "Mixtral-8x22B": (8, 16384, 6144, 2),
    "Qwen2-57B-A14B": (64, 2560, 3584, 8),
    "Qwen3-30B-A3B": (128, 768, 2048, 8),
    "Qwen3-235B-A22B": (128, 1536, 4096, 8),
    "DeepSeek-V2-Lite": (64, 1408, 2048, 6),
}
TP_DEGREES = (1, 2, 4, 8)


def known_shapes() -> dict[tuple[int, int], tuple[dict, str]]:
    """(E, N per rank) -> ({"K", "topk"}, "model tp=t") for MODELS at every tensor-parallel degree."""
    out = {}
    for model, (E, N, K, topk) in MODELS.items():
        for tp in TP_DEGREES:
            if N % tp == 0:
                out.setdefault((E, N // tp), ({"K": K, "topk": topk}, f"{model} tp={tp}"))
    return out


@dataclass
class Entry:
    file: str
    folder: str  # the triton_X_Y_Z folder SGLang reads it from
    down: bool
    shape: dict
    label: str  # which model the shape is (or "--shape")
    M: int
    shipped: str
    default: str
    status: str  # OK | SLOWER | FASTER | WRONG | ERROR
    shipped_us: float | None
    default_us: float | None
    best: str = ""
    best_us: float | None = None
    reason: str = ""

    @property
    def speedup(self) -> float | None:
        """default / shipped (> 1: the shipped entry is faster)."""
        if self.shipped_us and self.default_us:
            return self.default_us / self.shipped_us
        return None


@dataclass
class Audit:
    device: str
    triton: str
    sglang: str
    root: str
    dtype: str
    timing: str = "graph"  # graph | events | given (a caller's measure)
    backend: str = ""  # the device's: cuda | hip | interpreter ("" when not known)
    entries: list = field(default_factory=list)
    skipped: list = field(default_factory=list)  # (file, why)
    unreadable: list = field(default_factory=list)  # (file, why): malformed, SGLang's own load of it fails
    fallback: list = field(default_factory=list)  # (file, folder it is read from)
    missing_files: list = field(default_factory=list)  # (shape label, file name)
    missing_sizes: dict = field(default_factory=dict)  # file -> [batch sizes of SGLang's default list it lacks]
    interrupted: bool = False  # stopped by Ctrl-C: ``entries`` are the ones timed before it, the rest never were
    stopped_by: str = ""  # what interrupted it, as the report names it: Ctrl-C unless the caller knows better (SIGTERM)

    @property
    def slower(self) -> list:
        return [e for e in self.entries if e.status == "SLOWER"]

    @property
    def wrong(self) -> list:
        return [e for e in self.entries if e.status in ("WRONG", "ERROR")]


class AuditInterrupted(KeyboardInterrupt):
    """Ctrl-C during an audit, carrying what was timed before it (``audit``, marked ``interrupted``): an audit keeps
    no store to resume from, so without this its caller could report none of it. A KeyboardInterrupt, so that code
    which stops on an interrupt stops on this one too."""

    def __init__(self, audit: "Audit"):
        super().__init__()
        self.audit = audit


@contextmanager
def _kept_on_interrupt(result: "Audit"):
    try:
        yield
    except KeyboardInterrupt:
        result.interrupted, result.stopped_by = True, result.stopped_by or "Ctrl-C"
        raise AuditInterrupted(result) from None


def device_files(root: Path, device_name: str, triton_version: str) -> dict[str, tuple[Path, str]]:
    """name -> (path SGLang reads, its folder) for every file of this device under root/configs."""
    configs = Path(root) / "configs"
    if not configs.is_dir():
        raise UsageError(f"{root} has no configs/ folder (SGLang's layout is <root>/configs/triton_X_Y_Z/...)")
    names = sorted({p.name for p in configs.glob("triton_*/*.json")
                    if (meta := files.parse_name(p.name)) and meta["device"] == device_name})
    out = {}
    for name in names:
        path, folder = files.resolve(root, name, triton_version)
        if path is not None:
            out[name] = (path, folder)
    return out


def recorded_shape(path: Path) -> dict | None:
    """{"K", "topk"} as the provenance.json beside an exported file records them, or None (no sidecar, no entry for
    the file, or one that does not say)."""
    try:
        entries = read_provenance(Path(path).parent / PROVENANCE).get(Path(path).name, {})
    except files.ArtifactError:
        return None
    for entry in entries.values():
        shape = entry.get("shape") if isinstance(entry, dict) else None
        try:
            return {"K": int(shape["K"]), "topk": int(shape["topk"])}
        except (TypeError, KeyError, ValueError):
            continue
    return None


def default_measure(device, timing: str = "graph") -> Callable:
    """``timing``: "graph" (10 calls in one CUDA graph, per call: how SGLang's tuner times) or "events" (one launch
    per sample, L2 flushed). Per launch, a small MoE call also times the host's gaps between SGLang's few launches
    (and, without sgl_kernel, our torch alignment and quantisation): one fp8 entry of the H200 read 1623 us that way
    in one audit and 577 us in the next, 5 minutes apart."""
    from flytune_nb.measure.timer import make_timer
    from flytune_nb.measure.trial import evaluate

    timer = make_timer(device, graph=timing == "graph")
    return lambda spec, shape, dtype, config: evaluate(spec, shape, dtype, config, device, timer)


def audit(root=None, *, device=None, shapes: dict | None = None, dtype: str = "bf16", search: int = 0,
          measure: Callable | None = None, listener: Callable | None = None, timing: str = "graph") -> Audit:
    """``shapes``: {(E, N): {"K": k, "topk": t}} for files MODELS does not cover (or to override it); ``timing``: see
    default_measure (ignored with ``measure``)."""
    from flytune_nb.core.device import current_device, ensure_backend

    # Before Triton is imported: triton.language's own @jit helpers are made for one mode at import, and SGLang's
    # kernel, interpreted later, cannot call compiled ones ("Cannot call @triton.jit'd outside of the scope of a
    # kernel" on every entry of a machine without a GPU). ``import flytune_nb`` chooses early only with a CPU-only
    # torch; a CUDA build of torch on a machine without a GPU is decided here.
    ensure_backend()
    import triton

    from flytune_nb.core.config import Config
    from flytune_nb.core.registry import get_kernel

    device = device or current_device()
    root = Path(root) if root is not None else files.package_root()
    if root is None:
        raise UsageError("sglang is not installed (pip install 'flytune_nb[sglang]'), and no --dir was given")
    up, down = get_kernel("sglang_fused_moe"), get_kernel("sglang_fused_moe_down")
    dtype = up.check_dtype(dtype)
    tag = files.config_dtype(dtype)  # the files of this dtype: no dtype part for bf16/fp16, dtype=fp8_w8a8 for fp8
    if timing not in ("graph", "events"):
        raise UsageError(f"timing must be 'graph' or 'events', got {timing!r}")
    given = measure is not None
    measure = measure or default_measure(device, timing)
    known = known_shapes()
    asked = {tuple(k): (dict(v), "--shape") for k, v in (shapes or {}).items()}
    for (E, N), (v, _) in asked.items():  # refused before anything is timed, not at that file mid-audit
        try:
            up.check_shape({"M": 1, "E": E, "N": N, **v})
        except ShapeRuleError as e:  # the kernel's rule (topk <= E), said of the --shape given, which has no M
            raise UsageError(f"--shape {shape_text({'E': E, 'N': N, **v})} {e.reason}") from None
    table_of = {**known, **asked}
    result = Audit(device.name, triton.__version__, up.extra.get("sglang_version", "?"), str(root), dtype,
                   "given" if given else timing, backend=device.backend)
    found = device_files(root, device.name, triton.__version__)
    running = files.version_dir(triton.__version__)
    # the down entries run with the BLOCK_SIZE_M of the up file a server reading ``root`` runs, as SGLang pins it
    with files.serving_from(root), _kept_on_interrupt(result):
        for name, (path, folder) in found.items():
            meta = files.parse_name(name)
            if folder != running:
                result.fallback.append((name, folder))
            if meta["block_shape"] or meta["per_channel_quant"]:
                result.skipped.append((name, "block-wise or per-channel quantisation: not timed (this kernel tunes the "
                                             "unquantised path and fp8_w8a8 per tensor)"))
                continue
            if meta["dtype"] != tag:
                other = {None: "bf16", "fp8_w8a8": "fp8"}.get(meta["dtype"])
                result.skipped.append((name, f"{meta['dtype'] or 'unquantised'} weights: audited with --dtype {other}"
                                       if other else f"{meta['dtype']} weights: not timed (this kernel tunes the "
                                                     "unquantised path and fp8_w8a8 per tensor)"))
                continue
            # read first: a file SGLang fails on is a failing finding whatever its hidden size, which reading
            # does not need
            try:
                table = files.read_table(path)
            except files.ArtifactError as e:  # a failing finding, not a file this audit chose to leave out
                result.unreadable.append((name, str(e)))
                continue
            recorded = None if (meta["E"], meta["N"]) in asked else recorded_shape(path)
            if recorded is None and (meta["E"], meta["N"]) not in table_of:
                result.skipped.append((name, f"hidden size and top-k unknown: pass --shape \"E={meta['E']} "
                                             f"N={meta['N']} K=... topk=...\""))
                continue
            # what the file's own provenance records beats a model of the same E and N: MODELS is a guess by name
            extra, label = (recorded, "provenance") if recorded else table_of[(meta["E"], meta["N"])]
            spec = down if meta["down"] else up
            rest = {"E": meta["E"], "N": meta["N"], **extra}
            try:  # a provenance.json can record a shape the kernel refuses: that file alone is left out, said why
                spec.check_shape({"M": 1, **rest})
            except UsageError as e:
                why = e.reason if isinstance(e, ShapeRuleError) else str(e)
                result.skipped.append((name, f"{label} records {shape_text(rest)}, which {why}: not timed; pass "
                                             f"--shape \"E={meta['E']} N={meta['N']} K=... topk=...\""))
                continue
            lacking = [m for m in files.BATCH_SIZES if m not in table]
            if lacking:
                result.missing_sizes[name] = lacking
            for m in sorted(table):
                if m < 1:  # SGLang int()s it and serves it to the batch sizes nearest it: no shape to time it at
                    result.entries.append(Entry(name, folder, meta["down"], {"M": m, **rest}, label, m,
                                                json.dumps(table[m]), "", "ERROR", None, None,
                                                reason=f"batch size {m} is no batch size (below 1); SGLang serves "
                                                       f"this entry to the batch sizes nearest it"))
                    continue
                shape = spec.check_shape({"M": m, **rest})
                knobs = {k: v for k, v in table[m].items() if k != "USE_TMA"}
                try:
                    shipped = Config.from_dict(knobs)
                    if meta["down"]:  # SGLang runs a down entry with the up config's BLOCK_SIZE_M
                        shipped = shipped.replace(BLOCK_SIZE_M=spec.default(shape, dtype, device)["BLOCK_SIZE_M"])
                except (ValueError, KeyError) as e:
                    result.entries.append(Entry(name, folder, meta["down"], shape, label, m, json.dumps(knobs), "",
                                                "ERROR", None, None, reason=str(e)[:200]))
                    continue
                entry = _entry(spec, shape, dtype, device, shipped, measure, name, folder, meta["down"], label, search)
                result.entries.append(entry)
                if listener:
                    listener(entry)
    have = {(m["E"], m["N"]) for n in found if (m := files.parse_name(n))["dtype"] == tag and not m["down"]}
    for (E, N), (_, label) in sorted(asked.items()):
        if (E, N) not in have:
            result.missing_files.append((label, files.file_name(E, N, device.name, tag)))
    return result


def _entry(spec, shape, dtype, device, shipped, measure, name, folder, down, label, search) -> Entry:
    default = spec.default(shape, dtype, device)
    t, d = measure(spec, shape, dtype, shipped), measure(spec, shape, dtype, default)
    base = dict(file=name, folder=folder, down=down, shape=dict(shape), label=label, M=shape["M"],
                shipped=str(shipped), default=str(default))
    if not t.ok:
        return Entry(**base, status="WRONG" if t.status == "wrong" else "ERROR", shipped_us=None,
                     default_us=d.p50 * 1e3 if d.ok else None, reason=f"{t.status}: {t.reason}"[:200])
    if d.ok and (_beyond(t.p50, d.p50) or _beyond(d.p50, t.p50)):
        ts, ds = [t], [d]  # confirm before reporting: re-timed alternately, judged on the fastest of each
        for _ in range(CONFIRM_ROUNDS):
            ts.append(measure(spec, shape, dtype, shipped))
            ds.append(measure(spec, shape, dtype, default))
        bad = [x for x in ts if not x.ok]
        if bad:
            return Entry(**base, status="WRONG", shipped_us=None, default_us=d.p50 * 1e3,
                         reason=f"{bad[0].status}: {bad[0].reason}"[:200])
        t = min(ts, key=lambda x: x.p50)
        d = min((x for x in ds if x.ok), key=lambda x: x.p50, default=d)
    status = "OK"
    if d.ok and _beyond(t.p50, d.p50):
        status = "SLOWER"
    elif d.ok and _beyond(d.p50, t.p50):
        status = "FASTER"
    entry = Entry(**base, status=status, shipped_us=t.p50 * 1e3, default_us=d.p50 * 1e3 if d.ok else None,
                  reason="" if d.ok else f"default {d.status}: {d.reason}"[:200])
    if search:
        entry.best, entry.best_us = _quick_search(spec, shape, dtype, device, shipped, default, measure, search,
                                                  (t, d))
    return entry


def _beyond(slow_ms: float, fast_ms: float) -> bool:
    return slow_ms > fast_ms * (1 + TIE) and (slow_ms - fast_ms) * 1e3 > MIN_DELTA_US


def _quick_search(spec, shape, dtype, device, shipped, default, measure, budget, measured):
    """The best of a random sample of ``budget`` configs of the space plus the two already timed."""
    import random
    import zlib

    space = [c for c in dict.fromkeys(spec.configs(shape, dtype, device)) if c not in (shipped, default)]
    seed = zlib.crc32(repr((spec.name, sorted(shape.items()), dtype)).encode())  # the same draws every run
    picks = random.Random(seed).sample(space, min(budget, len(space)))
    trials = [(c, measure(spec, shape, dtype, c)) for c in picks]
    trials += [(shipped, measured[0]), (default, measured[1])]
    ok = [(c, t) for c, t in trials if t.ok]
    if not ok:
        return "", None
    c, t = min(ok, key=lambda ct: ct[1].p50)
    return str(c), t.p50 * 1e3


def _us(v) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{v:.1f}"


def to_markdown(a: Audit) -> str:
    n_files = len({e.file for e in a.entries})
    if not (a.entries or a.skipped or a.unreadable or a.fallback or a.interrupted):  # (interrupted: files may have been left untimed)
        return "\n".join([f"# SGLang fused-MoE configs on {a.device}: audit", "",
                          f"SGLang {a.sglang}, Triton {a.triton}, {a.dtype}; folder `{a.root}`. SGLang ships no "
                          f"fused-MoE config file for {a.device} there (file names carry `device_name={a.device}`): "
                          f"nothing was timed. SGLang runs its default config for every shape on this device.",
                          ""] + [f"- no file for {label}: `{name}`" for label, name in a.missing_files]) + "\n"
    lines = [f"# SGLang fused-MoE configs on {a.device}: audit",
             "",
             f"SGLang {a.sglang}, Triton {a.triton}, {a.dtype}; folder `{a.root}`. Every entry re-timed on SGLang's "
             f"own kernel against `get_default_config` (ties within {TIE:.0%} or {MIN_DELTA_US:g} us), every output "
             f"checked against a float64 reference. Timed {_timed(a)}. Measured with "
             f"flytune_nb (`flytune audit-sglang`).",
             "",
             f"- {len(a.entries)} entries of {n_files} files timed: **{len(a.slower)} slower than the default**, "
             f"{sum(e.status == 'FASTER' for e in a.entries)} faster, {sum(e.status == 'OK' for e in a.entries)} "
             f"tied, {len(a.wrong)} failing (wrong result or error).",
             f"- {len(a.fallback)} files read from another Triton version's folder than the running "
             f"`{files.version_dir(a.triton)}`; {len(a.missing_files)} asked-for shapes with no file for this GPU; "
             f"{len(a.skipped)} files not timed"
             + (f"; **{len(a.unreadable)} files SGLang cannot read**." if a.unreadable else "."), ""]
    if a.interrupted:
        lines[4:4] = [f"**Interrupted ({a.stopped_by}) after {len(a.entries)} entries: a partial audit.** Entries and files "
                      f"after the last row below were not timed, and shapes asked for with --shape were not checked "
                      f"for a missing file; run the audit again for all of them.", ""]
    if a.unreadable:
        lines += ["## Files SGLang cannot read", "",
                  "SGLang reads a config file with json.load and int() on every key, which raise on these: a "
                  "server that looks one up fails there. Nothing in them was timed.", ""] + [f"- `{name}`: {why}" for name, why in a.unreadable] + [""]
    if a.slower or a.wrong:
        lines += ["## Entries slower than SGLang's default, or failing", "",
                  "| file | M | shipped (us) | default (us) | default / shipped | shipped config | default config | "
                  "note |", "|---|---|---|---|---|---|---|---|"]
        for e in a.slower + a.wrong:
            lines.append(f"| `{e.file}` ({e.folder}) | {e.M} | {_us(e.shipped_us)} | {_us(e.default_us)} | "
                         f"{_ratio(e.speedup)} | `{e.shipped}` | `{e.default}` | {e.reason or e.status} |")
        lines.append("")
    if a.missing_files or a.fallback or a.missing_sizes:
        lines += ["## Missing for this GPU and Triton version", ""]
        lines += [f"- no file for {label}: `{name}` (SGLang logs \"Using default MoE config\" and runs its default)"
                  for label, name in a.missing_files]
        lines += [f"- `{name}`: only in `{folder}`, not `{files.version_dir(a.triton)}` (SGLang falls back with a "
                  f"warning)" for name, folder in a.fallback]
        lines += [f"- `{name}` lacks batch sizes {', '.join(map(str, sizes))} of SGLang's default list"
                  for name, sizes in a.missing_sizes.items()]
        lines.append("")
    if a.skipped:
        lines += ["## Not timed", ""] + [f"- `{name}`: {why}" for name, why in a.skipped] + [""]
    if a.entries:
        best = any(e.best for e in a.entries)
        head = "| file | shape | M | status | shipped (us) | default (us) | default / shipped |"
        lines += ["## All entries", "", head + (" best found (us) | best config |" if best else ""),
                  "|---|---|---|---|---|---|---|" + ("---|---|" if best else "")]
        for e in a.entries:
            row = (f"| `{e.file}` | {e.label}: K={e.shape['K']} topk={e.shape['topk']} | {e.M} | {e.status} | "
                   f"{_us(e.shipped_us)} | {_us(e.default_us)} | {_ratio(e.speedup)} |")
            lines.append(row + (f" {_us(e.best_us)} | `{e.best}` |" if best else ""))
    return "\n".join(lines) + "\n"


def _timed(a: Audit) -> str:
    if a.backend == "interpreter" and a.timing in TIMED_CPU:
        return TIMED_CPU[a.timing]
    return TIMED.get(a.timing, a.timing)


def _ratio(v) -> str:
    return "-" if v is None else f"{v:.2f}x"


def to_json(a: Audit) -> str:
    d = asdict(a)
    return json.dumps(d, indent=1, default=str) + "\n"
