"""RMSNorm in Triton: y = x * rsqrt(mean(x^2) + eps) * w, one program per row (or per BLOCK_M rows).

BLOCK_N >= N: single pass — the row is loaded once into registers, reduced, scaled and stored (2 bytes moved per
element per direction, the minimum). BLOCK_N < N: looped — one pass to reduce, a second to scale; x is read twice,
but nothing spills for very wide rows, and pass one's loads ask L2 to keep the row (evict_last) while pass two's
let it go (evict_first), as Inductor's two-pass reduction does, so the re-read is an L2 hit. EVEN (BLOCK_N divides
N: every model width and its power-of-two blocks) drops the column masks, so loads and stores are plain 16-byte
vectors. BLOCK_M > 1 (single pass only): one program normalises BLOCK_M rows, so a
short row's program has more bytes in flight and w is read once per BLOCK_M rows. w's load is issued beside x's, before
the reduction, so its latency overlaps x's instead of following the reduction.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from flytune_nb.kit import Config, launch
from flytune_nb.kit.spaces import row_blocks


@triton.jit
def rmsnorm_kernel(X, W, Y, M, stride_x, stride_y, N, eps, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   SINGLE_PASS: tl.constexpr, EVEN: tl.constexpr):
    if BLOCK_M > 1:  # single pass over BLOCK_M rows: short rows (N=1024 bf16: 2 KiB) give each program more in flight
        rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tl.arange(0, BLOCK_N)
        mask = (rows[:, None] < M) & (cols[None, :] < N)
        x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        w = tl.load(W + cols, mask=cols < N, other=0.0).to(tl.float32)  # issued before the reduction waits on x
        rstd = tl.rsqrt(tl.sum(x * x, axis=1) / N + eps)
        y = x * rstd[:, None] * w[None, :]
        tl.store(Y + rows[:, None] * stride_y + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)
    elif SINGLE_PASS:
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK_N)
        if EVEN:
            x = tl.load(X + row * stride_x + cols).to(tl.float32)
            w = tl.load(W + cols).to(tl.float32)
        else:
            x = tl.load(X + row * stride_x + cols, mask=cols < N, other=0.0).to(tl.float32)
            w = tl.load(W + cols, mask=cols < N, other=0.0).to(tl.float32)
        rstd = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)
        if EVEN:
            tl.store(Y + row * stride_y + cols, (x * rstd * w).to(Y.dtype.element_ty))
        else:
            tl.store(Y + row * stride_y + cols, (x * rstd * w).to(Y.dtype.element_ty), mask=cols < N)
    else:
        row = tl.program_id(0).to(tl.int64)
        x_row = X + row * stride_x
        y_row = Y + row * stride_y
        acc = tl.zeros([BLOCK_N], dtype=tl.float32)
        for off in range(0, N, BLOCK_N):
            cols = off + tl.arange(0, BLOCK_N)
            if EVEN:
                x = tl.load(x_row + cols, eviction_policy="evict_last").to(tl.float32)
            else:
                x = tl.load(x_row + cols, mask=cols < N, other=0.0, eviction_policy="evict_last").to(tl.float32)
            acc += x * x
        rstd = tl.rsqrt(tl.sum(acc, axis=0) / N + eps)
        for off in range(0, N, BLOCK_N):
            cols = off + tl.arange(0, BLOCK_N)
            if EVEN:
                x = tl.load(x_row + cols, eviction_policy="evict_first").to(tl.float32)
                w = tl.load(W + cols, eviction_policy="evict_last").to(tl.float32)
                tl.store(y_row + cols, (x * rstd * w).to(Y.dtype.element_ty))
            else:
                mask = cols < N
                x = tl.load(x_row + cols, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
                w = tl.load(W + cols, mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
                tl.store(y_row + cols, (x * rstd * w).to(Y.dtype.element_ty), mask=mask)


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None = None, eps: float = 1e-6, *,
            config: Config) -> torch.Tensor:
    """Launch with an explicit config. ``x`` is (..., N); rows may be strided, the last dim must be contiguous."""
    N = x.shape[-1]
    if weight.shape != (N,):
        raise ValueError(f"weight must have shape ({N},), got {tuple(weight.shape)}")
    if x.stride(-1) != 1:
        x = x.contiguous()
    if weight.stride(0) != 1:  # e.g. a broadcast (stride-0) weight: the kernel reads it with unit stride
        weight = weight.contiguous()
    # reshape/view cost ~1 us each on the host, which a decode-sized launch notices: skip them for 2-D
    x2 = x if x.dim() == 2 else x.reshape(-1, N)  # a view when rows are evenly strided, else a copy
    if out is None:
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)  # not empty_like: that keeps x's permutation
    elif not out.is_contiguous():
        raise ValueError("out must be contiguous")
    y2 = out if out.dim() == 2 else out.view(-1, N)
    (block, rows), M = row_blocks(config, N), x2.shape[0]
    launch(rmsnorm_kernel, ((M + rows - 1) // rows,), (x2, weight, y2, M, x2.stride(0), y2.stride(0), N, eps), config,
           BLOCK_M=rows, BLOCK_N=block, SINGLE_PASS=block >= N, EVEN=N % block == 0)
    return out
