"""Row-wise softmax in Triton, fp32 accumulation, one program per row (BLOCK_M > 1: per BLOCK_M rows, single pass;
SPLIT_N > 1: SPLIT_N programs per row, two launches).

BLOCK_N >= N: single pass — the row is loaded once, max-reduced, exponentiated, sum-reduced and stored (x read once,
y written once: the minimum traffic). BLOCK_N < N: online softmax — pass one keeps a running max and a running sum
rescaled by exp(old max - new max) per lane; pass two re-reads x and writes exp(x - max) / sum. x is read twice, but
wide rows never spill; pass one asks L2 to keep the row (evict_last), pass two lets it go (evict_first), so at
vocabulary widths (N=152064 bf16: 297 KiB a row) the re-read is an L2 hit.

SPLIT_N > 1 (a vocabulary row at decode batch sizes: one program per row would stream 297 KiB from one SM): each of
the row's SPLIT_N programs reduces its chunk (an equal share of the row, in BLOCK_N blocks) to a (max, sum of exp)
pair; a second launch combines the row's pairs (sum of s_c * exp(m_c - max)) and each program writes its chunk. The
pairs live in a per-stream scratch buffer (flytune_nb.kit.scratch), written in full by the first launch before the
second reads it.

-inf entries (masked logits) are exact: a lane or a chunk that has seen only -inf so far carries max -inf and sum 0,
never exp(-inf - -inf) = NaN; a row that is all -inf gives NaN, as torch.softmax does.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from flytune_nb.kit import Config, launch
from flytune_nb.kit.scratch import scratch
from flytune_nb.kit.spaces import row_blocks


@triton.jit
def _online_update(m, s, x):
    """One block of the lane-wise running (max, sum of exp(x - max)); lanes with nothing finite yet stay (-inf, 0)."""
    m_new = tl.maximum(m, x)
    ref = tl.where(m_new == -float("inf"), 0.0, m_new)  # (-inf) - 0 = -inf, exp 0: never -inf - (-inf)
    return m_new, s * tl.exp(m - ref) + tl.exp(x - ref)


@triton.jit
def _combine(m, s, axis: tl.constexpr):
    """(max, sum) of lane-wise (or chunk-wise) pairs; (-inf, 0) when every pair is empty."""
    top = tl.max(m, axis=axis)
    ref = tl.where(top == -float("inf"), 0.0, top)
    return top, tl.sum(s * tl.exp(m - ref), axis=axis)


@triton.jit
def _chunk_stats(x_row, lo, hi, BLOCK_N: tl.constexpr, EVEN: tl.constexpr):
    m = tl.full([BLOCK_N], -float("inf"), tl.float32)
    s = tl.zeros([BLOCK_N], dtype=tl.float32)
    for off in range(lo, hi, BLOCK_N):
        cols = off + tl.arange(0, BLOCK_N)
        if EVEN:
            x = tl.load(x_row + cols, eviction_policy="evict_last").to(tl.float32)
        else:
            x = tl.load(x_row + cols, mask=cols < hi, other=-float("inf"), eviction_policy="evict_last")
            x = x.to(tl.float32)
        m, s = _online_update(m, s, x)
    return _combine(m, s, 0)


@triton.jit
def _write_chunk(x_row, y_row, lo, hi, row_max, total, BLOCK_N: tl.constexpr, EVEN: tl.constexpr):
    for off in range(lo, hi, BLOCK_N):
        cols = off + tl.arange(0, BLOCK_N)
        if EVEN:
            x = tl.load(x_row + cols, eviction_policy="evict_first").to(tl.float32)
            tl.store(y_row + cols, (tl.exp(x - row_max) / total).to(y_row.dtype.element_ty))
        else:
            mask = cols < hi
            x = tl.load(x_row + cols, mask=mask, other=-float("inf"), eviction_policy="evict_first").to(tl.float32)
            tl.store(y_row + cols, (tl.exp(x - row_max) / total).to(y_row.dtype.element_ty), mask=mask)


@triton.jit
def softmax_kernel(X, Y, M, stride_x, stride_y, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   SINGLE_PASS: tl.constexpr, EVEN: tl.constexpr):
    if BLOCK_M > 1:  # single pass over BLOCK_M rows: short rows give each program more bytes in flight
        rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tl.arange(0, BLOCK_N)
        # rows past M re-read row M-1 (an all -inf row would make exp(nan)); their store is masked off
        src = tl.minimum(rows, M - 1)
        x = tl.load(X + src[:, None] * stride_x + cols[None, :], mask=cols[None, :] < N, other=-float("inf"))
        x = x.to(tl.float32)
        e = tl.exp(x - tl.max(x, axis=1)[:, None])
        y = e / tl.sum(e, axis=1)[:, None]
        mask = (rows[:, None] < M) & (cols[None, :] < N)
        tl.store(Y + rows[:, None] * stride_y + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)
        return
    row = tl.program_id(0).to(tl.int64)
    x_row = X + row * stride_x
    y_row = Y + row * stride_y
    if SINGLE_PASS:
        cols = tl.arange(0, BLOCK_N)
        if EVEN:
            x = tl.load(x_row + cols).to(tl.float32)
        else:
            x = tl.load(x_row + cols, mask=cols < N, other=-float("inf")).to(tl.float32)
        e = tl.exp(x - tl.max(x, axis=0))
        y = (e / tl.sum(e, axis=0)).to(Y.dtype.element_ty)
        if EVEN:
            tl.store(y_row + cols, y)
        else:
            tl.store(y_row + cols, y, mask=cols < N)
    else:
        row_max, total = _chunk_stats(x_row, 0, N, BLOCK_N, EVEN)
        _write_chunk(x_row, y_row, 0, N, row_max, total, BLOCK_N, EVEN)


@triton.jit
def softmax_split_stats_kernel(X, STATS, stride_x, N, chunk, SPLIT_N: tl.constexpr, BLOCK_N: tl.constexpr,
                               EVEN: tl.constexpr):
    """Program (row, c): (max, sum of exp(x - max)) of columns [c * chunk, (c + 1) * chunk) of the row."""
    pid = tl.program_id(0)
    row = (pid // SPLIT_N).to(tl.int64)
    lo = (pid % SPLIT_N) * chunk
    hi = tl.minimum(lo + chunk, N)
    m, s = _chunk_stats(X + row * stride_x, lo, hi, BLOCK_N, EVEN)
    tl.store(STATS + 2 * pid, m)
    tl.store(STATS + 2 * pid + 1, s)


@triton.jit
def softmax_split_norm_kernel(X, Y, STATS, stride_x, stride_y, N, chunk, SPLIT_N: tl.constexpr,
                              BLOCK_N: tl.constexpr, EVEN: tl.constexpr):
    """Program (row, c): the row's max and sum from its SPLIT_N pairs, then y over the same columns."""
    pid = tl.program_id(0)
    row = (pid // SPLIT_N).to(tl.int64)
    pairs = STATS + 2 * (row * SPLIT_N + tl.arange(0, SPLIT_N))
    row_max, total = _combine(tl.load(pairs), tl.load(pairs + 1), 0)
    lo = (pid % SPLIT_N) * chunk
    hi = tl.minimum(lo + chunk, N)
    _write_chunk(X + row * stride_x, Y + row * stride_y, lo, hi, row_max, total, BLOCK_N, EVEN)


def softmax(x: torch.Tensor, out: torch.Tensor | None = None, *, config: Config) -> torch.Tensor:
    """Softmax over the last axis with an explicit config; rows may be strided, the last dim must be contiguous."""
    N = x.shape[-1]
    if x.stride(-1) != 1:
        x = x.contiguous()
    x2 = x if x.dim() == 2 else x.reshape(-1, N)
    if out is None:
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    elif not out.is_contiguous():
        raise ValueError("out must be contiguous")
    y2 = out if out.dim() == 2 else out.view(-1, N)
    (block, rows), M = row_blocks(config, N), x2.shape[0]
    split = config.get("SPLIT_N", 1)
    if M == 0:
        return out
    if split > 1 and block < N:
        # equal chunks, 64-element aligned (128-byte loads stay aligned), so every program of the row has work; a
        # chunk's last block is masked unless the blocks tile it exactly (EVEN)
        chunk = triton.cdiv(triton.cdiv(N, split), 64) * 64
        stats = scratch(x2, "softmax.stats", 2 * M * split, torch.float32)
        even = N % block == 0 and chunk % block == 0
        launch(softmax_split_stats_kernel, (M * split,), (x2, stats, x2.stride(0), N, chunk), config,
               SPLIT_N=split, BLOCK_N=block, EVEN=even)
        launch(softmax_split_norm_kernel, (M * split,), (x2, y2, stats, x2.stride(0), y2.stride(0), N, chunk), config,
               SPLIT_N=split, BLOCK_N=block, EVEN=even)
        return out
    launch(softmax_kernel, ((M + rows - 1) // rows,), (x2, y2, M, x2.stride(0), y2.stride(0), N), config,
           BLOCK_M=rows, BLOCK_N=block, SINGLE_PASS=block >= N, EVEN=N % block == 0)
    return out
