"""Census rows as plain data: what a row says about its config, the summary, pruning, and the store's census table."""
import math

import pytest

from flytune_nb.core.config import Config
from flytune_nb.engine.store import Store
from flytune_nb.analysis.resources import census_frame
from flytune_nb.measure.census import SMALL_STACK_BYTES, CensusRow, format_summary, prune, same_binary, summarise


def amd_kernel(vgpr_alloc=84, scratch=0, spills=0, occupancy=4, shared=16384, loads=None, mfma=None):
    return {"name": "k", "num_warps": 4, "shared": shared, "vgprs": vgpr_alloc - 8, "agprs": 0, "sgprs": 30,
            "vgpr_alloc": vgpr_alloc, "vgpr_spills": spills, "sgpr_spills": 0, "scratch_bytes": scratch,
            "occupancy": occupancy, "occupancy_limiter": "vgprs", "smem_over_limit": shared > 65536,
            "insn": {"mfma": mfma or {"v_mfma_f32_16x16x16_bf16": 64}, "mma_total": 64,
                     "load_bytes": loads or {"16": 8}, "wide_loads": (loads or {"16": 8}).get("16", 0),
                     "narrow_loads": sum(n for w, n in (loads or {}).items() if int(w) < 16), "lds_reads": 16,
                     "lds_writes": 8, "s_waitcnt": 20}}


def nv_kernel(regs=128, stack=0, occupancy=8):
    return {"name": "k", "num_warps": 4, "shared": 65536, "regs": regs, "stack_bytes": stack, "local_bytes": 0,
            "scratch_bytes": stack, "occupancy": occupancy, "occupancy_limiter": "registers",
            "smem_over_limit": False, "insn": {"mma": {"wgmma.mma_async.m64n128k16": 8}, "mma_total": 8,
                                               "load_bytes": {"16": 4}, "wide_loads": 4, "narrow_loads": 0}}


def row(config, kernels=(), backend="hip", status="ok", binary="b0", is_default=False, error=""):
    dev, arch, unit = ("AMD_Instinct_MI300X", "gfx942", "waves/SIMD") if backend == "hip" else (
        "NVIDIA_H200", "sm_90", "warps/SM")
    return CensusRow("matmul", {"M": 64, "N": 4096, "K": 4096}, "bf16", dev, arch, backend, config, status, error,
                     0.5, binary if status == "ok" else None, tuple(kernels), is_default, unit)


def cfg(bm, warps=4, **hip):
    return Config({"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": 64}, num_warps=warps, num_stages=2, **hip)


def test_a_row_reads_the_configs_most_constrained_kernel():
    """fused_moe launches two GEMMs: the row reports the worst of them (most registers, least occupancy, summed
    instruction counts), and spills when either does."""
    r = row(cfg(64), [amd_kernel(vgpr_alloc=84, occupancy=6), amd_kernel(vgpr_alloc=169, occupancy=2, scratch=24,
                                                                         spills=5)])
    assert (r.registers, r.occupancy, r.scratch_bytes, r.spilled_registers) == (169, 2, 24, 5)
    assert r.spills and r.mma == {"v_mfma_f32_16x16x16_bf16": 128} and r.insn_total("lds_reads") == 32
    assert not row(cfg(64), [amd_kernel()]).spills
    # VGPRs spilled into AGPRs (gfx90a and newer): moves, no scratch memory
    into_agprs = row(cfg(64), [amd_kernel(spills=4)])
    assert into_agprs.spilled_registers == 4 and not into_agprs.spills


def test_narrow_means_no_16_byte_load_at_all():
    """A row kernel on wave64 with BLOCK_N=256 on 4 waves loads 2 bytes a lane; fused_moe's 4-byte token-id loads
    beside its 16-byte tile loads are not narrow."""
    assert row(cfg(64), [amd_kernel(loads={"2": 6})]).narrow
    assert row(cfg(64), [amd_kernel(loads={"2": 6})]).widest_load == 2
    assert not row(cfg(64), [amd_kernel(loads={"4": 6, "16": 36})]).narrow
    assert row(cfg(64), [nv_kernel()]).widest_load == 16


def test_nvidia_spills_only_above_a_calls_register_saves():
    assert not row(cfg(64), [nv_kernel(stack=SMALL_STACK_BYTES)], backend="cuda").spills
    assert row(cfg(64), [nv_kernel(regs=255, stack=3328)], backend="cuda").spills
    assert row(cfg(64), [nv_kernel()], backend="cuda").spilled_registers is None


def test_a_failed_row_has_no_resources_and_never_spills():
    r = row(cfg(64), status="error", error="CompilationError: at 3:4: boom")
    assert not r.ok and not r.spills and r.registers is None and r.occupancy is None and r.binary is None


def test_same_binary_groups_the_compiled_rows_by_binary_in_their_order():
    """What the summary's duplicate groups, prune's "same binary as" and the census tab's column all read."""
    a, b, c, d, e, f = cfg(16), cfg(32), cfg(64), cfg(128), cfg(256), cfg(16, 8)
    rows = [row(a, binary="y"), row(b, binary="x"), row(c, binary="y"), row(d, status="error"),
            row(e, binary=None),  # a schedule-knob sibling: another config's resources, no binary of its own
            row(f, binary="x")]
    assert [[r.config for r in g] for g in same_binary(rows)] == [[a, c], [b, f]]
    assert [[r.config for r in g] for g in same_binary(rows[::-1])] == [[f, b], [c, a]]


def test_summary_counts_what_an_engineer_asks_first():
    a, b, c, d, e = cfg(16), cfg(32), cfg(64), cfg(128), cfg(16, 8)
    rows = [row(a, [amd_kernel(occupancy=8)], binary="x", is_default=True),
            row(b, [amd_kernel(occupancy=8)], binary="x"),  # same binary as the default
            row(c, [amd_kernel(vgpr_alloc=256, scratch=244, spills=60, occupancy=2)], binary="y"),
            row(d, [amd_kernel(loads={"4": 4}, occupancy=4, spills=3)], binary="z"),
            row(e, status="error", error="CompilationError: nope")]
    s = summarise(rows, wall_s=2.0, stored=1)
    assert (s.configs, s.compiled, s.failed, s.distinct_binaries, s.duplicates) == (5, 4, 1, 3, 1)
    assert s.duplicate_groups == [[a, b]] and [r.config for r in s.spilling] == [c]
    assert [r.config for r in s.narrow] == [d] and s.occupancy_hist == {2: 1, 4: 1, 8: 2}
    assert s.registers == (84, 256) and s.default.config == a and s.errors == {"error: CompilationError: nope": 1}
    assert [r.config for r in s.spilled_in_registers] == [d]
    text = format_summary(s)
    for part in ("5 configs: 4 ok, 1 failed", "1 configs duplicate", "spill to scratch: 1", "244 B scratch",
                 "narrow): 1", "occupancy 2-8 waves/SIMD", "heuristic default", "CompilationError: nope",
                 "into AGPRs only (no scratch): 1"):
        assert part in text, part
    with pytest.raises(ValueError):
        summarise([])


def test_prune_drops_spills_and_duplicates_never_the_default_or_an_uncensused_config():
    dflt, twin, spill, other, failed, unknown = cfg(64), cfg(64, 8), cfg(128), cfg(32), cfg(16), cfg(256)
    rows = {dflt: row(dflt, [amd_kernel()], binary="d", is_default=True),
            twin: row(twin, [amd_kernel()], binary="d"),
            spill: row(spill, [amd_kernel(scratch=24, spills=5)], binary="s"),
            other: row(other, [amd_kernel()], binary="o"),
            failed: row(failed, status="timeout")}
    space = [twin, spill, other, failed, unknown]  # the default's twin comes first in the space
    dropped = prune(space, rows, dflt)
    assert set(dropped) == {twin, spill}
    assert dropped[twin] == f"same binary as {dflt}" and dropped[spill].startswith("spills to scratch (24 B")
    # without a default, the first config of a binary is the one kept
    assert set(prune([dflt, twin], rows)) == {twin}
    # a spilling default is still timed: every result is measured against it
    rows[dflt] = row(dflt, [amd_kernel(scratch=8, spills=1)], binary="d", is_default=True)
    assert dflt not in prune(space + [dflt], rows, dflt)


def test_the_store_keeps_census_rows_beside_the_trials_and_reads_them_back(tmp_path):
    store = Store(tmp_path / "c.db")
    r1 = row(cfg(64, waves_per_eu=2, matrix_instr_nonkdim=16), [amd_kernel(vgpr_alloc=169, occupancy=2)],
             is_default=True)
    r2 = row(cfg(32), status="error", error="CompilationError: x")
    for r in (r1, r2):
        store.add_census(r, key="k1", toolchain={"triton": "3.6.0"}, source="abc")
    store.add_census(row(cfg(16), [nv_kernel()], backend="cuda"), key="k2")
    back = store.census_for("k1")
    assert set(back) == {r1.config, r2.config}
    got = back[r1.config]
    assert (got.registers, got.occupancy, got.is_default, got.kernels, got.occupancy_unit) == (
        169, 2, True, r1.kernels, "waves/SIMD")
    assert math.isclose(got.compile_s, 0.5) and back[r2.config].error == "CompilationError: x"
    store.add_census(r1, key="k1")  # same config again: replaced, not duplicated
    assert store.count("census") == 3
    # the kernel's rows in the order stored, the replaced one last, read as the tuning key's are
    assert [(r.config, r.device) for r in store.census_rows("matmul")] == [
        (r2.config, "AMD_Instinct_MI300X"), (cfg(16), "NVIDIA_H200"), (r1.config, "AMD_Instinct_MI300X")]
    assert store.census_rows("matmul")[2] == back[r1.config] and store.census_rows("rmsnorm") == []

    df = census_frame(store, "matmul", device="mi300x")
    assert len(df) == 2 and set(df["status"]) == {"ok", "error"} and list(df["M"].unique()) == [64]
    assert df.loc[df["status"] == "ok", "registers"].iloc[0] == 169 and "waves_per_eu" in df.columns
    assert len(census_frame(tmp_path / "c.db", "matmul", shape={"M": 64, "N": 4096, "K": 4096})) == 3
    assert census_frame(store, "matmul", device="h200")["registers"].tolist() == [128]
    assert census_frame(store, "matmul", dtype="fp16").empty
    store.close()
