"""A compile census: every config of a space compiled for one GPU (which need not be here), with what each uses.

One ``CensusRow`` per config: compiled or the error's first line, compile time, registers, spills and scratch, shared
memory / LDS, an occupancy estimate, the instruction counts a kernel engineer reads (MMA variants, load widths, LDS
traffic, waits) and a hash of the binaries, so configs that build byte-identical code are seen as one. The rows are
plain data: flytune_nb.engine.census_pool computes them in processes that compile for the target, the results store
keeps them beside the trials (same tuning key, same config JSON), ``summarise`` says what an engineer would ask
first, and ``prune`` decides which configs a sweep need not time.

Nothing here says anything about speed, and nothing here was loaded on the GPU it describes: that a real MI300X loads
these exact binaries, its real occupancy and how fast they run are not checked by a census.
"""
from __future__ import annotations

import collections
import json
import math
from dataclasses import dataclass, field
from typing import Iterable

from flytune_nb.core.config import Config

# NVIDIA: a stack frame this small with few registers is a call's register saves, not register pressure (8-24 B
# around the 64-bit `%` subroutine in GROUP_SIZE_M=1 GEMM tiles with 48-128 registers, sm_90 and sm_100); a real
# spill is hundreds of bytes (a 256x256x64 tile on 4 warps: 3328 B).
SMALL_STACK_BYTES = 64
WIDE_LOAD_BYTES = 16  # one 128-bit load per lane: the widest global / buffer load either vendor has


@dataclass(frozen=True)
class CensusRow:
    kernel: str
    shape: dict
    dtype: str
    device: str  # the target's device name, as in artifact file names: AMD_Instinct_MI300X
    arch: str
    backend: str  # hip | cuda
    config: Config
    status: str  # ok | error (did not compile) | timeout | crashed (the compiler took its process down)
    error: str = ""
    compile_s: float = math.nan
    binary: str | None = None  # flytune_nb.backends.triton.binary_digest (FlyDSL: its code objects' digest)
    # per kernel the config launches: its resources (flytune_nb.backends.triton_resources; a FlyDSL kernel's from its
    # code object's metadata, flytune_nb.backends.flydsl.census_record)
    kernels: tuple = ()
    is_default: bool = False  # the kernel's heuristic default for this shape and target
    occupancy_unit: str = ""
    # Not compiled: the resources of this config's binary, which differs from this one only in the kernel's
    # schedule knobs (KernelSpec.schedule_knobs: which tile a program computes). binary is then None: the two are
    # different code, never duplicates of each other.
    sibling_of: Config | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def _values(self, name: str) -> list:
        return [k[name] for k in self.kernels if k.get(name) is not None]

    def _max(self, name: str):
        v = self._values(name)
        return max(v) if v else None

    def _insn(self, name: str) -> list:
        return [k["insn"][name] for k in self.kernels if name in k.get("insn", {})]

    @property
    def registers(self) -> int | None:
        """Registers a thread holds: AMD's allocated VGPRs + AGPRs (the kernel descriptor's, which is what bounds
        waves per SIMD), NVIDIA's registers per thread. The largest of the config's kernels."""
        return self._max("vgpr_alloc" if self.backend == "hip" else "regs")

    @property
    def spilled_registers(self) -> int | None:
        """AMD: VGPRs + SGPRs spilled (the code object's own counts); NVIDIA: None (its spill is the stack frame)."""
        if self.backend != "hip" or not self.kernels:
            return None
        return sum((k.get("vgpr_spills") or 0) + (k.get("sgpr_spills") or 0) for k in self.kernels)

    @property
    def scratch_bytes(self) -> int | None:
        """Scratch per thread: AMD's private segment, NVIDIA's stack frame + local memory."""
        return self._max("scratch_bytes")

    @property
    def shared_bytes(self) -> int | None:
        return self._max("shared")

    @property
    def smem_over_limit(self) -> bool:
        """Shared memory / LDS above what one block may use there: compiles, would not load."""
        return any(k.get("smem_over_limit") for k in self.kernels)

    @property
    def occupancy(self) -> int | None:
        """Waves per SIMD (AMD) or warps per SM (NVIDIA) of the config's most constrained kernel (an estimate from
        the binary's registers and shared memory; ``occupancy_unit`` says which)."""
        v = self._values("occupancy")
        return min(v) if v else None

    @property
    def occupancy_limiter(self) -> str:
        ks = [k for k in self.kernels if k.get("occupancy") is not None]
        return min(ks, key=lambda k: k["occupancy"]).get("occupancy_limiter", "") if ks else ""

    @property
    def spills(self) -> bool:
        """Registers spilled to scratch memory: AMD, any private segment (scratch); NVIDIA, a stack frame above
        SMALL_STACK_BYTES (below it, a call's register saves). On gfx90a and newer LLVM first spills VGPRs into
        unused AGPRs, which costs moves, not memory: such a kernel has ``spilled_registers`` and no scratch (8 of the
        164 one-wave fused_moe configs on gfx942, 64x64x256 and 128x16x128), and is not counted here."""
        if not self.ok:
            return False
        if self.backend == "hip":
            return bool(self.scratch_bytes)
        return (self.scratch_bytes or 0) > SMALL_STACK_BYTES

    @property
    def mma(self) -> dict:
        """MMA instructions by variant, summed over the config's kernels (``v_mfma_f32_16x16x16_bf16``: 128)."""
        out: collections.Counter = collections.Counter()
        for d in self._insn("mfma" if self.backend == "hip" else "mma"):
            out.update(d)
        return dict(sorted(out.items()))

    @property
    def widest_load(self) -> int | None:
        """Bytes a lane moves in the config's widest global / buffer load (None: no such loads, e.g. TMA only)."""
        widths = [int(w) for d in self._insn("load_bytes") for w, n in d.items() if n]
        return max(widths) if widths else None

    @property
    def narrow(self) -> bool:
        """No 16-byte load at all: every lane's loads are 2, 4 or 8 bytes (a row too short for its warps)."""
        w = self.widest_load
        return w is not None and w < WIDE_LOAD_BYTES

    def insn_total(self, name: str) -> int:
        return sum(self._insn(name))

    def to_record(self) -> dict:
        """The flat row the store keeps and the DataFrame shows."""
        return {
            "kernel": self.kernel, "shape": self.shape, "dtype": self.dtype, "device": self.device, "arch": self.arch,
            "backend": self.backend, "config": self.config.to_json(), "status": self.status, "error": self.error,
            "compile_s": self.compile_s, "binary": self.binary, "registers": self.registers,
            "vgprs": self._max("vgprs"), "agprs": self._max("agprs"), "sgprs": self._max("sgprs"),
            "spilled_registers": self.spilled_registers, "scratch_bytes": self.scratch_bytes,
            "spills": int(self.spills), "shared_bytes": self.shared_bytes, "smem_over_limit": int(self.smem_over_limit),
            "occupancy": self.occupancy, "occupancy_unit": self.occupancy_unit,
            "occupancy_limiter": self.occupancy_limiter, "mma": json.dumps(self.mma),
            "mma_total": self.insn_total("mma_total"), "wide_loads": self.insn_total("wide_loads"),
            "narrow_loads": self.insn_total("narrow_loads"), "widest_load": self.widest_load,
            "lds_reads": self.insn_total("lds_reads"), "lds_writes": self.insn_total("lds_writes"),
            "s_waitcnt": self.insn_total("s_waitcnt"), "is_default": int(self.is_default),
            "kernels": json.dumps(list(self.kernels), sort_keys=True),
            "sibling_of": self.sibling_of.to_json() if self.sibling_of is not None else None}

    @classmethod
    def from_record(cls, r: dict) -> "CensusRow":
        shape = r["shape"] if isinstance(r["shape"], dict) else json.loads(r["shape"])
        cs = r.get("compile_s")
        return cls(r["kernel"], shape, r["dtype"], r["device"], r["arch"], r["backend"], Config.from_json(r["config"]),
                   r["status"], r.get("error") or "", math.nan if cs is None else float(cs), r.get("binary"),
                   tuple(json.loads(r.get("kernels") or "[]")), bool(r.get("is_default")),
                   r.get("occupancy_unit") or "",
                   Config.from_json(r["sibling_of"]) if r.get("sibling_of") else None)


# -- what an engineer asks first ------------------------------------------------------------------------------------
@dataclass
class CensusSummary:
    kernel: str
    shape: dict
    dtype: str
    device: str
    arch: str
    occupancy_unit: str
    configs: int
    compiled: int
    errors: dict  # first line -> configs
    distinct_binaries: int
    duplicate_groups: list  # [[Config, ...], ...]: configs that built byte-identical code, in space order
    spilling: list  # CensusRow: spills to scratch
    narrow: list  # CensusRow: no 16-byte load
    smem_over_limit: list  # CensusRow
    occupancy_hist: dict  # occupancy -> configs
    registers: tuple | None  # (min, max)
    default: CensusRow | None
    spilled_in_registers: list = field(default_factory=list)  # CensusRow: AMD registers spilled, no scratch
    wall_s: float = math.nan
    stored: int = 0  # rows found in the store, not compiled again
    rows: list = field(default_factory=list, repr=False)
    key: str = ""  # the target's tuning key the rows are stored under
    inferred: int = 0  # sibling rows made by this census (not from the store, not compiled)

    @property
    def failed(self) -> int:
        return self.configs - self.compiled

    @property
    def siblings(self) -> int:
        """Rows not compiled themselves: a schedule-knob sibling's resources (CensusRow.sibling_of)."""
        return sum(r.sibling_of is not None for r in self.rows)

    @property
    def duplicates(self) -> int:
        """Configs a sweep need not time: every member of a group but one."""
        return sum(len(g) - 1 for g in self.duplicate_groups)


def same_binary(rows: Iterable[CensusRow]) -> list[list[CensusRow]]:
    """The rows that built byte-identical code, one list per binary: each list in ``rows``' order (its first row is
    the one worth timing, the others duplicate it), the lists in the order of their first rows. A row that did not
    compile, or has no binary of its own (a schedule-knob sibling), is in none."""
    groups: dict = {}
    for r in rows:
        if r.ok and r.binary:
            groups.setdefault(r.binary, []).append(r)
    return list(groups.values())


def summarise(rows: Iterable[CensusRow], *, wall_s: float = math.nan, stored: int = 0, key: str = "",
              inferred: int = 0) -> CensusSummary:
    rows = list(rows)
    if not rows:
        raise ValueError("no census rows to summarise")
    first = rows[0]
    ok = [r for r in rows if r.ok]
    groups = same_binary(ok)
    regs = [r.registers for r in ok if r.registers is not None]
    default = next((r for r in rows if r.is_default), None)
    return CensusSummary(
        first.kernel, first.shape, first.dtype, first.device, first.arch, first.occupancy_unit, len(rows), len(ok),
        dict(collections.Counter(f"{r.status}: {r.error}" if r.error else r.status for r in rows if not r.ok)),
        len(groups), [[r.config for r in g] for g in groups if len(g) > 1], [r for r in ok if r.spills],
        [r for r in ok if r.narrow], [r for r in ok if r.smem_over_limit],
        dict(sorted(collections.Counter(r.occupancy for r in ok if r.occupancy is not None).items())),
        (min(regs), max(regs)) if regs else None, default,
        [r for r in ok if r.spilled_registers and not r.spills], wall_s, stored, rows, key, inferred)


def describe(r, same_as=None) -> str:
    """One line an engineer reads first: registers, occupancy and its limiter, LDS / shared memory, spills, the
    widest load, MMA instructions, and the config it shares a binary with."""
    if not r.ok:
        return f"{r.status}: {r.error}"
    regs = "VGPR+AGPR" if r.backend == "hip" else "regs"
    parts = [f"{r.registers} {regs}" if r.registers is not None else "registers unknown"]
    if r.occupancy is not None:
        parts.append(f"occupancy {r.occupancy} {r.occupancy_unit}"
                     + (f" (limited by {r.occupancy_limiter})" if r.occupancy_limiter else ""))
    parts.append(f"{(r.shared_bytes or 0) / 1024:.0f} KiB {'LDS' if r.backend == 'hip' else 'shared'}"
                 + (" OVER THE LIMIT" if r.smem_over_limit else ""))
    if r.spills:
        parts.append(f"SPILLS {r.scratch_bytes} B scratch a thread")
    elif r.spilled_registers:
        parts.append(f"{r.spilled_registers} registers spilled into AGPRs")
    if r.widest_load is not None:
        parts.append(f"widest load {r.widest_load} B" + (" (narrow)" if r.narrow else ""))
    if r.mma:
        parts.append(" ".join(f"{n}x {k}" for k, n in r.mma.items()))
    if same_as is not None:
        parts.append(f"same binary as {same_as}")
    if getattr(r, "sibling_of", None) is not None:
        parts.append(f"not compiled itself: the resources of {r.sibling_of} (differs only in the tile order)")
    return ", ".join(parts)


def format_summary(s: CensusSummary, *, examples: int = 3) -> str:
    """What ``flytune census`` prints for one shape."""
    shape = " ".join(f"{k}={v}" for k, v in s.shape.items())
    built = s.configs - s.stored - s.inferred
    rate = f", {built} compile runs in {s.wall_s:.1f} s" if math.isfinite(s.wall_s) else ""
    inferred = (f"; {s.siblings} differ from a compiled config only in the tile order and share its resources "
                f"(--every-config compiles them too)" if s.siblings else "")
    lines = [f"{s.kernel} {shape} {s.dtype} on {s.device} ({s.arch}): {s.configs} configs: {s.compiled} ok, "
             f"{s.failed} failed ({s.stored} from the store{rate}){inferred}"]
    for error, n in sorted(s.errors.items(), key=lambda t: -t[1])[:examples]:
        lines.append(f"  failed x{n}: {error}")

    def some(rows, figure=None) -> str:
        """A few of ``rows``, each with the figure that put it on this line: ``figure(row)``, a short text."""
        shown = ", ".join(f"{r.config} [{figure(r)}]" if figure else str(r.config) for r in rows[:examples])
        return f": {shown}{', ...' if len(rows) > examples else ''}" if rows else ""

    def scratch(r) -> str:
        return f"{r.scratch_bytes} B scratch"

    def shared(r) -> str:
        return f"{(r.shared_bytes or 0) / 1024:g} KiB"

    def widest(r) -> str:
        return f"widest {r.widest_load} B" if r.widest_load else "no global load seen"

    lines.append(f"  distinct binaries: {s.distinct_binaries} ({s.duplicates} configs duplicate another's binary, "
                 f"{len(s.duplicate_groups)} groups)")
    if s.duplicate_groups:
        g = max(s.duplicate_groups, key=len)
        lines.append(f"    e.g. {' == '.join(map(str, g[:3]))}{' == ...' if len(g) > 3 else ''}")
    worst = sorted(s.spilling, key=lambda r: -(r.scratch_bytes or 0))
    lines.append(f"  spill to scratch: {len(s.spilling)}{some(worst, scratch)}")
    if s.spilled_in_registers:
        lines.append(f"  spill VGPRs into AGPRs only (no scratch): {len(s.spilled_in_registers)}"
                     f"{some(s.spilled_in_registers, lambda r: f'{r.spilled_registers} VGPRs')}")
    if any(r._insn("load_bytes") for r in s.rows) or not s.rows:  # a census stored before FlyDSL's were read
        lines.append(f"  no 16-byte loads (narrow): {len(s.narrow)}{some(s.narrow, widest)}")
    else:
        lines.append("  load widths: not read for these binaries")
    limit = "LDS" if s.occupancy_unit.startswith("waves") else "shared memory"
    lines.append(f"  {limit} over the per-block limit: {len(s.smem_over_limit)}{some(s.smem_over_limit, shared)}")
    if s.occupancy_hist:
        lo, hi = min(s.occupancy_hist), max(s.occupancy_hist)
        hist = ", ".join(f"{k}: {v}" for k, v in s.occupancy_hist.items())
        lines.append(f"  occupancy {lo}-{hi} {s.occupancy_unit} (configs per value: {hist})")
    if s.registers:
        lines.append(f"  registers {s.registers[0]}-{s.registers[1]} per thread")
    if s.default is not None:
        lines.append(f"  heuristic default {s.default.config}: {describe(s.default)}")
    return "\n".join(lines)


# -- pruning --------------------------------------------------------------------------------------------------------
def prune(space: Iterable[Config], rows: dict, default: Config | None = None) -> dict[Config, str]:
    """Which configs of ``space`` a sweep need not time, and why: those that spill registers to scratch, and every
    config whose binary is byte-identical to an earlier one's (the heuristic default first, so a duplicate of it is
    the one left out). The default itself is never left out (every result is measured against it), nor a config
    the census has no compiled row for (it failed, timed out, or was not censused: the sweep records what happens).
    ``rows``: Config -> its CensusRow."""
    order = list(dict.fromkeys(([default] if default is not None else []) + list(space)))
    compiled = [(c, r) for c, r in ((c, rows.get(c)) for c in order) if r is not None and r.ok]
    timed = [r for c, r in compiled if c == default or not r.spills]
    first = {r.config: g[0].config for g in same_binary(timed) for r in g[1:]}
    out: dict[Config, str] = {}
    for c, r in compiled:
        if c != default and r.spills:
            out[c] = f"spills to scratch ({r.scratch_bytes} B a thread)"
        elif c in first:
            out[c] = f"same binary as {first[c]}"
    return out
