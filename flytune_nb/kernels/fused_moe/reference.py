"""The torch reference (float64, a plain loop over experts) and the eager baseline a user would write (the same loop
in the input dtype)."""
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
