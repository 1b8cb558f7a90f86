"""The reference: a float64 loop over tokens' experts — per expert x @ w1[e].T, SiLU(gate) * up, @ w2[e].T, scaled by
the routing weight, summed over the top-k slots. w1 is SGLang's w13, (E, 2N, K) = [gate; up]; w2 is (E, K, N)."""
import torch
import torch.nn.functional as F


def moe_reference(x, w1, w2, topk_weights, topk_ids) -> torch.Tensor:
    x, w1, w2 = x.double(), w1.double(), w2.double()
    N = w2.shape[2]
    out = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float64, device=x.device)
    for e in range(w1.shape[0]):
        tok, slot = torch.where(topk_ids == e)
        if tok.numel() == 0:
            continue
        h = x[tok] @ w1[e].T
        y = (F.silu(h[:, :N]) * h[:, N:]) @ w2[e].T
        out.index_add_(0, tok, y * topk_weights[tok, slot, None].double())
    return out


def down_reference(act, w2, topk_weights, topk_ids) -> torch.Tensor:
    """The down GEMM alone: act (M*topk, N) holds the SiLU*up of each (token, slot) pair, row m*topk + s."""
    M, topk = topk_ids.shape
    a, w2 = act.double(), w2.double()
    out = torch.zeros(M, w2.shape[1], dtype=torch.float64, device=act.device)
    for e in range(w2.shape[0]):
        tok, slot = torch.where(topk_ids == e)
        if tok.numel() == 0:
            continue
        y = a[tok * topk + slot] @ w2[e].T
        out.index_add_(0, tok, y * topk_weights[tok, slot, None].double())
    return out
