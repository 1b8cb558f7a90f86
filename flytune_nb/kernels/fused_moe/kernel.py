"""Fused MoE in Triton, the structure SGLang tunes: route, align, grouped GEMM (gate+up), SiLU*up, grouped GEMM (down,
scaled by the routing weight), sum over the top-k slots.

``moe_align`` sorts the M*topk (token, slot) pairs by expert and pads each expert's run to a multiple of BLOCK_SIZE_M,
so every row tile of the grouped GEMM belongs to one expert. It stays on the device with no host sync (block -> expert
by searchsorted over the padded ends), so it costs a few small launches, not a round trip. Padding rows carry the id
M*topk, which the kernel masks out.

The same config serves both GEMMs, as in SGLang's artifacts. UPCAST: see kernels/matmul/kernel.py (the interpreter's
bf16 dot is wrong; always False on a GPU).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from flytune_nb.config import Config
from flytune_nb.device import current_device
from flytune_nb.launch import launch


@triton.jit
def fused_moe_kernel(A, B, C, topk_weights, sorted_token_ids, expert_ids, num_tokens_post_padded, N, K, EM,
                     num_valid_tokens, stride_am, stride_ak, stride_be, stride_bn, stride_bk, stride_cm, stride_cn,
                     BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
                     GROUP_SIZE_M: tl.constexpr, MUL_ROUTED_WEIGHT: tl.constexpr, top_k: tl.constexpr,
                     EVEN_K: tl.constexpr, UPCAST: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(EM, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    in_group = GROUP_SIZE_M * num_pid_n
    first_m = (pid // in_group) * GROUP_SIZE_M
    group_m = min(num_pid_m - first_m, GROUP_SIZE_M)
    pid_m = first_m + (pid % in_group) % group_m
    pid_n = (pid % in_group) // group_m
    if pid_m * BLOCK_SIZE_M >= tl.load(num_tokens_post_padded):
        return  # a tile past the padded total: the grid is sized for the worst case, no host sync

    # int64: token * stride overflows int32 once M*topk*2N passes 2^31 (M=16384, top-8, 2N=28672).
    offs_token = tl.load(sorted_token_ids + pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)).to(tl.int64)
    token_mask = offs_token < num_valid_tokens
    expert = tl.load(expert_ids + pid_m).to(tl.int64)
    offs_n = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = A + (offs_token[:, None] // top_k) * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = B + expert * stride_be + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        if EVEN_K:
            a = tl.load(a_ptrs, mask=token_mask[:, None], other=0.0)
            b = tl.load(b_ptrs)
        else:
            k_left = K - k * BLOCK_SIZE_K
            a = tl.load(a_ptrs, mask=token_mask[:, None] & (offs_k[None, :] < k_left), other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        if UPCAST:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    if MUL_ROUTED_WEIGHT:
        w = tl.load(topk_weights + offs_token, mask=token_mask, other=0.0)
        acc = acc * w[:, None].to(tl.float32)

    cols = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = C + offs_token[:, None] * stride_cm + cols[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(C.dtype.element_ty), mask=token_mask[:, None] & (cols[None, :] < N))


def moe_align(topk_ids: torch.Tensor, num_experts: int, block_m: int):
    """(sorted_token_ids, expert_ids, num_tokens_post_padded) for a grouped GEMM with row tiles of ``block_m``.

    sorted_token_ids has the worst-case length M*topk + E*(block_m-1), padded with M*topk; expert_ids[b] is the
    expert of row tile b; num_tokens_post_padded is a 1-element device tensor."""
    flat = topk_ids.flatten().to(torch.int64)
    n, dev = flat.numel(), flat.device
    # not torch.bincount: on CUDA it reads max() back to the host to size its output, a sync on every call
    counts = torch.zeros(num_experts, dtype=torch.int64, device=dev).scatter_add_(0, flat, torch.ones_like(flat))
    padded = (counts + block_m - 1) // block_m * block_m
    ends = torch.cumsum(padded, 0)
    order = torch.argsort(flat, stable=True)
    sorted_experts = flat[order]
    first_of_expert = torch.cumsum(counts, 0) - counts
    pos = (ends - padded)[sorted_experts] + torch.arange(n, device=dev) - first_of_expert[sorted_experts]
    capacity = n + num_experts * (block_m - 1)
    sorted_ids = torch.full((capacity,), n, dtype=torch.int32, device=dev)
    sorted_ids[pos] = order.to(torch.int32)
    blocks = torch.arange(triton.cdiv(capacity, block_m), device=dev) * block_m
    expert_ids = torch.searchsorted(ends, blocks, right=True).clamp_(max=num_experts - 1).to(torch.int32)
    return sorted_ids, expert_ids, ends[-1:].to(torch.int32)


def _grouped_gemm(a, b, c, topk_weights, align, top_k, mul_weight, config, backend):
    sorted_ids, expert_ids, n_post = align
    N, K = b.shape[1], b.shape[2]
    bm, bn, bk = config["BLOCK_SIZE_M"], config["BLOCK_SIZE_N"], config["BLOCK_SIZE_K"]
    EM = sorted_ids.numel()
    grid = (triton.cdiv(EM, bm) * triton.cdiv(N, bn),)
    launch(fused_moe_kernel, grid, (a, b, c, topk_weights, sorted_ids, expert_ids, n_post, N, K, EM,
                                    topk_weights.numel(), a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                    b.stride(2), c.stride(0), c.stride(1)), config,
           BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, GROUP_SIZE_M=config["GROUP_SIZE_M"],
           MUL_ROUTED_WEIGHT=mul_weight, top_k=top_k, EVEN_K=K % bk == 0,
           UPCAST=backend == "interpreter" and a.dtype == torch.bfloat16)


def fused_moe(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, topk_weights: torch.Tensor,
              topk_ids: torch.Tensor, out: torch.Tensor | None = None, *, config: Config) -> torch.Tensor:
    """x (M, K); w1 (E, 2N, K) = [gate; up]; w2 (E, K, N); topk_weights / topk_ids (M, topk). Returns (M, K)."""
    M, K = x.shape
    E, two_n, K1 = w1.shape
    if K1 != K or two_n % 2 or w2.shape != (E, K, two_n // 2):
        raise ValueError(f"expected w1 (E, 2N, {K}) and w2 (E, {K}, N); got {tuple(w1.shape)} and {tuple(w2.shape)}")
    if topk_ids.shape != topk_weights.shape or topk_ids.shape[0] != M:
        raise ValueError(f"topk_ids and topk_weights must both be ({M}, topk)")
    if not (x.dtype == w1.dtype == w2.dtype):
        raise ValueError(f"x, w1, w2 must share a dtype, got {x.dtype}, {w1.dtype}, {w2.dtype}")
    N, top_k = two_n // 2, topk_ids.shape[1]
    backend = current_device().backend
    x = x.contiguous()
    align = moe_align(topk_ids, E, config["BLOCK_SIZE_M"])
    weights = topk_weights.contiguous().view(-1)
    cache1 = torch.empty(M * top_k, two_n, dtype=x.dtype, device=x.device)
    _grouped_gemm(x, w1, cache1, weights, align, top_k, False, config, backend)
    gate, up = cache1.split(N, dim=1)
    act = (F.silu(gate.float()) * up.float()).to(x.dtype)
    cache3 = torch.empty(M * top_k, K, dtype=x.dtype, device=x.device)
    _grouped_gemm(act, w2, cache3, weights, align, 1, True, config, backend)
    if out is None:
        out = torch.empty(M, K, dtype=x.dtype, device=x.device)
    return torch.sum(cache3.view(M, top_k, K), dim=1, out=out)
