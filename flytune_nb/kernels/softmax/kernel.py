"""Row-wise softmax in Triton, fp32 accumulation, one program per row (BLOCK_M > 1: per BLOCK_M rows, single pass).

BLOCK_N >= N: single pass — the row is loaded once, max-reduced, exponentiated, sum-reduced and stored (x read once,
y written once: the minimum traffic). BLOCK_N < N: online softmax — pass one keeps a running max and a running sum
rescaled by exp(old max - new max) per lane; pass two re-reads x and writes exp(x - max) / sum. x is read twice, but
wide rows never spill.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from flytune_nb.config import Config
from flytune_nb.launch import launch
from flytune_nb.spaces import row_blocks


@triton.jit
def softmax_kernel(X, Y, M, stride_x, stride_y, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   SINGLE_PASS: tl.constexpr):
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
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=-float("inf")).to(tl.float32)
        e = tl.exp(x - tl.max(x, axis=0))
        tl.store(y_row + cols, (e / tl.sum(e, axis=0)).to(Y.dtype.element_ty), mask=mask)
    else:
        # Looped only when BLOCK_N < N, so the first block is full and every lane's running max is finite after it.
        m = tl.full([BLOCK_N], -float("inf"), tl.float32)
        s = tl.zeros([BLOCK_N], dtype=tl.float32)
        for off in range(0, N, BLOCK_N):
            cols = off + tl.arange(0, BLOCK_N)
            x = tl.load(x_row + cols, mask=cols < N, other=-float("inf")).to(tl.float32)
            m_new = tl.maximum(m, x)
            s = s * tl.exp(m - m_new) + tl.exp(x - m_new)
            m = m_new
        row_max = tl.max(m, axis=0)
        total = tl.sum(s * tl.exp(m - row_max), axis=0)
        for off in range(0, N, BLOCK_N):
            cols = off + tl.arange(0, BLOCK_N)
            mask = cols < N
            x = tl.load(x_row + cols, mask=mask, other=-float("inf")).to(tl.float32)
            tl.store(y_row + cols, (tl.exp(x - row_max) / total).to(Y.dtype.element_ty), mask=mask)


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
    launch(softmax_kernel, ((M + rows - 1) // rows,), (x2, y2, M, x2.stride(0), y2.stride(0), N), config,
           BLOCK_M=rows, BLOCK_N=block, SINGLE_PASS=block >= N)
    return out
