"""The heuristic default for matmul (zero search), by regime. H200 numbers: 4.8 TB/s HBM, ~990 dense bf16 TFLOP/s
peak (729 measured at 8192^3): below ~300 flops per byte of weight a GEMM is bound by reading w.

- M <= 64 on Hopper (decode, bound by reading w once): the swapped-operand TMA tile (TMA=1, SWAP_AB=1; the kernel
  computes out.T = w @ a.T, so 64 of w's rows fill the warpgroup MMA's 64-row side and M its narrow side), one row
  tile over all of M (BM = next_pow2(M), 16..64), 4 warps. H200, graph replay (benchmarks/results/NVIDIA_H200/
  gemm_swap_ab.md: at 30 shapes of M = 1-64 every pointer tile and K split of the family below, every 64-row
  persistent TMA tile and the swapped tiles of BN 64/128, split 1-4, against cuBLAS):
  - BM <= 32: 64-wide tiles; BK=256 on 4 stages (4 x 32 KiB of w in flight) while the tiles fit one round on the
    SMs, else BK=128 on 4 (two programs a SM); unsplit. Within 1.4% of the family's best at all 18 shapes of
    M = 1-32, and 1.00-1.29x cuBLAS (M=1, N=6144: 14.9 us against 18.7 for the best pointer tile, cuBLAS 16.5;
    M=32, N=4096: 9.3 against 12.7, cuBLAS 11.9). 128-wide tiles won by up to 1.4% at N >= 11008, where the rule
    keeps 64 (they are 1.38-1.52x slower at N=4096); K splits tied or lost there (but see the held-out long K).
  - BM = 64: 128-wide tiles on BK=128 and 4 stages where 64-wide ones would make more than one round; else 64-wide
    ones, BK=128, 5 stages, split in two (4 stages) where half the SMs or fewer get a tile and K is at least
    SWAP_SPLIT_STEPS steps of 128 (M=48, N=4096, K=11008: 28.5 us split against 29.5 unsplit). Within 1% of the
    best at 10 of the 12 shapes of M = 48 and 64, at most 1.054x (M=64, N=4096, K=11008, where the 64-row
    persistent tile 64x32x256 takes 27.3 us; at N=K=4096 it is 1.028x); the 64-row persistent tiles this replaces
    were up to 1.19x the best at M=48 (N=4096, K=11008).
  Held-out model shapes (gemm_swap_heldout.md: Qwen2-7B's 4608x3584, 18944x3584 and 3584x18944, Llama-2-13B's
  15360x5120 and 5120x13824 at M = 1, 8, 32, 48): regret geomean 1.023 at M <= 32 (worst 1.073 at N=3584,
  K=18944, where a K split of 2 wins) and 1.015 at M=48 (worst 1.057); the defaults before it were 1.158 at M=48.
- M <= 64 elsewhere (no TMA, or strides no descriptor takes): one pointer-path row tile over all of M. H200 family
  sweeps under graph replay (benchmarks/results/NVIDIA_H200/gemm_balance.md: every column tile and K split of
  that row tile at 13 shapes, against cuBLAS) decide the rest:
  - When w stays in L2 (up to 0.7 of it: N=5120, K=4096, 40 MiB, took cuBLAS 11.8 us, N=6144's 48 MiB 17.1), the
    time is the L2 traffic: 128-wide column tiles (each re-reads a's rows once: 16 MB at M=64, against 64 MB with
    32-wide ones) and SPLIT_K to give every SM a share of w, the smallest split whose programs fill 90% of the
    SMs' rounds (kit.spaces.wave_use): N=4096 32 tiles split 4 (128 programs), N=5120 40 tiles split 3 (120:
    14.2 us at M=1 against 19.4 for 80 tiles split 2, whose 160 programs leave 40% of a second round idle).
  - When it does not (HBM-bound), one round of the narrowest of 64/128-wide tiles, unsplit where it fills 60% of
    the SMs: N=11008 86 tiles of 128 (28.6 us at M=1, the best of 63; 172 tiles of 64: 30.9; split 3 over all the
    SMs: 29.1), N=6144 96 tiles of 64 with BK=256 (19.5 against the best 19.1). BK=256 on 64-wide tiles, else
    128; 4 warps, 4 stages.
  - 64-row tiles take one round of the narrowest 32/64-wide tiles, BK=128 and 5 stages, unsplit (M=64: N=4096 128
    tiles of 32, 11.9 us against 14.6 for split 4 of 128-wide ones; N=6144 96 tiles of 64, 18.2 against 25.7
    split 2); beyond 64 x SMs columns 64-wide tiles with BK=64, 4 warps, 5 stages (N=14336, M=48: 42.3 us, the best
    of that sweep; N=11008, M=64: 28.5, 1.004x the family's best).
  Where a tile grid fills under 80% of the SMs in the branches that split, SPLIT_K is the smallest split that
  fills 90% (kit.spaces.split_k_options bounds it, and offers the non-power-of-two splits that balance).
- 64 < M <= 512 on Hopper, first: 64x128x128 tiles on the persistent TMA path (4 warps, 4 stages) where 128x128
  tiles keep under 80% of the SMs' rounds busy and 64x128 ones at least 10 points more. H200, graph replay
  (benchmarks/results/NVIDIA_H200/gemm_mid_rule.md, 23 shapes at M = 96-512, 150-204 configs each: every row and
  column tile of 64-256 on both paths, the pointer path's K splits): it takes M=128, N=4096 (64 tiles for 132 SMs,
  13.9 us against 15.2 for the pointer 128x32x128 it replaces), M=256, N=11008 (344 tiles in 2.6 rounds against
  172 of 128x128 in 1.3: 43.5 us against 47.3) and M=256, K=11008 (39.0 against 43.5 for 128x64x128 tiles); the
  default is the family's best, or within 6% of it, at 21 of those 23 shapes. The two others are M=96 and 128 at
  N=4096, K=11008 (1.13x and 1.11x the best, a pointer 128x64x128 split 2, as the pointer default was before).
  Where both tile sizes fill the rounds alike (M=256, N=6144: 96 against 192 tiles, 73% each) the wider tile wins
  (25.7 against 28.5 us) and the rules below decide.
- 64 < M <= 128 otherwise: one 128-row tile. On Hopper, once 128x64 tiles fill more than half the SMs, the
  persistent TMA path: 128x64x128 on 4 warps, 4 stages while those tiles make one round, else 128x128x64 on 4
  warps, 5 stages (N=11008: 29.7 against 36.8 for the pointer 128x32x128; N=28672: 66.5 against 74.4, and cuBLAS
  68.4). Fewer tiles, off Hopper or without TMA, keep the pointer path, which can split K: 8 warps, BK=64 with 4
  stages, or BK=128 with 5 stages when BN=32 (N=4096, M=96/128: 22.3-22.5 us against 37.3 with BK=64). A rule
  capping BM at 64 (BN 64) was 1.86x the best at M=96/128, N=14336: two 64-row tiles read w's 117 MB twice (the
  64x128x128 rule leaves that shape alone: 128x128 tiles fill 85% of a round there).
- M > 128 on Hopper (the persistent TMA path, TMA=2; benchmarks/results/NVIDIA_H200/gemm_paths.md: 0.94-0.98x cuBLAS
  from M=1024 against 0.77-0.82x for pointer tiles), by how well each tile size fills the SMs' rounds
  (kit.spaces.wave_use). H200 sweeps, L2 flushed (benchmarks/results/NVIDIA_H200/stores/gemm_mid_m.db, M=128-512 on
  N,K = 4096,4096 / 12288,4096 / 14336,4096 / 4096,14336):
  128x256x64 on 8 warps, 3 stages (4 would not fit beside the output tile the TMA store stages) when its tiles fill
  >= 90% (M=1024/4096, N=4096: the fastest of 13 tiles x 3 paths); else 128x128x64 on 4 warps when those fill >= 90%
  over more than one round, with 5 stages up to three rounds (M=512, N=12288: 384 tiles, 77.6 against 85.2 us with
  4) and 4 beyond (M=1024, N=14336: 896 tiles, 175.2 us); else, one round of 128x128 tiles filling >= 90%, that
  tile on 8 warps with 5 stages (M=512, N=4096: 30.9 us, against 33.3 for the pointer tile); else 128x64x128 tiles
  on 4 warps, 4 stages when those fill >= 90% and 128x128 ones make at most one round (M=256, N=4096: 128 tiles,
  24.5 us, the sweep's best; up to M = 512 the 64x128x128 rule above takes such shapes first). Otherwise no tile
  size fills the rounds, and 128x128x64 on 4 warps, 5 stages takes the partial round (M=512, N=14336: 102.1 us,
  the sweep's best; M=256, N=12288: 56.3, 1.08x that sweep's best;
  M=256, N=14336: 58.7 us on 8 warps in the sweep, and on 4 warps 52.2 us under graph replay against 57.1 for the
  committed 4-stage export, benchmarks/results/NVIDIA_H200/serving_vs_torch.md).
  Stream-K (STREAM_K=1, in the space for the search) is never the default. Its kernel walks whole rounds of tiles
  first and cuts only the last round into K ranges; under graph replay at 15 shapes of M = 128-1024
  (benchmarks/results/NVIDIA_H200/gemm_persistent_variants.md) that is up to 1.46x faster than cutting every tile
  (0.99x at worst), yet behind the persistent kernel's best at 14 of the 15 (M=256, N=11008: 0.749x cuBLAS against
  0.829x; the one win is M=1024, N=14336, 0.924x against 0.921x): cut programs re-enter their K loop at every tile
  and write and read back fp32 partials of up to two tiles (128 KiB for 128x256). Triton 3.6's automatic warp
  specialization (tl.range(warp_specialize=True)) on the persistent loop measured 0.96-1.07x the plain kernel on
  the same tile there (median 1.00), so it is not a knob either.
- 128 < M <= 512 on Hopper, where the rules above give 128x128x64 tiles (on 4 or 8 warps, 4 or 5 stages) and K is
  at least 6 steps of 64: the same tile with DIRECT_STORE=1 on 4 warps and 6 stages. Stored from registers, the output tile needs none of the 32 KiB
  of shared memory a TMA store stages it in, and that holds a sixth stage of operands. On an H100, side by side with
  cuBLAS (benchmarks/results/NVIDIA_H100_80GB_HBM3/gemm_direct_store.md): M=512, N=4096, K=11008 67.9 us against
  76.1 (0.89x), M=512, N=28672 191.5 against 197.9 under graph replay and 179.2 against 193.9 L2 flushed, M=256,
  N=6144 26.4 against 27.9; the worst of the 8 shapes 1.019x (M=512, N=11008, graph; 0.962x flushed). At M=1024
  it was 0.97-1.03x, so the staged tile stays there. The tile choice above was fitted on H200 sweeps of staged tiles
  only (the tests check it there with this step off).
- 64 < M <= 1024 on Hopper, last: where the persistent pick's tiles leave half the SMs or more idle, the same tile
  on TMA=1 with K split in the fewest ranges that fill 90% of the rounds (M=128, N=4096: 64 tiles of 64x128 split
  in two, 10.9 us against 12.5 unsplit, cuBLAS 12.5; at K=11008 30.1 against 36.8, cuBLAS 31.1; H200, graph replay,
  benchmarks/results/NVIDIA_H200/gemm_mid_tiles.md; L2 flushed 20.4 against 22.9, cuBLAS 19.1, and a 24-config
  search under flushed events found nothing faster at M=96 and 128). Where the tiles fill more than half,
  splitting lost there (M=256, N=11008: 128x128 tiles split 2, 0.58x cuBLAS against 0.80x unsplit: the fp32
  partials cost more than the idle SMs), and so did 192-wide tiles as two TMA boxes (0.79x).
- M > 128 elsewhere (no TMA): 128x128x64 tiles on 4 warps, 3 stages, grouped by 8 row tiles so neighbouring programs
  reuse w's panel in L2 (the classic 128x256 on 8 warps was 1.14-1.17x behind on the exhaustive H200 sweeps at
  M=1024 and 4096, tests/fixtures/h200_gemm_sweeps.json). When 128x128 tiles would fill at most half the SMs, the
  row tile halves to 64 and the K tile deepens to 128 with 4 stages on 8 warps (M=256, N=4096: 128 tiles; the
  sweep's best there); at most one wave runs one CTA per SM, on 8 warps with 5 stages. On HIP (64 KiB LDS)
  128x128x64 on 4 warps, matrix_instr_nonkdim 16, waves_per_eu 2.
The wish is then landed on the nearest config of the pruned space (fewer stages first, then a thinner K tile, then
narrower N/M tiles), so the default is always one the sweep also times.
"""
from __future__ import annotations

from flytune_nb.kit import Config, itemsize
from flytune_nb.kit.spaces import TILE_WEIGHTS, has_tma, nearest, next_pow2, split_k_options, wave_use

from .configs import SWAP_AB_UP_TO_M, TMA_SPLIT_UP_TO_M, configs

FILLED = 0.9  # a tile grid that keeps this share of the SMs' rounds busy needs no K splitting
# 64-row tiles for 64 < M <= 512 on Hopper: where 128x128 tiles keep under 80% of the SMs' rounds busy and 64x128
# ones at least 10 points more (benchmarks/results/NVIDIA_H200/gemm_mid_rule.md)
NARROW_UP_TO_M, NARROW_BELOW, NARROW_GAIN = 512, 0.8, 0.1
# 64-row swapped tiles split K in two where half the SMs or fewer get a tile and K is 64+ steps of 128 deep
# (M=48, N=4096, K=11008: 28.5 us against 29.5 unsplit; benchmarks/results/NVIDIA_H200/gemm_swap_ab.md)
SWAP_SPLIT_STEPS = 64
SPLIT_BELOW = 0.6  # one round of tiles filling this share of the SMs is not split (w from HBM, or 64-row tiles)
# Graph replay of one GEMM keeps up to ~2/3 of the H200's 60 MiB L2 resident: w of N=5120, K=4096 (40 MiB) took
# cuBLAS 11.8 us, N=6144 (48 MiB) 17.1 (benchmarks/results/NVIDIA_H200/gemm_balance.md)
L2_RESIDENT = 0.7
# Up to this M the persistent 128x128x64 picks store their output from registers (DIRECT_STORE) and pipeline 6
# stages deep on 4 warps: 0.967x the staged tile's time under graph replay (geomean, worst 1.019x) and 0.960x L2
# flushed (worst 0.990x) at the 8 such shapes of M = 256-512 on an H100; at M=1024 0.97-1.03x, so not there
# (benchmarks/results/NVIDIA_H100_80GB_HBM3/gemm_direct_store.md). The space has that config where K is at least
# DEEP_K_STEPS steps of 64 deep; at shorter K the staged pick stays.
DEEP_UP_TO_M, DEEP_K_STEPS = 512, 6


def _split(tiles: int, K: int, bk: int, bm: int, bn: int, dtype_bytes: int, N: int, sms: int) -> int:
    """The smallest split whose programs fill 90% of the SMs' rounds (tiles x split >= 0.9 x SMs, and balanced:
    kit.spaces.wave_use), when the tiles fill under 80%; else the allowed split with the best balance; 1 when the
    tiles fill the SMs or no split is allowed."""
    if tiles >= 0.8 * sms:
        return 1
    options = split_k_options(tiles, -(-K // bk), sms, partial_bytes=4 * bm * bn * tiles,
                              weight_bytes=N * K * dtype_bytes)
    for s in options:
        if tiles * s >= FILLED * sms and wave_use(tiles * s, sms) >= FILLED:
            return s
    return max(options, key=lambda s: (wave_use(tiles * s, sms), -s)) if options else 1


def _one_round(M: int, N: int, bm: int, widths, sms: int) -> int | None:
    """The narrowest of ``widths`` whose tiles all run in one round (at most one per SM), or None."""
    return next((bn for bn in widths if -(-M // bm) * -(-N // bn) <= sms), None)


def _weight_bound(M: int, N: int, K: int, dtype_bytes: int, device) -> tuple:
    """(BM, BN, BK, warps, stages, SPLIT_K) for M <= 128 on the pointer path; see the module docstring."""
    sms = max(device.sm_count, 1)
    bm = min(128, max(16, next_pow2(M)))
    rows = -(-M // bm)
    in_l2 = N * K * dtype_bytes <= device.l2_bytes * L2_RESIDENT
    if bm == 64:
        bn = _one_round(M, N, bm, (32, 64), sms)
        if bn is not None and rows * -(-N // bn) >= SPLIT_BELOW * sms:  # one round, no split, the deepest pipeline
            return bm, bn, 128, 4, 5, 1
    if bm <= 32 and not in_l2:
        bn = min(_one_round(M, N, bm, (64, 128), sms) or 128, max(32, next_pow2(N)))
        tiles = rows * -(-N // bn)
        bk = 256 if bn <= 64 else 128
        split = _split(tiles, K, bk, bm, bn, dtype_bytes, N, sms) if tiles < SPLIT_BELOW * sms else 1
        if tiles * split > sms:  # more than one program per SM: shorter K tiles
            bk = 128
        return bm, bn, bk, 4, 4, split
    if bm <= 64 and in_l2:
        bn = min(128, max(32, next_pow2(N)))  # w stays in L2: the wide tile, and splits to fill the SMs
    else:
        bn = 256
        while bn > (32 if bm == 128 else 64) and rows * -(-N // bn) < FILLED * sms:
            bn //= 2
        bn = min(bn, max(32, next_pow2(N)))
    tiles = rows * -(-N // bn)
    if bm <= 32:  # 256-deep K tiles while 4 stages of them fit beside a 64-wide w tile (160 KiB)
        bk = 256 if bn <= 64 else 128
        split = _split(tiles, K, bk, bm, bn, dtype_bytes, N, sms)
        if tiles * split > sms:  # more than one program per SM: shorter K tiles
            bk = 128
        return bm, bn, bk, 4, 4, split
    if bm == 64:
        split = _split(tiles, K, 128, bm, bn, dtype_bytes, N, sms)
        return (bm, bn, 128, 4, 4, split) if split > 1 else (bm, bn, 64, 4, 5, 1)
    bk, stages = (128, 5) if bn <= 32 else (64, 4)
    return bm, bn, bk, 8, stages, _split(tiles, K, bk, bm, bn, dtype_bytes, N, sms)


def _swapped_decode(M: int, N: int, K: int, sms: int) -> tuple:
    """M <= 64 on Hopper: (BM, BN, BK, warps, stages, knobs) of the swapped-operand TMA tile; see the module
    docstring."""
    bm = max(16, next_pow2(M))
    t64 = _tiles(M, N, bm, 64)
    knobs = {"TMA": 1, "SWAP_AB": 1}
    if bm <= 32:  # one program per SM: 4 x 32 KiB of w in flight; two a SM: 4 x 16 KiB each
        return bm, 64, 256 if t64 <= sms else 128, 4, 4, knobs
    if t64 > sms:
        return bm, 128, 128, 4, 4, knobs
    if 2 * t64 <= sms and K // 128 >= SWAP_SPLIT_STEPS:
        return bm, 64, 128, 4, 4, {**knobs, "SPLIT_K": 2}
    return bm, 64, 128, 4, 5, knobs


def _persistent_rows(M: int, N: int, sms: int) -> tuple | None:
    """64 < M <= 128 on Hopper: (BM, BN, BK, warps, stages, knobs) on the persistent TMA path when 128x64 tiles
    fill more than half the SMs, else None (the pointer path, which can split K); see the module docstring."""
    t64 = _tiles(M, N, 128, 64)
    if 2 * t64 <= sms:
        return None
    if t64 <= sms:
        return 128, 64, 128, 4, 4, {"TMA": 2}
    return 128, 128, 64, 4, 5, {"TMA": 2}


def _narrow_rows(M: int, N: int, sms: int) -> tuple | None:
    """64 < M <= 512 on Hopper: 64x128x128 tiles on the persistent TMA path (4 warps, 4 stages) where they fill the
    SMs' rounds clearly better than 128x128 tiles, which fill few; else None. See the module docstring."""
    narrow, wide = wave_use(_tiles(M, N, 64, 128), sms), wave_use(_tiles(M, N, 128, 128), sms)
    if wide < NARROW_BELOW and narrow >= wide + NARROW_GAIN:
        return 64, 128, 128, 4, 4, {"TMA": 2}
    return None


def _split_when_half_idle(M: int, N: int, K: int, dtype, sms: int, pick: tuple) -> tuple:
    """A persistent TMA pick whose tiles leave half the SMs or more idle, up to M = TMA_SPLIT_UP_TO_M: the same tile
    on TMA=1 with K split in the smallest number of ranges that fills 90% of the SMs' rounds (the space's splits);
    otherwise ``pick`` unchanged. See the module docstring."""
    bm, bn, bk, warps, stages, knobs = pick
    tiles = _tiles(M, N, bm, bn)
    if M > TMA_SPLIT_UP_TO_M or 2 * tiles > sms:
        return pick
    options = split_k_options(tiles, -(-K // bk), sms, partial_bytes=4 * bm * bn * tiles,
                              weight_bytes=N * K * itemsize(dtype))
    split = next((s for s in options if wave_use(tiles * s, sms) >= FILLED), None)
    if split is None:
        return pick
    return bm, bn, bk, warps, min(stages, 4), {"TMA": 1, "SPLIT_K": split}


def _tiles(M: int, N: int, bm: int, bn: int) -> int:
    return -(-M // bm) * -(-N // bn)


def _persistent(M: int, N: int, K: int, sms: int) -> tuple:
    """(BM, BN, BK, warps, stages, TMA knobs) for M > 128 on Hopper; see the module docstring."""
    pick = _persistent_tile(M, N, sms)
    if M <= DEEP_UP_TO_M and pick[:3] == (128, 128, 64) and -(-K // 64) >= DEEP_K_STEPS:
        return 128, 128, 64, 4, 6, {"TMA": 2, "DIRECT_STORE": 1}
    return pick


def _persistent_tile(M: int, N: int, sms: int) -> tuple:
    """The persistent pick with its output tile staged for a TMA store (what _persistent deepens up to
    DEEP_UP_TO_M)."""
    t256, t128, t64 = _tiles(M, N, 128, 256), _tiles(M, N, 128, 128), _tiles(M, N, 128, 64)
    if wave_use(t256, sms) >= FILLED:
        return 128, 256, 64, 8, 3, {"TMA": 2}
    if t128 > sms and wave_use(t128, sms) >= FILLED:
        return 128, 128, 64, 4, 5 if t128 <= 3 * sms else 4, {"TMA": 2}
    if wave_use(t128, sms) >= FILLED:  # one round of 128x128 tiles: one CTA per SM
        return 128, 128, 64, 8, 5, {"TMA": 2}
    if t128 <= sms and wave_use(t64, sms) >= FILLED:  # small problems only: a 128x64 tile reuses little
        return 128, 64, 128, 4, 4, {"TMA": 2}
    return 128, 128, 64, 4, 5, {"TMA": 2}


def default(shape, dtype, device) -> Config:
    M, N, K = shape["M"], shape["N"], shape["K"]
    # GROUP_SIZE_M 8 everywhere: column-major over up to 8 row tiles, so the row tiles of one w panel run together
    extra = {}  # the load path and K splitting: pointers, whole K, unless a rule below says otherwise
    tma_ok = has_tma(device) and (K * itemsize(dtype)) % 16 == 0 and (N * itemsize(dtype)) % 16 == 0
    sms = max(device.sm_count, 1)
    rows_tma = None
    if tma_ok and M <= SWAP_AB_UP_TO_M:
        rows_tma = _swapped_decode(M, N, K, sms)
    elif tma_ok and M <= NARROW_UP_TO_M:
        rows_tma = _narrow_rows(M, N, sms)
    if rows_tma is None and SWAP_AB_UP_TO_M < M <= 128 and tma_ok:
        rows_tma = _persistent_rows(M, N, sms)
    if rows_tma is not None and M > SWAP_AB_UP_TO_M:
        rows_tma = _split_when_half_idle(M, N, K, dtype, sms, rows_tma)
    if rows_tma is not None:
        bm, bn, bk, warps, stages, extra = rows_tma
    elif M <= 128:
        bm, bn, bk, warps, stages, split = _weight_bound(M, N, K, itemsize(dtype), device)
        if split > 1 and device.backend != "hip":  # split-K's reduction is not yet checked on an AMD GPU
            extra = {"SPLIT_K": split}
    elif device.backend == "hip":
        bm, bn, bk, warps, stages = 128, 128, 64, 4, 2
    elif tma_ok:
        bm, bn, bk, warps, stages, extra = _split_when_half_idle(M, N, K, dtype, sms, _persistent(M, N, K, sms))
    else:
        bm, bn, bk, warps, stages = 128, 128, 64, 4, 3
        tiles = _tiles(M, N, bm, bn)
        if 2 * tiles <= device.sm_count:
            bm, bk, warps, stages = 64, 128, 8, 4
        elif tiles <= device.sm_count:  # one CTA per SM: 8 warps and 5 stages hide latency that 2 CTAs would
            warps, stages = 8, 5
    # a pointer split is one row tile in one wave: no order to choose. A TMA split has several row tiles, whose
    # programs must read each w panel together (M=128, N=K=4096: 18.9 us row-major, 10.9 grouped; configs.py)
    group = 1 if extra.get("SPLIT_K") and not extra.get("TMA") else 8
    wish = Config({"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": group, **extra},
                  num_warps=warps, num_stages=stages)
    if device.backend == "hip":
        wish = wish.replace(matrix_instr_nonkdim=16, waves_per_eu=2)
    space = configs(shape, dtype, device)
    # the nearest tile of the same path (load path, split or not, stream-K or not), if the space has that path here
    same = [c for c in space if _path(c) == _path(wish)]
    return nearest(same or space, wish, {**TILE_WEIGHTS, "SPLIT_K": 1.0})


def _path(c: Config) -> tuple:
    # DIRECT_STORE too: nearest() weighs knobs by log2, where DIRECT_STORE=1 and its absence are the same distance
    return c.get("TMA", 0), c.get("SWAP_AB", 0), c.get("STREAM_K", 0), c.get("SPLIT_K", 1) > 1, c.get("DIRECT_STORE", 0)
