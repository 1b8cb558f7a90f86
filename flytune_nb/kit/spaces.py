"""Small helpers kernels use to write their spaces and heuristics (powers of two, lanes per warp, HIP knobs)."""
from __future__ import annotations

import functools
import math
from itertools import product
from typing import Iterable

from flytune_nb._compat.triton import host_tma_supported
from flytune_nb.errors import UsageError
from flytune_nb.core.config import Config, ConfigError
from flytune_nb.core.device import DeviceInfo
from flytune_nb.core.dtypes import itemsize

# Tiled (GEMM-like) kernels: pruning rules shared by matmul and fused_moe.
UNKNOWN_SMEM = 96 * 1024  # interpreter: a floor every current datacenter GPU meets
# vLLM's ROCm rule: one copy of the A and B tiles must fit the LDS, 64 KiB on gfx942 (MI300X / MI325X). A HIP device
# that reports its LDS (every real one: 160 KiB on gfx950, MI350X / MI355X) is held to what it reports.
HIP_LDS = 64 * 1024
ACC_PER_THREAD = (4, 128)  # fp32 accumulators per thread: above 128 they spill, below 4 most warps only wait
# HIP: operand elements (A + B tile) a lane loads per K step. The 40 one-wave fused_moe configs of the ROCm space
# above 256 (Mixtral M=64, gfx942) needed 318-512 VGPRs (1 wave per SIMD); 4 spilled to scratch (64x128x128: 276 B
# a lane) and 8 more spilled VGPRs into AGPRs (64x64x256, 128x16x128). The 124 at or below it: at most 356 VGPRs,
# none spilled. 2, 4 and 8 waves never pass it within 64 KiB of LDS.
HIP_OPERANDS_PER_LANE = 256
# HIP: MFMA instruction shapes Triton selects with matrix_instr_nonkdim (16: 16x16xK, 32: 32x32xK). 4, 8 and 64 are
# accepted and emit no MFMA at all (the dot falls back to FMA code: 512 VGPRs and 2600 B of scratch for a 128x128x64
# tile on gfx942); 32 on a tile narrower than 32 still emits 32x32 MFMAs that compute mostly padding (16x64x64 on 4
# warps: 124 VGPRs and occupancy 4 against 56 VGPRs with 16). Both census figures: Triton 3.6, gfx942.
MFMA_NONKDIM = (16, 32)
# Wave64 loads: a lane that holds fewer than 16 bytes of a row per load issues 2-, 4- or 8-byte loads instead of one
# 16-byte buffer_load_dwordx4 (rmsnorm, BLOCK_N=256: 8 B on 1 wave, 4 on 2, 2 on 4; 46 of the 86 MI300X configs at
# N=4096 had no 16-byte load).
WIDE_LOAD_BYTES = 16
# The same on GEMM tiles (wide_loads): when the wider operand tile (max(BM, BN) x BK) holds fewer than 16 bytes per
# lane of the block, no load of the K loop is 16 bytes wide. The whole matmul space at M=N=K=4096 for gfx942
# (Triton 3.6, bf16): 272 of 1892 configs had no 16-byte load, exactly those with max(BM, BN) * BK < 8 elements per
# lane (16x64x16 and 32x32x32 tiles on 4 warps, 64x64x32 on 8, ...); every config at or above it had one.
# What moving a tile knob away from a heuristic's wish costs in nearest() (per doubling): stages are the cheapest to
# give up, then a thinner K tile, then narrower N / M tiles.
TILE_WEIGHTS = {"num_stages": 0.25, "BLOCK_SIZE_K": 0.5, "GROUP_SIZE_M": 0.25, "BLOCK_SIZE_N": 1.0,
                "BLOCK_SIZE_M": 1.5, "num_warps": 1.0}


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for host code. Triton 3.6's ``triton.cdiv`` is a ConstexprFunction: 1.6 us a call from Python on
    this project's CPUs, two of them a matmul call (its tile count), against 0.05 us for this."""
    return -(-a // b)


def next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def prev_pow2(n: int) -> int:
    """The largest power of two <= n (1 for n < 1)."""
    return 1 << max(0, int(n).bit_length() - 1) if n >= 1 else 1


def pow2_between(lo: int, hi: int) -> list[int]:
    """Powers of two p with lo <= p <= hi."""
    out, p = [], next_pow2(lo)
    while p <= hi:
        out.append(p)
        p *= 2
    return out


def lanes(device: DeviceInfo) -> int:
    """Threads per warp: 64 on AMD CDNA (wave64), 32 on NVIDIA."""
    return 64 if device.backend == "hip" else 32


def max_warps(device: DeviceInfo) -> int:
    # 1024 threads per block on both vendors: 32 warps of 32 on NVIDIA, 16 waves of 64 on AMD.
    return 1024 // lanes(device)


def with_hip_knobs(configs: Iterable[Config], device: DeviceInfo,
                   waves_per_eu: Iterable[int | None] = (None, 2)) -> list[Config]:
    """On HIP, cross every config with ``waves_per_eu``, keeping only the ``matrix_instr_nonkdim`` its MMA tile
    can use (``mfma_fits``); elsewhere unchanged, so the AMD-only knobs never reach a CUDA launch. ``None`` leaves
    the option unset, which is Triton's default (0: the compiler picks occupancy); it is not also listed as 0, which
    would time the same binary twice, and it keeps the heuristic default in the space."""
    configs = list(configs)
    if device.backend != "hip":
        return configs
    return [c.replace(waves_per_eu=w) for c, w in product(configs, waves_per_eu) if mfma_fits(c)]


def mfma_fits(config: Config) -> bool:
    """Whether ``config``'s ``matrix_instr_nonkdim`` selects an MFMA shape its tile can fill: unset, or 16 / 32 with
    the 32 only on tiles at least 32 wide in both M and N (SGLang's GEMM knob names BLOCK_SIZE_M / BLOCK_SIZE_N;
    a config without them is not a tiled MMA and passes)."""
    nonkdim = config.matrix_instr_nonkdim
    if nonkdim is None or nonkdim == 0:
        return True
    if nonkdim not in MFMA_NONKDIM:
        return False
    tile = [config.get(k) for k in ("BLOCK_SIZE_M", "BLOCK_SIZE_N") if config.get(k) is not None]
    return not tile or min(tile) >= nonkdim


def tile_smem(bm: int, bn: int, bk: int, stages: int, dtype: str, backend: str) -> int:
    """Shared memory a tiled MMA loop keeps: num_stages copies of the A (bm x bk) and B (bk x bn) tiles on CUDA; on
    HIP the stream pipeliner keeps one copy in LDS."""
    tile = (bm * bk + bk * bn) * itemsize(dtype)
    return tile if backend == "hip" else stages * tile


def tile_fits(bm: int, bn: int, bk: int, warps: int, stages: int, dtype: str, device: DeviceInfo, *,
              store_tile: bool = False, idle_warps: bool = False) -> bool:
    """``store_tile``: the epilogue also stages the (bm x bn) output tile in shared memory, as a TMA store does
    (128x256x64 on 4 stages: 192 KiB of operands + 64 KiB of output, over the H200's 227 KiB; Triton refuses it).
    ``idle_warps``: accept fewer than ACC_PER_THREAD[0] accumulators per thread (a shape whose every tile is that
    small, N=32 at decode on wave64: 16x32 on 4 warps holds 2 a thread, would otherwise have no tile at all)."""
    hip = device.backend == "hip"
    limit = device.smem_bytes or (HIP_LDS if hip else UNKNOWN_SMEM)
    acc = bm * bn / (lanes(device) * warps)
    smem = tile_smem(bm, bn, bk, stages, dtype, device.backend) + (bm * bn * itemsize(dtype) if store_tile else 0)
    if hip and (bm * bk + bk * bn) / (lanes(device) * warps) > HIP_OPERANDS_PER_LANE:
        return False
    return smem <= limit and (idle_warps or ACC_PER_THREAD[0] <= acc) and acc <= ACC_PER_THREAD[1]


def wide_loads(bm: int, bn: int, bk: int, warps: int, dtype: str, device: DeviceInfo) -> bool:
    """HIP: the wider operand tile gives every lane of the block at least one 16-byte load (WIDE_LOAD_BYTES);
    always True elsewhere."""
    if device.backend != "hip":
        return True
    return max(bm, bn) * bk * itemsize(dtype) >= WIDE_LOAD_BYTES * lanes(device) * warps


def prefer_wide_loads(configs: list, dtype: str, device: DeviceInfo) -> list:
    """``configs`` (GEMM tiles: BLOCK_SIZE_M/N/K, num_warps) without those whose loads are all narrow, unless that
    leaves none: a shape too small for any wide tile (M=N=K=32 on gfx942: every tile of at most 32x32x32 on 4 or 8
    warps) keeps what it has."""
    wide = [c for c in configs if wide_loads(c["BLOCK_SIZE_M"], c["BLOCK_SIZE_N"], c["BLOCK_SIZE_K"], c.num_warps,
                                             dtype, device)]
    return wide or list(configs)


@functools.lru_cache(maxsize=None)  # a launcher asks on every TMA call; DeviceInfo is frozen, so it can key this
def has_tma(device: DeviceInfo) -> bool:
    """Hopper's tensor memory accelerator (CUDA sm_90 and newer), with a Triton that has host-side tensor
    descriptors and flattened loops (3.4 and newer; pyproject allows older ones)."""
    digits = "".join(ch for ch in device.arch if ch.isdigit())
    return device.backend == "cuda" and int(digits or 0) >= 90 and host_tma_supported()


def block_k_options(K: int, device: DeviceInfo, choices=(16, 32, 64, 128, 256)) -> list[int]:
    """BLOCK_SIZE_K values worth timing: <= next_pow2(K); 16/32 only where K itself is that small or on HIP (whose
    64 KiB LDS needs thin K tiles for big M/N tiles); when K is a multiple of 64, only divisors of K, so the
    unmasked EVEN_K loop is the one timed."""
    cap = max(16, next_pow2(K))
    out = [b for b in choices if b <= cap and (b >= 64 or cap <= 64 or device.backend == "hip")]
    if K % 64 == 0:
        out = [b for b in out if K % b == 0]
    return out


def wave_use(tiles: int, sms: int) -> float:
    """The share of the SMs' rounds that ``tiles`` equal programs keep busy, one per SM at a time: 448 tiles on 132
    SMs take 4 rounds for 3.39 of work (0.85); 896 take 7 for 6.79 (0.97); 112 fill 0.85 of one."""
    sms = max(sms, 1)
    return tiles / (sms * -(-tiles // sms)) if tiles > 0 else 0.0


SPLITS = (2, 4, 8, 16)
# other splits, offered only where they balance the programs over the SMs: 40 tiles (N=5120 on 128-wide tiles)
# split 3 make 120 programs for 132 SMs, where 2 and 4 leave 40% of a round idle (H200, M=1, graph replay: 14.2 us
# against 16.7 and 16.6; benchmarks/results/NVIDIA_H200/gemm_balance.md)
BALANCING_SPLITS = (3, 5, 6, 12)
BALANCED = 0.9  # the share of the SMs' rounds a balancing split must keep busy


def split_k_options(tiles: int, k_steps: int, sms: int, *, partial_bytes: int, weight_bytes: int,
                    splits=SPLITS) -> list[int]:
    """SPLIT_K values worth timing for a tile grid that leaves SMs idle (``tiles`` < ``sms``): each split keeps at
    least two K steps (a pipeline needs something to overlap), the splits fill at most four waves (beyond that the
    tiles already did), and the fp32 partials (``partial_bytes`` per split) stay under a quarter of the weight's
    bytes, which the split exists to stream faster; besides ``splits``, the BALANCING_SPLITS whose programs keep
    BALANCED of the SMs' rounds busy. None where the tiles fill the SMs already. Ascending."""
    if tiles >= sms:
        return []
    extra = [s for s in BALANCING_SPLITS if wave_use(tiles * s, sms) >= BALANCED]
    return sorted(s for s in {*splits, *extra} if k_steps // s >= 2 and tiles * s <= 4 * sms
                  and s * partial_bytes <= weight_bytes / 4)


def group_options(tiles_m: int, groups=(1, 8, 16, 32)) -> list[int]:
    """GROUP_SIZE_M values that give distinct tile orders: only 1 with a single row of tiles; otherwise 1, those
    below the number of row tiles, and the smallest at or above it (every such value gives the same column-major
    order)."""
    if tiles_m <= 1:
        return [1]
    big = [g for g in groups if g > 1]
    return [1] + [g for g in big if g < tiles_m] + [g for g in big if g >= tiles_m][:1]


def nearest(space: Iterable[Config], target: Config, weights: dict[str, float] | None = None) -> Config:
    """The config of ``space`` closest to ``target``: sum over knobs of weight * |log2 ratio| (a missing or unset
    knob counts as 1). Heuristics state what they want and let this land it inside the pruned space, so the default
    is always a config the sweep also times. Ties go to the earlier config of the space."""
    weights = weights or {}
    want = target.to_dict()

    def dist(c: Config) -> float:
        have = c.to_dict()
        return sum(weights.get(k, 1.0) * abs(math.log2(max(have.get(k) or 1, 1)) - math.log2(max(want.get(k) or 1, 1)))
                   for k in set(want) | set(have))

    space = list(space)
    if not space:
        raise UsageError("empty search space")
    return min(space, key=dist)


MULTI_ROW_BYTES = 16 * 1024  # a BLOCK_M-row program holds at most this much of each row tensor


def row_space(shape: dict, dtype: str, device: DeviceInfo, *, max_single_bytes: int, max_elems_per_thread: int,
              min_block: int = 256, max_block: int = 8192, looped_stages=(1, 2)) -> list[Config]:
    """The space of a row kernel with a ``BLOCK_N`` knob (single pass when BLOCK_N >= N, else looped): the whole row
    while it fits ``max_single_bytes``; looped blocks from ``min_block`` up to half the row (capped at
    ``max_block``), with ``looped_stages`` (pipelining only matters when looped); warps such that each thread holds
    between 1 and ``max_elems_per_thread`` elements (tiny rows: one warp, some lanes idle). A single pass may also
    take BLOCK_M > 1 rows per program, while BLOCK_M rows fit MULTI_ROW_BYTES and BLOCK_M <= next_pow2(M): N=1024
    bf16 adds 2, 4 and 8 rows, N=4096 adds 2, N >= 8192 none. BLOCK_M=1 is left out of the config, so the configs of
    one-row kernels (stored trials, exported files) keep their names. HIP adds waves_per_eu."""
    N, M, es = shape["N"], shape["M"], itemsize(dtype)
    full = next_pow2(N)
    # wave64: each lane's share of a looped block must fill one 16-byte load (512 bf16 columns on 64 lanes)
    wide = WIDE_LOAD_BYTES // es if device.backend == "hip" else 0
    out = []
    if full * es <= max_single_bytes:
        for rows in pow2_between(1, max(1, min(next_pow2(M), MULTI_ROW_BYTES // (full * es)))):
            out += _warps(full * rows, (1,), {"BLOCK_N": full, "BLOCK_M": rows} if rows > 1 else {"BLOCK_N": full},
                          device, max_elems_per_thread, wide)
    for block in pow2_between(max(min_block, wide * lanes(device)), min(full // 2, max_block)):
        out += _warps(block, looped_stages, {"BLOCK_N": block}, device, max_elems_per_thread, wide)
    return with_hip_knobs(out, device)


def row_blocks(config: Config, N: int) -> tuple[int, int]:
    """(BLOCK_N, BLOCK_M) of a row kernel's config for rows of N. BLOCK_M > 1 exists only in the single pass: with
    BLOCK_N < N the kernels would normalise the first BLOCK_N columns and leave the rest of the output unwritten, so
    such a config (hand-written, edited into a heuristic or a file) is refused here, before anything launches."""
    block, rows = config["BLOCK_N"], config.get("BLOCK_M", 1)
    if rows > 1 and block < N:
        raise ConfigError(f"BLOCK_M={rows} needs a single pass (BLOCK_N >= N={N}), got BLOCK_N={block}")
    return block, rows


def _warps(elems: int, stages, params: dict, device: DeviceInfo, max_elems_per_thread: int,
           min_elems_per_thread: int = 0) -> list[Config]:
    """Warps for a block of ``elems``: each thread holds at most ``max_elems_per_thread`` and at least 1 (at least
    ``min_elems_per_thread``, one wide load, where that is asked); one warp whatever it holds when no count does."""
    out = []
    for warps in pow2_between(1, max_warps(device)):
        ept = elems / (warps * lanes(device))
        if (ept >= max(1, min_elems_per_thread) or warps == 1) and ept <= max_elems_per_thread:
            out += [Config(params, num_warps=warps, num_stages=s) for s in stages]
    return out


# Row kernels written for AMD's CDNA GPUs (the FlyDSL norms): one workgroup per row, the row held in registers.
WAVE = 64  # CDNA (gfx942, gfx950) runs 64-lane waves


def vector_widths(N: int, dtype: str) -> list[int]:
    """Elements per vector access along a row of N: a 16-byte and an 8-byte vector where they divide N (accesses never
    straddle a row's end), else the widest power of two that does (1 at least)."""
    es = itemsize(dtype)
    out = [v for v in (16 // es, 8 // es) if v >= 1 and N % v == 0]
    if not out:
        v = max(1, 16 // es)
        while N % v:
            v //= 2
        out = [v]
    return list(dict.fromkeys(out))


def cached_per_thread(N: int, threads: int, vec: int) -> int:
    """Row elements each thread keeps in registers: whole vectors, the ragged last one included."""
    return -(-N // (threads * vec)) * vec


def wave_row_space(shape: dict, dtype: str, *, max_cached: int = 32,
                   waves_per_eu=(None, 2, 4, 8)) -> list[Config]:
    """(BLOCK_THREADS, VEC) x waves_per_eu for a one-workgroup-per-row kernel: BLOCK_THREADS a power of two from one
    wave to 1024, VEC from ``vector_widths``; kept while each thread caches at most ``max_cached`` elements (32:
    bf16 N=4096 compiles to 13-64 VGPRs without a spill on gfx942 and gfx950, 80 VGPRs at 64 elements) and at least
    half the threads have a vector to load. A row too wide for that keeps 1024 threads (it spills, but it is
    right). ``waves_per_eu`` is a compile hint FlyDSL always takes (its kernels only run on AMD); None leaves it to
    the compiler. No num_warps or num_stages: FlyDSL has neither."""
    N, out = shape["N"], []
    for vec in vector_widths(N, dtype):
        fits = [t for t in pow2_between(WAVE, 1024)
                if cached_per_thread(N, t, vec) <= max_cached and (t == WAVE or t * vec <= 2 * N)]
        for threads in fits or [1024]:
            out += [Config({"BLOCK_THREADS": threads, "VEC": vec}, num_warps=None, num_stages=None, waves_per_eu=w)
                    for w in waves_per_eu]
    return out


def wave_row_threads(N: int, vec: int, cached: int) -> int:
    """The fewest threads (a power of two, one wave to 1024) at which each caches at most ``cached`` elements."""
    threads = WAVE
    while threads < 1024 and cached_per_thread(N, threads, vec) > cached:
        threads *= 2
    return threads
