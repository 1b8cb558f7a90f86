"""The reference: a float64 loop over tokens' experts — per expert x @ w1[e].T, SiLU(gate) * up, @ w2[e].T, scaled by
the routing weight, summed over the top-k slots. w1 is SGLang's w13, (E, 2N, K) = [gate; up]; w2 is (E, K, N).

fp8_w8a8 (``w1_scale`` given): the quantisation is part of what the kernel computes, so the reference applies it too —
x quantised per tensor by ``quant`` (the kernel's activation quantiser), the weights dequantised with their per-expert
scales, the gate+up product rounded to x's dtype and SiLU*up computed in fp32 and rounded once (as the kernel stores
and SGLang's silu_and_mul computes them), that activation quantised per tensor again; the products in float64."""
import torch
import torch.nn.functional as F


def _expert(w, scale, e) -> torch.Tensor:
    return w[e].double() if scale is None else w[e].double() * scale[e].double()


def moe_reference(x, w1, w2, topk_weights, topk_ids, w1_scale=None, w2_scale=None, quant=None) -> torch.Tensor:
    if w1_scale is not None:
        return _fp8_reference(x, w1, w2, topk_weights, topk_ids, w1_scale, w2_scale, quant)
    x = x.double()
    N = w2.shape[2]
    out = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float64, device=x.device)
    for e in range(w1.shape[0]):
        tok, slot = torch.where(topk_ids == e)
        if tok.numel() == 0:
            continue
        h = x[tok] @ _expert(w1, None, e).T
        y = (F.silu(h[:, :N]) * h[:, N:]) @ _expert(w2, None, e).T
        out.index_add_(0, tok, y * topk_weights[tok, slot, None].double())
    return out


def _dequantised(a, quant) -> torch.Tensor:
    q, scale = quant(a)
    return q.double() * scale.double()


def _fp8_reference(x, w1, w2, topk_weights, topk_ids, w1_scale, w2_scale, quant) -> torch.Tensor:
    M, topk = topk_ids.shape
    N = w2.shape[2]
    xd = _dequantised(x, quant)
    act = torch.empty(M * topk, N, dtype=x.dtype, device=x.device)  # row m*topk + s, as the kernel's
    for e in range(w1.shape[0]):
        tok, slot = torch.where(topk_ids == e)
        if tok.numel() == 0:
            continue
        h = (xd[tok] @ _expert(w1, w1_scale, e).T).to(x.dtype).float()
        act[tok * topk + slot] = (F.silu(h[:, :N]) * h[:, N:]).to(x.dtype)
    return down_reference(act, w2, topk_weights, topk_ids, w2_scale, quant)


def down_reference(act, w2, topk_weights, topk_ids, w2_scale=None, quant=None) -> torch.Tensor:
    """The down GEMM alone: act (M*topk, N) holds the SiLU*up of each (token, slot) pair, row m*topk + s; with
    ``w2_scale``, fp8_w8a8 as in moe_reference."""
    M, topk = topk_ids.shape
    a = act.double() if w2_scale is None else _dequantised(act, quant)
    out = torch.zeros(M, w2.shape[1], dtype=torch.float64, device=act.device)
    for e in range(w2.shape[0]):
        tok, slot = torch.where(topk_ids == e)
        if tok.numel() == 0:
            continue
        y = a[tok * topk + slot] @ _expert(w2, w2_scale, e).T
        out.index_add_(0, tok, y * topk_weights[tok, slot, None].double())
    return out
