"""Fused residual add + RMSNorm in Triton, one program per row (BLOCK_M > 1: per BLOCK_M rows, single pass):
    residual <- residual + x      (in place, stored in the input dtype)
    y        <- rmsnorm(residual) * w

The norm is taken over the *stored* (rounded) residual in both forms, so single-pass and looped configs agree bit
for bit on what the next layer will read. Per element it moves 3 reads (x, r, w amortised) + 2 writes (r, y).

The looped form (BLOCK_N < N) is Inductor's two-pass reduction: pass one reads x and r, asking L2 to keep them
(evict_last), and sums the squares of their rounded sum; pass two reads them again (evict_first: last use), recomputes
the same sum, and writes the residual and y. Nothing is written before the norm is known, so pass two never reads
back what pass one stored a moment earlier. Inductor's kernel of this form (2048-wide blocks, 16 warps) ran 255.6 us
at M=32768, N=4096 against 264.7 for our single pass (benchmarks/results/NVIDIA_H200/row_variants.md). EVEN (BLOCK_N divides
N) drops the column masks.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from flytune_nb.kit import Config, launch
from flytune_nb.kit.spaces import row_blocks


@triton.jit
def fused_add_rmsnorm_kernel(X, R, W, Y, M, stride_x, stride_r, stride_y, N, eps,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SINGLE_PASS: tl.constexpr,
                             EVEN: tl.constexpr):
    if BLOCK_M > 1:  # single pass over BLOCK_M rows (short rows: more bytes in flight per program, w read once)
        rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tl.arange(0, BLOCK_N)
        mask = (rows[:, None] < M) & (cols[None, :] < N)
        r_ptrs = R + rows[:, None] * stride_r + cols[None, :]
        z = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32) + \
            tl.load(r_ptrs, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(W + cols, mask=cols < N, other=0.0).to(tl.float32)
        z = z.to(R.dtype.element_ty)
        tl.store(r_ptrs, z, mask=mask)
        z = z.to(tl.float32)
        rstd = tl.rsqrt(tl.sum(z * z, axis=1) / N + eps)
        tl.store(Y + rows[:, None] * stride_y + cols[None, :], (z * rstd[:, None] * w[None, :]).to(Y.dtype.element_ty),
                 mask=mask)
        return
    row = tl.program_id(0).to(tl.int64)
    x_row, r_row, y_row = X + row * stride_x, R + row * stride_r, Y + row * stride_y
    if SINGLE_PASS:
        cols = tl.arange(0, BLOCK_N)
        mask = cols < N
        if EVEN:
            z = tl.load(x_row + cols).to(tl.float32) + tl.load(r_row + cols).to(tl.float32)
            w = tl.load(W + cols).to(tl.float32)  # issued beside x and r, not after the reduction
        else:
            z = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32) + \
                tl.load(r_row + cols, mask=mask, other=0.0).to(tl.float32)
            w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
        z = z.to(R.dtype.element_ty)
        if EVEN:
            tl.store(r_row + cols, z)
        else:
            tl.store(r_row + cols, z, mask=mask)
        z = z.to(tl.float32)
        rstd = tl.rsqrt(tl.sum(z * z, axis=0) / N + eps)
        if EVEN:
            tl.store(y_row + cols, (z * rstd * w).to(Y.dtype.element_ty))
        else:
            tl.store(y_row + cols, (z * rstd * w).to(Y.dtype.element_ty), mask=mask)
    else:
        acc = tl.zeros([BLOCK_N], dtype=tl.float32)
        for off in range(0, N, BLOCK_N):
            cols = off + tl.arange(0, BLOCK_N)
            if EVEN:
                x = tl.load(x_row + cols, eviction_policy="evict_last")
                r = tl.load(r_row + cols, eviction_policy="evict_last")
            else:
                x = tl.load(x_row + cols, mask=cols < N, other=0.0, eviction_policy="evict_last")
                r = tl.load(r_row + cols, mask=cols < N, other=0.0, eviction_policy="evict_last")
            z = (x.to(tl.float32) + r.to(tl.float32)).to(R.dtype.element_ty).to(tl.float32)
            acc += z * z
        rstd = tl.rsqrt(tl.sum(acc, axis=0) / N + eps)
        for off in range(0, N, BLOCK_N):
            cols = off + tl.arange(0, BLOCK_N)
            mask = cols < N
            if EVEN:
                x = tl.load(x_row + cols, eviction_policy="evict_first")
                r = tl.load(r_row + cols, eviction_policy="evict_first")
                w = tl.load(W + cols, eviction_policy="evict_last").to(tl.float32)
            else:
                x = tl.load(x_row + cols, mask=mask, other=0.0, eviction_policy="evict_first")
                r = tl.load(r_row + cols, mask=mask, other=0.0, eviction_policy="evict_first")
                w = tl.load(W + cols, mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
            z = (x.to(tl.float32) + r.to(tl.float32)).to(R.dtype.element_ty)
            y = (z.to(tl.float32) * rstd * w).to(Y.dtype.element_ty)
            if EVEN:
                tl.store(r_row + cols, z)
                tl.store(y_row + cols, y)
            else:
                tl.store(r_row + cols, z, mask=mask)
                tl.store(y_row + cols, y, mask=mask)


def fused_add_rmsnorm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None = None,
                      eps: float = 1e-6, *, config: Config) -> tuple[torch.Tensor, torch.Tensor]:
    """Updates ``residual`` in place and returns ``(y, residual)``. Last dims must be contiguous; ``residual`` must
    be a view we can write through (it is not copied)."""
    N = x.shape[-1]
    if residual.shape != x.shape:
        raise ValueError(f"residual shape {tuple(residual.shape)} != x shape {tuple(x.shape)}")
    if weight.shape != (N,):
        raise ValueError(f"weight must have shape ({N},), got {tuple(weight.shape)}")
    if residual.stride(-1) != 1:
        raise ValueError("residual's last dim must be contiguous: it is updated in place")
    if x.stride(-1) != 1:
        x = x.contiguous()
    if weight.stride(0) != 1:  # e.g. a broadcast (stride-0) weight: the kernel reads it with unit stride
        weight = weight.contiguous()
    try:
        r2 = residual if residual.dim() == 2 else residual.view(-1, N)
    except RuntimeError:
        raise ValueError("residual must be viewable as (rows, N) (e.g. contiguous): it is updated in place") from None
    x2 = x if x.dim() == 2 else x.reshape(-1, N)
    if out is None:
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)  # not empty_like: that keeps x's permutation
    elif not out.is_contiguous():
        raise ValueError("out must be contiguous")
    y2 = out if out.dim() == 2 else out.view(-1, N)
    (block, rows), M = row_blocks(config, N), x2.shape[0]
    launch(fused_add_rmsnorm_kernel, ((M + rows - 1) // rows,),
           (x2, r2, weight, y2, M, x2.stride(0), r2.stride(0), y2.stride(0), N, eps), config,
           BLOCK_M=rows, BLOCK_N=block, SINGLE_PASS=block >= N, EVEN=N % block == 0)
    return out, residual
