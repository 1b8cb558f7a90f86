"""The torch reference (float64, a plain loop over experts), the eager baseline a user would write (the same loop
in the input dtype), and torch's own fused path: the tokens sorted by expert and both GEMMs as one grouped GEMM each
(torch._grouped_mm, CUTLASS on sm_90), the installed fused MoE implementation the issue asks to compare with."""
import torch
import torch.nn.functional as F


def _moe_loop(x, w1, w2, topk_weights, topk_ids, dtype):
    M, K = x.shape
    N = w2.shape[2]
    out = torch.zeros(M, K, dtype=dtype, device=x.device)
    for e in range(w1.shape[0]):
        tok, slot = torch.where(topk_ids == e)
        if tok.numel() == 0:
            continue
        h = x[tok].to(dtype) @ w1[e].to(dtype).T
        act = F.silu(h[:, :N]) * h[:, N:]
        y = act @ w2[e].to(dtype).T
        out.index_add_(0, tok, y * topk_weights[tok, slot, None].to(dtype))
    return out


def fused_moe_ref(x, w1, w2, topk_weights, topk_ids):
    return _moe_loop(x, w1, w2, topk_weights, topk_ids, torch.float64)


def fused_moe_torch(x, w1, w2, topk_weights, topk_ids):
    return _moe_loop(x, w1, w2, topk_weights, topk_ids, x.dtype)


def fused_moe_grouped(x, w1, w2, topk_weights, topk_ids):
    """Sort the (token, slot) pairs by expert, run each GEMM as one grouped GEMM over the experts' runs, scale by
    the routing weights and add the top-k results back per token. Needs torch._grouped_mm (torch >= 2.8)."""
    M, K = x.shape
    E, N, topk = w1.shape[0], w2.shape[2], topk_ids.shape[1]
    flat = topk_ids.reshape(-1).long()
    order = torch.argsort(flat, stable=True)
    tok = order // topk
    offs = torch.cumsum(torch.bincount(flat, minlength=E), 0).to(torch.int32)
    h = torch._grouped_mm(x[tok], w1.transpose(1, 2), offs=offs)  # (M*topk, 2N)
    y = torch._grouped_mm(F.silu(h[:, :N]) * h[:, N:], w2.transpose(1, 2), offs=offs)  # (M*topk, K)
    y = y * topk_weights.reshape(-1)[order, None].to(y.dtype)
    return torch.zeros(M, K, dtype=x.dtype, device=x.device).index_add_(0, tok, y)
