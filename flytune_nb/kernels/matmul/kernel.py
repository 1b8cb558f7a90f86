"""GEMM in Triton: out = a @ w.T, a (M, K) activations, w (N, K) a linear layer's weight, fp32 accumulation.

One program per (BLOCK_SIZE_M x BLOCK_SIZE_N) output tile, tiles visited in groups of GROUP_SIZE_M rows so that
consecutive programs share w's column panel in L2 (GROUP_SIZE_M=1 is plain row-major order). Rows of a and w past
M / N are wrapped (``% M``) rather than masked, so the inner loop's loads stay unmasked; only the store is masked.
EVEN_K drops the K mask when BLOCK_SIZE_K divides K, the common case for model dimensions.

TMA (a knob, absent = 0) picks the load path on Hopper: 1 loads the same tiles through host-side TMA descriptors, 2 does
that in a persistent kernel (one program per SM). On the H200, bf16, K=4096
(benchmarks/results/NVIDIA_H200/gemm_paths.md) TMA=2 with 128x256x64 tiles on 8 warps ran at 0.97-0.98x cuBLAS for
M=4096 against 0.77-0.79x for the best pointer config of the same list: the pointer loop's address arithmetic and
cp.async waits cost more than the MMA's issue slots can hide; TMA issues each tile as one bulk copy.

SWAP_AB=1 (with TMA=1) is the decode path on Hopper: the kernel computes out.T = w @ a.T, so a 64-row slice of w
fills the warpgroup MMA's 64-row side and the few rows of a (BLOCK_SIZE_M = 16..64) its narrow side, both loaded
through TMA descriptors, one program per output tile (times SPLIT_K). Without it a decode tile pads M=1 to 16 rows
of a 16-row MMA fed by pointer loads. On the H200 at M <= 32 (benchmarks/results/NVIDIA_H200/gemm_swap_ab.md) its best
tile was 1.05-1.37x faster than the best pointer tile at all 18 shapes, and 1.00-1.29x cuBLAS. BLOCK_SIZE_M /
BLOCK_SIZE_N keep their meaning (the tile's extent along M and along N), so where TMA is unavailable the same config
runs the pointer kernel.

Two knobs spread K over more programs when the output tiles alone would leave SMs idle (both absent = off):

- SPLIT_K=S (pointer path, and TMA=1 one tile a program): each tile's K loop is cut into S programs. At decode
  sizes a weight of N=K=4096 makes 64 tiles of 16x64 for 132 SMs; split in 2 every SM streams its share of w. At
  M=128, N=K=4096 the TMA path's 64 tiles of 64x128 split in 2 took 10.9 us against 12.5 on the persistent path
  (H200, graph replay; benchmarks/results/NVIDIA_H200/gemm_mid_tiles.md).
- STREAM_K=1 (persistent TMA path, TMA=2): the programs share out the (tile, K step) iterations evenly, so the last
  wave is never partly idle: M=256, N=14336 makes 112 tiles of 128x256 for 132 SMs (85% busy); stream-K gives each
  program 54.3 of the 7168 iterations. On the H200 it lost wherever the sweeps timed it but one shape (83.4 us there
  against 58.7 for 128x128 tiles without it), so the heuristic never picks it; the search still may.

Both reduce a tile cut between programs the same deterministic way, in one launch: every program that holds part of
a tile stores its fp32 partial in a scratch buffer, then increments the tile's arrival counter (acq_rel); the one
that arrives last reads all parts back (its own too) and sums them in a fixed order (by split, or by program id),
stores the tile in the output dtype and resets the counter to zero. Nothing waits on another program (no spin, so
no deadlock when programs are not all resident, e.g. beside NCCL kernels), nothing accumulates with atomics (the same
inputs give the same bits every call), and no memset precedes the launch: the counters stay zero between calls
(flytune_nb.kit.scratch).

Two knobs of the TMA path trade the epilogue's shared memory for a deeper pipeline or occupancy (both absent = off;
benchmarks/gemm_direct_store.py times them). The space offers DIRECT_STORE one stage deeper than a persistent tile's
staged configs, and the heuristic picks it for 128x128x64 tiles at 128 < M <= 512 (configs.py, heuristic.py);
CTAS_PER_SM=2 was never the fastest variant timed and is only reachable by naming it:

- DIRECT_STORE=1 (TMA=1 and TMA=2 tiles; the stream-K and swapped-operand kernels ignore it) stores the output
  tile from the accumulator's registers instead of staging it in shared memory for a TMA store. A 128x128x64 tile
  on 3 stages then takes 98,328 bytes instead of 131,096 on sm_90 (TMA=1; 106,520 persistent; Triton 3.6,
  `flytune census matmul --target h200`), so two programs fit an SM's 227 KiB; a 128x256x64 tile fits 4 stages
  (229,408 bytes) instead of 3.
- CTAS_PER_SM=2 (TMA=2 without stream-K; ignored elsewhere) launches two persistent programs an SM instead of one.

Each kernel writes its TMA K loop out: moved into one shared @triton.jit helper, the stream-K kernel's 128x256 tile
compiled to 254 registers a thread instead of 174 (sm_90, Triton 3.6; `flytune census matmul --target h200`).

UPCAST is for Triton's CPU interpreter only: it runs tl.dot through numpy, which has no bfloat16, and a bf16 dot
there returns garbage (max error 2.6e10 on a 16x16 product, Triton 3.6). On a GPU it is always False, so the compiled
kernel is the plain bf16 MMA.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from flytune_nb._compat.triton import descriptor_maker
from flytune_nb.kit import Config, current_device, launch
from flytune_nb.kit.scratch import scratch
from flytune_nb.kit.spaces import cdiv, has_tma


@triton.jit
def _tile_of(tile, num_pid_m, num_pid_n, GROUP_SIZE_M: tl.constexpr):
    """(row tile, column tile) of linear tile ``tile`` in the grouped order."""
    in_group = GROUP_SIZE_M * num_pid_n
    first_m = (tile // in_group) * GROUP_SIZE_M
    group_m = min(num_pid_m - first_m, GROUP_SIZE_M)
    return first_m + (tile % in_group) % group_m, (tile % in_group) // group_m


@triton.jit
def _last_to_arrive(acc, WS, LOCKS, tile, part_slot, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr):
    """Store this program's partial of ``tile`` in slot ``part_slot`` of the scratch and count it in; True for the
    program whose part completes the tile (it then reads the others)."""
    offs = tl.arange(0, BLOCK_SIZE_M)[:, None] * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)[None, :]
    tl.store(WS + tl.cast(part_slot, tl.int64) * (BLOCK_SIZE_M * BLOCK_SIZE_N) + offs, acc)
    tl.debug_barrier()  # every thread's part is stored before the release below publishes it
    return tl.atomic_add(LOCKS + tile, 1, sem="acq_rel", scope="gpu")


@triton.jit
def _read_part(WS, part_slot, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr):
    offs = tl.arange(0, BLOCK_SIZE_M)[:, None] * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)[None, :]
    # .cg: from L2, where the other SMs' stores landed; this SM's L1 may hold the slot from an earlier call
    return tl.load(WS + tl.cast(part_slot, tl.int64) * (BLOCK_SIZE_M * BLOCK_SIZE_N) + offs, cache_modifier=".cg")


@triton.jit
def matmul_kernel(A, W, C, WS, LOCKS, M, N, K, stride_am, stride_ak, stride_wn, stride_wk, stride_cm, stride_cn,
                  BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
                  GROUP_SIZE_M: tl.constexpr, SPLIT_K: tl.constexpr, EVEN_K: tl.constexpr, UPCAST: tl.constexpr):
    pid = tl.program_id(0)
    split = pid % SPLIT_K  # the splits of one tile are neighbours: they run together and finish together
    tile = pid // SPLIT_K
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    pid_m, pid_n = _tile_of(tile, num_pid_m, num_pid_n, GROUP_SIZE_M)
    # int64 from here: row * stride overflows int32 once M*N or M*K passes 2^31 (an LM head, N=152k, at M=16k).
    pid_m = pid_m.to(tl.int64)
    pid_n = pid_n.to(tl.int64)
    k_tiles = tl.cdiv(K, BLOCK_SIZE_K)
    k_lo = split * k_tiles // SPLIT_K  # balanced: the splits' step counts differ by at most one
    k_hi = (split + 1) * k_tiles // SPLIT_K

    offs_m = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
    offs_n = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    offs_k = k_lo * BLOCK_SIZE_K + tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = A + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    w_ptrs = W + offs_k[:, None] * stride_wk + offs_n[None, :] * stride_wn  # a (K, N) view of w
    acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(k_lo, k_hi):
        if EVEN_K:
            a = tl.load(a_ptrs)
            w = tl.load(w_ptrs)
        else:
            k_left = K - k * BLOCK_SIZE_K
            a = tl.load(a_ptrs, mask=tl.arange(0, BLOCK_SIZE_K)[None, :] < k_left, other=0.0)
            w = tl.load(w_ptrs, mask=tl.arange(0, BLOCK_SIZE_K)[:, None] < k_left, other=0.0)
        if UPCAST:
            a = a.to(tl.float32)
            w = w.to(tl.float32)
        acc = tl.dot(a, w, acc)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        w_ptrs += BLOCK_SIZE_K * stride_wk

    rows = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    cols = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_mask = (rows[:, None] < M) & (cols[None, :] < N)
    if SPLIT_K == 1:
        tl.store(C + rows[:, None] * stride_cm + cols[None, :] * stride_cn, acc.to(C.dtype.element_ty), mask=c_mask)
    else:
        if _last_to_arrive(acc, WS, LOCKS, tile, pid, BLOCK_SIZE_M, BLOCK_SIZE_N) == SPLIT_K - 1:
            # split order, whoever arrived last: the same sum every call. Its own part is read back too, so the
            # sum never mixes the accumulator's MMA layout with the loads' (a layout change through shared memory)
            total = _read_part(WS, tile * SPLIT_K, BLOCK_SIZE_M, BLOCK_SIZE_N)
            for s in tl.static_range(1, SPLIT_K):
                total += _read_part(WS, tile * SPLIT_K + s, BLOCK_SIZE_M, BLOCK_SIZE_N)
            tl.store(C + rows[:, None] * stride_cm + cols[None, :] * stride_cn, total.to(C.dtype.element_ty),
                     mask=c_mask)
            tl.atomic_xchg(LOCKS + tile, 0)  # zero again for the next call


@triton.jit
def _store_tile(C, stride_cm, stride_cn, off_m, off_n, tile, M, N, BLOCK_SIZE_M: tl.constexpr,
                BLOCK_SIZE_N: tl.constexpr):
    """Store an output tile straight from registers (masked at M and N), with no shared-memory staging."""
    rows = (off_m + tl.arange(0, BLOCK_SIZE_M)).to(tl.int64)
    cols = (off_n + tl.arange(0, BLOCK_SIZE_N)).to(tl.int64)
    tl.store(C + rows[:, None] * stride_cm + cols[None, :] * stride_cn, tile.to(C.dtype.element_ty),
             mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit
def matmul_tma_kernel(a_desc, w_desc, c_desc, C, stride_cm, stride_cn, WS, LOCKS, M, N, K, programs,
                      BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
                      GROUP_SIZE_M: tl.constexpr, PERSISTENT: tl.constexpr, SPLIT_K: tl.constexpr,
                      DIRECT_STORE: tl.constexpr, UPCAST: tl.constexpr):
    """The same tiles through Hopper's tensor memory accelerator: each K step is two bulk copies into shared memory
    (edges zero-filled, the store clipped by the hardware), so no thread computes an address or a mask. PERSISTENT:
    ``programs`` programs (one per SM, or CTAS_PER_SM per SM) walk the tiles in steps of ``programs``: no tail
    wave, and the next tile's loads overlap this tile's epilogue. ``programs`` is a runtime argument, so a new M
    never compiles a new kernel.
    Otherwise one program per tile, or per (tile, K range) with SPLIT_K > 1 (never with PERSISTENT), reduced as the
    pointer kernel reduces its splits. DIRECT_STORE: the output tile goes from registers to memory with plain
    stores instead of a TMA store, which stages it in shared memory (BLOCK_SIZE_M x BLOCK_SIZE_N x 2 bytes beside
    the pipeline's buffers: 32 KiB for 128x128 in bf16)."""
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    k_tiles = tl.cdiv(K, BLOCK_SIZE_K)
    if PERSISTENT:
        start, stop, step = tl.program_id(0), num_pid_m * num_pid_n, programs
    else:
        start, stop, step = tl.program_id(0) // SPLIT_K, tl.program_id(0) // SPLIT_K + 1, 1
    split = tl.program_id(0) % SPLIT_K
    k_lo = split * k_tiles // SPLIT_K
    k_hi = (split + 1) * k_tiles // SPLIT_K
    for tile in tl.range(start, stop, step, flatten=PERSISTENT):
        pid_m, pid_n = _tile_of(tile, num_pid_m, num_pid_n, GROUP_SIZE_M)
        off_m = pid_m * BLOCK_SIZE_M
        off_n = pid_n * BLOCK_SIZE_N
        acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
        for k in range(k_lo, k_hi):
            a = a_desc.load([off_m, k * BLOCK_SIZE_K])
            w = w_desc.load([off_n, k * BLOCK_SIZE_K])
            if UPCAST:
                a = a.to(tl.float32)
                w = w.to(tl.float32)
            acc = tl.dot(a, w.T, acc)
        if SPLIT_K == 1:
            if DIRECT_STORE:
                _store_tile(C, stride_cm, stride_cn, off_m, off_n, acc, M, N, BLOCK_SIZE_M, BLOCK_SIZE_N)
            else:
                c_desc.store([off_m, off_n], acc.to(c_desc.dtype))
        else:
            if _last_to_arrive(acc, WS, LOCKS, tile, tl.program_id(0), BLOCK_SIZE_M, BLOCK_SIZE_N) == SPLIT_K - 1:
                total = _read_part(WS, tile * SPLIT_K, BLOCK_SIZE_M, BLOCK_SIZE_N)
                for s in tl.static_range(1, SPLIT_K):
                    total += _read_part(WS, tile * SPLIT_K + s, BLOCK_SIZE_M, BLOCK_SIZE_N)
                if DIRECT_STORE:
                    _store_tile(C, stride_cm, stride_cn, off_m, off_n, total, M, N, BLOCK_SIZE_M, BLOCK_SIZE_N)
                else:
                    c_desc.store([off_m, off_n], total.to(c_desc.dtype))
                tl.atomic_xchg(LOCKS + tile, 0)


@triton.jit
def matmul_stream_k_kernel(a_desc, w_desc, c_desc, WS, LOCKS, M, N, K, programs, dp_tiles,
                           BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
                           GROUP_SIZE_M: tl.constexpr, UPCAST: tl.constexpr):
    """Persistent TMA GEMM, stream-K after whole waves: the first ``dp_tiles`` tiles (a multiple of ``programs``) are
    walked whole, as in the persistent kernel; only the remaining tiles' tiles x K-steps iterations are cut into
    ``programs`` contiguous ranges of equal length (to one step), one per program, which walks its range tile by
    tile. dp_tiles = 0 is plain stream-K. A tile wholly inside one range
    is stored directly; a tile cut between ranges (at most two per program: its first and its last) is reduced by
    whichever of its programs arrives last, in program order. Program p's range starts at floor(p * total /
    programs), so the program holding iteration i is ((i + 1) * programs - 1) // total: every program can find the
    others' parts of a tile without a table. Needs total >= programs (the launcher caps programs), so that no range is
    empty and every tile's counter reaches its part count."""
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    k_tiles = tl.cdiv(K, BLOCK_SIZE_K)
    for tile in tl.range(pid, dp_tiles, programs, flatten=True):
        pid_m, pid_n = _tile_of(tile, num_pid_m, num_pid_n, GROUP_SIZE_M)
        acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
        for k in range(k_tiles):
            a = a_desc.load([pid_m * BLOCK_SIZE_M, k * BLOCK_SIZE_K])
            w = w_desc.load([pid_n * BLOCK_SIZE_N, k * BLOCK_SIZE_K])
            if UPCAST:
                a = a.to(tl.float32)
                w = w.to(tl.float32)
            acc = tl.dot(a, w.T, acc)
        c_desc.store([pid_m * BLOCK_SIZE_M, pid_n * BLOCK_SIZE_N], acc.to(c_desc.dtype))
    # int64: tiles * steps * programs passes 2^31 at M=16k
    total = (num_pid_m * num_pid_n - dp_tiles).to(tl.int64) * k_tiles
    start = pid * total // programs
    end = (pid + 1) * total // programs
    it = start
    while it < end:
        tile = (it // k_tiles).to(tl.int32)
        k0 = (it - tile.to(tl.int64) * k_tiles).to(tl.int32)
        k1 = tl.minimum(k_tiles, k0 + (end - it)).to(tl.int32)
        pid_m, pid_n = _tile_of(dp_tiles + tile, num_pid_m, num_pid_n, GROUP_SIZE_M)
        off_m = pid_m * BLOCK_SIZE_M
        off_n = pid_n * BLOCK_SIZE_N
        acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
        for k in range(k0, k1):
            a = a_desc.load([off_m, k * BLOCK_SIZE_K])
            w = w_desc.load([off_n, k * BLOCK_SIZE_K])
            if UPCAST:
                a = a.to(tl.float32)
                w = w.to(tl.float32)
            acc = tl.dot(a, w.T, acc)
        if (k0 == 0) & (k1 == k_tiles):
            c_desc.store([off_m, off_n], acc.to(c_desc.dtype))
        else:
            first_it = tile.to(tl.int64) * k_tiles
            p_first = ((first_it + 1) * programs - 1) // total
            p_last = ((first_it + k_tiles) * programs - 1) // total
            # slot 2p: the tile program p starts in (its range's first); 2p + 1: the one it ends in
            slot = 2 * pid + (it != start).to(tl.int64)
            if _last_to_arrive(acc, WS, LOCKS, tile, slot, BLOCK_SIZE_M, BLOCK_SIZE_N) == p_last - p_first:
                # program order, whoever arrived last; its own part read back like the others (one layout). The
                # first program's part is the one it ends in (slot 1) unless it starts inside this tile too.
                first_starts_here = (p_first * total // programs) >= first_it
                out = _read_part(WS, 2 * p_first + 1 - first_starts_here.to(tl.int64), BLOCK_SIZE_M, BLOCK_SIZE_N)
                for q in range(p_first + 1, p_last + 1):  # every later one starts inside this tile: slot 0
                    out += _read_part(WS, 2 * q, BLOCK_SIZE_M, BLOCK_SIZE_N)
                c_desc.store([off_m, off_n], out.to(c_desc.dtype))
                tl.atomic_xchg(LOCKS + tile, 0)
        it += k1 - k0


@triton.jit
def matmul_swap_ab_kernel(a_desc, w_desc, C, WS, LOCKS, M, N, K, stride_cm, stride_cn,
                          BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
                          SPLIT_K: tl.constexpr, UPCAST: tl.constexpr):
    """One (BLOCK_SIZE_M x BLOCK_SIZE_N) output tile (one of SPLIT_K K ranges of it) as its transpose: acc is
    (BLOCK_SIZE_N x BLOCK_SIZE_M) = w_tile @ a_tile.T. Column tiles are the fast index, so the programs of one row
    tile (at decode there is one) stream neighbouring slices of w. The split reduction is the pointer kernel's, on the
    transposed tile."""
    pid = tl.program_id(0)
    split = pid % SPLIT_K
    tile = pid // SPLIT_K
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    off_n = (tile % num_pid_n) * BLOCK_SIZE_N
    off_m = (tile // num_pid_n) * BLOCK_SIZE_M
    k_tiles = tl.cdiv(K, BLOCK_SIZE_K)
    k_lo = split * k_tiles // SPLIT_K
    k_hi = (split + 1) * k_tiles // SPLIT_K
    acc = tl.zeros((BLOCK_SIZE_N, BLOCK_SIZE_M), dtype=tl.float32)
    for k in range(k_lo, k_hi):
        w = w_desc.load([off_n, k * BLOCK_SIZE_K])
        a = a_desc.load([off_m, k * BLOCK_SIZE_K])
        if UPCAST:
            a = a.to(tl.float32)
            w = w.to(tl.float32)
        acc = tl.dot(w, a.T, acc)
    rows = (off_m + tl.arange(0, BLOCK_SIZE_M)).to(tl.int64)
    cols = (off_n + tl.arange(0, BLOCK_SIZE_N)).to(tl.int64)
    # a pointer store: the tile is a few KiB (16 x 64 bf16), and a TMA store would stage it transposed in smem
    c_ptrs = C + rows[None, :] * stride_cm + cols[:, None] * stride_cn
    c_mask = (rows[None, :] < M) & (cols[:, None] < N)
    if SPLIT_K == 1:
        tl.store(c_ptrs, acc.to(C.dtype.element_ty), mask=c_mask)
    else:
        if _last_to_arrive(acc, WS, LOCKS, tile, pid, BLOCK_SIZE_N, BLOCK_SIZE_M) == SPLIT_K - 1:
            total = _read_part(WS, tile * SPLIT_K, BLOCK_SIZE_N, BLOCK_SIZE_M)
            for s in tl.static_range(1, SPLIT_K):
                total += _read_part(WS, tile * SPLIT_K + s, BLOCK_SIZE_N, BLOCK_SIZE_M)
            tl.store(c_ptrs, total.to(C.dtype.element_ty), mask=c_mask)
            tl.atomic_xchg(LOCKS + tile, 0)


def stream_k_after(tiles: int, k_steps: int, programs: int) -> int:
    """How many tiles the stream-K kernel walks whole before sharing out the rest: every full round of
    ``programs`` tiles, so only the last, partial round is cut into K ranges (fewer partial tiles to reduce than
    cutting all of them; the round's tiles then stream their weights once each). 0 (all tiles shared out) when
    there is less than one round; all of them when the rest has fewer K steps than programs, or none is left."""
    rest = tiles % programs
    if tiles < programs:
        return 0
    return tiles - rest if rest * k_steps >= programs else tiles


def _tma_ok(*ts: torch.Tensor) -> bool:
    """A TMA descriptor needs a non-empty tensor, a 16-byte-aligned base, 16-byte-aligned row strides and a
    contiguous last dim."""
    # one test per tensor (base and row stride ORed), no generator: 1.6 us for three tensors against 2.0 us
    for t in ts:
        if t.stride(-1) != 1 or (t.data_ptr() | t.stride(0) * t.element_size()) % 16 or not t.numel():
            return False
    return True


def matmul(a: torch.Tensor, w: torch.Tensor, out: torch.Tensor | None = None, *, config: Config) -> torch.Tensor:
    """``a @ w.T`` with an explicit config. ``a`` is (..., K), ``w`` is (N, K); any strides."""
    K = a.shape[-1]
    if w.dim() != 2 or w.shape[1] != K:
        raise ValueError(f"w must have shape (N, {K}), got {tuple(w.shape)}")
    if a.dtype != w.dtype:
        raise ValueError(f"a and w must have the same dtype, got {a.dtype} and {w.dtype}")
    a2 = a if a.dim() == 2 else a.reshape(-1, K)  # reshape/view cost ~1 us each a call, even when nothing changes
    M, N = a2.shape[0], w.shape[0]
    if out is None:
        out = torch.empty(*a.shape[:-1], N, dtype=a.dtype, device=a.device)
    elif out.shape != (*a.shape[:-1], N):
        raise ValueError(f"out must have shape {(*a.shape[:-1], N)}, got {tuple(out.shape)}")
    c2 = out if out.dim() == 2 else out.view(-1, N)
    if M == 0 or N == 0:
        return out
    bm, bn, bk = config["BLOCK_SIZE_M"], config["BLOCK_SIZE_N"], config["BLOCK_SIZE_K"]
    tiles = cdiv(M, bm) * cdiv(N, bn)
    dev = current_device()
    upcast = dev.backend == "interpreter" and a.dtype == torch.bfloat16
    tma = config.get("TMA", 0)
    if K == 0:  # an empty sum: no program would store anything
        return out.zero_()
    # TMA on Hopper and newer (and the interpreter, which emulates it for the tests); elsewhere, or when a tensor is
    # not 16-byte aligned, the same tiles take the pointer path: same result, only the load path differs
    if tma and (dev.backend == "interpreter" or has_tma(dev)) and _tma_ok(a2, w, c2):
        descriptor = descriptor_maker()  # TensorDescriptor.from_tensor without re-checking what _tma_ok checked
        if config.get("SWAP_AB", 0):
            split = config.get("SPLIT_K", 1)
            ws, locks = _split_scratch(a2, c2, tiles, split, bm, bn)
            launch(matmul_swap_ab_kernel, (tiles * split,),
                   (descriptor(a2, [bm, bk]), descriptor(w, [bn, bk]), c2, ws, locks, M, N, K, c2.stride(0),
                    c2.stride(1)), config,
                   BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, SPLIT_K=split, UPCAST=upcast)
            return out
        descs = (descriptor(a2, [bm, bk]), descriptor(w, [bn, bk]), descriptor(c2, [bm, bn]))
        if tma == 2 and config.get("STREAM_K", 0):
            k_steps = cdiv(K, bk)
            programs = max(1, min(dev.sm_count, tiles * k_steps))
            ws = scratch(a2, "matmul.parts", 2 * programs * bm * bn, torch.float32)
            locks = scratch(a2, "matmul.locks", tiles, torch.int32, zeroed=True)
            launch(matmul_stream_k_kernel, (programs,), (*descs, ws, locks, M, N, K, programs,
                                                         stream_k_after(tiles, k_steps, programs)), config,
                   BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, GROUP_SIZE_M=config["GROUP_SIZE_M"],
                   UPCAST=upcast)
            return out
        split = 1 if tma == 2 else config.get("SPLIT_K", 1)
        ws, locks = _split_scratch(a2, c2, tiles, split, bm, bn)
        # CTAS_PER_SM=2: two persistent programs an SM, for tiles that fit twice (DIRECT_STORE 128x128x64 on 3
        # stages: 106,520 bytes each on sm_90); one that does not fit waits for an SM to free, with the same result
        programs = min(tiles, dev.sm_count * config.get("CTAS_PER_SM", 1)) if tma == 2 else tiles * split
        launch(matmul_tma_kernel, (programs,), (*descs, c2, c2.stride(0), c2.stride(1), ws, locks, M, N, K, programs),
               config, BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, GROUP_SIZE_M=config["GROUP_SIZE_M"],
               PERSISTENT=tma == 2, SPLIT_K=split, DIRECT_STORE=bool(config.get("DIRECT_STORE", 0)), UPCAST=upcast)
        return out
    split = config.get("SPLIT_K", 1)
    ws, locks = _split_scratch(a2, c2, tiles, split, bm, bn)
    launch(matmul_kernel, (tiles * split,), (a2, w, c2, ws, locks, M, N, K, a2.stride(0), a2.stride(1), w.stride(0),
                                             w.stride(1), c2.stride(0), c2.stride(1)), config,
           BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, GROUP_SIZE_M=config["GROUP_SIZE_M"], SPLIT_K=split,
           EVEN_K=K % bk == 0, UPCAST=upcast)
    return out


def _split_scratch(a2: torch.Tensor, c2: torch.Tensor, tiles: int, split: int, bm: int, bn: int):
    """(fp32 partials, zeroed arrival counters) for a SPLIT_K launch; for SPLIT_K=1 two stand-ins never read."""
    if split == 1:
        return c2, c2
    return (scratch(a2, "matmul.parts", tiles * split * bm * bn, torch.float32),
            scratch(a2, "matmul.locks", tiles, torch.int32, zeroed=True))
