"""torch's own fused MoE path (a helper, not a benchmark), the baseline benchmarks/moe_baselines.py times beside
ours: the (token, slot) pairs sorted by expert and each GEMM run as one grouped GEMM over the experts' runs
(torch._grouped_mm: CUTLASS on sm_90, torch >= 2.8). It lives here, not in flytune_nb/kernels/fused_moe/, because
every file of a kernel folder is part of the kernel's source fingerprint: a benchmark-only baseline there would
retire the kernel's stored timings and exports."""
import torch
import torch.nn.functional as F

HELPER = True  # imported by moe_baselines and tests/kernels/test_fused_moe.py; not a benchmark


def fused_moe_grouped(x, w1, w2, topk_weights, topk_ids):
    """fused_moe's computation (w1 (E, 2N, K) gate+up, SiLU * up, w2 (E, K, N) down, weighted top-k sum)."""
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
