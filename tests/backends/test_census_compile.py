"""Real compiles for GPUs this machine does not have (gfx942 = MI300X, gfx950 = MI355X, sm_90 = H200), read back
from Triton's own output: each test pins one census finding with the config that shows it, so a Triton release or a
parser change that loses it fails here, on the CPU. Binaries are cached across runs (tests/conftest.CENSUS_CACHE)."""
import pytest

from flytune_nb.core.config import Config
from flytune_nb.core.targets import TARGETS
from flytune_nb.engine.census_pool import take_census
from tests.conftest import triton_is_pinned

MATMUL = {"M": 4096, "N": 4096, "K": 4096}
ROWS = {"M": 64, "N": 4096}


@pytest.fixture(scope="module")
def pools(census_pools):
    """The folder's census processes of each target, all started at once (each imports torch and Triton: seconds)."""
    for alias in ("mi300x", "mi355x", "h200"):
        census_pools[alias].start()
    return census_pools


def census(pool, kernel, shape, *configs):
    s = take_census(pool, kernel, shape, "bf16", configs=list(configs))
    rows = {r.config: r for r in s.rows}
    for c in configs:
        assert rows[c].ok, (c, rows[c].error)
    return [rows[c] for c in configs]


def mm(bm, bn, bk, warps, group=1, stages=2, **hip):
    return Config({"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": group},
                  num_warps=warps, num_stages=stages, **hip)


def test_row_kernel_load_widths_on_wave64_and_identical_looped_stages(pools):
    """rmsnorm at N=4096 on gfx942: a 256-wide looped block gives each of 64 lanes 4 bf16 values (8 B) on one wave
    and 1 (2 B) on four; the whole row on 4 waves gives 16-byte loads. Looped num_stages 1 and 2 build the same
    binary; 2 and 4 waves do not."""
    narrow1, narrow4, wide, s1, s2 = census(
        pools["mi300x"], "rmsnorm", ROWS, Config({"BLOCK_N": 256}, num_warps=1, num_stages=1),
        Config({"BLOCK_N": 256}, num_warps=4, num_stages=1), Config({"BLOCK_N": 4096}, num_warps=4, num_stages=1),
        Config({"BLOCK_N": 1024}, num_warps=2, num_stages=1), Config({"BLOCK_N": 1024}, num_warps=2, num_stages=2))
    assert (narrow1.widest_load, narrow4.widest_load, wide.widest_load) == (8, 2, 16)
    assert narrow1.narrow and narrow4.narrow and not wide.narrow
    assert s1.binary == s2.binary and s1.binary != narrow4.binary and wide.binary != narrow4.binary
    assert not any(r.spills for r in (narrow1, narrow4, wide))


def test_nonkdim_32_on_a_16_row_tile_emits_32x32_mfma_and_waves_per_eu_pads_the_descriptor(pools):
    """matmul 16x64x64 on 4 waves, gfx942: nonkdim 16 -> 16x16x16 MFMAs, 32 -> 32x32x8 ones over mostly padding,
    with more registers and lower occupancy. waves_per_eu=2 makes LLVM allocate the 2-wave register budget, which
    the descriptor-based occupancy shows (the bare register count of the code would say 8)."""
    k16, k32, w2 = census(pools["mi300x"], "matmul", MATMUL, mm(16, 64, 64, 4, matrix_instr_nonkdim=16),
                          mm(16, 64, 64, 4, matrix_instr_nonkdim=32),
                          mm(16, 64, 64, 4, matrix_instr_nonkdim=16, waves_per_eu=2))
    assert set(k16.mma) == {"v_mfma_f32_16x16x16_bf16"} and set(k32.mma) == {"v_mfma_f32_32x32x8_bf16"}
    assert k32.registers > k16.registers and k32.occupancy < k16.occupancy
    assert w2.registers >= 169 and w2.occupancy == 2 and w2.kernels[0]["occupancy_llvm"] == 2
    assert w2.binary != k16.binary and w2.mma == k16.mma


def test_one_wave_moe_tiles_spill_on_gfx942(pools):
    """fused_moe (Mixtral, M=64) on one wave: a 64x128x128 tile spills to scratch in both GEMMs (512 VGPRs); a
    64x64x256 one spills VGPRs into AGPRs only (moves, no scratch), which is not a spill to scratch."""
    scratch, agprs = census(pools["mi300x"], "fused_moe", {"M": 64, "E": 8, "N": 14336, "K": 4096, "topk": 2},
                            mm(64, 128, 128, 1), mm(64, 64, 256, 1))
    assert len(scratch.kernels) == 2 and scratch.spills and scratch.scratch_bytes > 0
    assert scratch.registers == 512 and scratch.occupancy == 1
    if triton_is_pinned():  # Triton 3.7.1's allocator spills this one to scratch as well
        assert agprs.spilled_registers > 0 and not agprs.spills and agprs.scratch_bytes == 0


def test_a_128_kib_tile_fits_gfx950_lds_and_not_gfx942s(pools):
    """matmul 256x256x128 on 8 waves: 128 KiB of LDS. gfx950 (160 KiB): no spills, occupancy 2. gfx942 compiles it
    too (LDS overflow is not a compile error) but it would not load: over the limit, occupancy 0."""
    tile = mm(256, 256, 128, 8, matrix_instr_nonkdim=16)
    (on950,) = census(pools["mi355x"], "matmul", MATMUL, tile)
    (on942,) = census(pools["mi300x"], "matmul", MATMUL, tile)
    assert on950.shared_bytes == 131072 and not on950.smem_over_limit
    if triton_is_pinned():  # Triton 3.7.1's allocator spills it on gfx950
        assert not on950.spills
    assert on950.occupancy == 2 and set(on950.mma) == {"v_mfma_f32_16x16x32_bf16"}
    assert on942.shared_bytes == 131072 and on942.smem_over_limit and on942.occupancy == 0


def test_h200_registers_and_spills_come_from_the_cubin(pools):
    """sm_90: the heuristic default (128x256 on the persistent TMA path) uses wgmma and no stack; a 256x256x64 tile
    on 4 warps needs more than 255 registers and spills to the stack frame."""
    from flytune_nb.core.registry import get_kernel

    default = get_kernel("matmul").default(MATMUL, "bf16", TARGETS["h200"].device())
    d, big = census(pools["h200"], "matmul", MATMUL, default, mm(256, 256, 64, 4, group=8, stages=3))
    assert d.occupancy_unit == "warps/SM" and 0 < d.registers <= 255 and not d.spills
    assert any(k.startswith("wgmma.mma_async") for k in d.mma) and d.kernels[0]["insn"]["tma_loads"] > 0
    assert big.registers == 255 and big.spills and big.scratch_bytes > 64


def test_a_direct_store_at_an_unaligned_n_stages_its_tile_and_the_space_leaves_out_what_then_overflows(pools):
    """sm_90: a 256x64x64 persistent tile on 5 stages storing from registers fits the H200's shared memory where N
    is a multiple of 16 and not where it is not: the register store then converts the accumulator through shared
    memory, at least half its output tile more (the whole tile beyond the operand pipeline). The space offers it at
    the first N and not at the second, and a sample of the DIRECT_STORE configs it offers at the second (every 8th
    of 142: all of them take ~30 s to compile here) compiles within it."""
    from flytune_nb.core.registry import get_kernel

    spec, h200 = get_kernel("matmul"), TARGETS["h200"].device()
    tile = Config({"BLOCK_SIZE_M": 256, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1, "TMA": 2,
                   "DIRECT_STORE": 1}, num_warps=4, num_stages=5)
    aligned, unaligned = {"M": 1024, "N": 11008, "K": 4096}, {"M": 1024, "N": 11000, "K": 4096}
    (fits,), (over,) = census(pools["h200"], "matmul", aligned, tile), census(pools["h200"], "matmul", unaligned, tile)
    assert not fits.smem_over_limit and over.smem_over_limit
    assert over.shared_bytes - fits.shared_bytes >= 256 * 64 * 2 // 2
    assert tile in spec.configs(aligned, "bf16", h200) and tile not in spec.configs(unaligned, "bf16", h200)
    offered = [c for c in spec.configs(unaligned, "bf16", h200) if c.get("DIRECT_STORE")][::8]
    assert offered and not [r.config for r in census(pools["h200"], "matmul", unaligned, *offered)
                            if r.smem_over_limit]
