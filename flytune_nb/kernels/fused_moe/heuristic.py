"""The heuristic default for fused_moe, from the tokens each expert sees: t = M * topk / E.

- t < 4 (decode; Mixtral E=8, topk=2 up to M=15): every active expert's weights are read once for a handful of
  rows, so the GEMMs are bound by weight bandwidth — the smallest row tile (BM=16, as SGLang's fallback picks for
  M <= E), BN=64, a long BK=128 for contiguous weight loads, 4 warps, 4 stages in flight;
- 4 <= t <= 16: still weight-bound, but wider tiles keep more bytes in flight per program: BM=32 (64 from t=12), BN=128,
  BK=128, GROUP_SIZE_M=16, 4 warps, 3 stages (4 with BM=64). The H200 sweeps (the store behind
  benchmarks/results/NVIDIA_H200/heuristic_ab.md, 32 surrogate picks per batch size) put a BM=16 rule at 1.21-1.45x
  the best there for Mixtral (E=8, N=14336, M=16..64); the best configs were 32-64 row tiles with BN=128;
- 16 < t <= 128: BM=64, BN=128, BK=64, GROUP_SIZE_M=16, 4 warps, 3 stages — weight reuse across 64 rows starts to pay;
- t > 128 (prefill, compute-bound): 128x128x64 on 8 warps, 3 stages, GROUP_SIZE_M=16 so programs that share an
  expert's weight panel run together. On HIP: 2 stages (the ROCm space).
The wish is landed on the nearest config of the pruned space, so the default is always one the sweep also times.
"""
from __future__ import annotations

from flytune_nb.config import Config
from flytune_nb.spaces import TILE_WEIGHTS, nearest

from .configs import configs


def default(shape, dtype, device) -> Config:
    t = shape["M"] * shape["topk"] / shape["E"]
    if t < 4:
        bm, bn, bk, group, warps, stages = 16, 64, 128, 1, 4, 4
    elif t <= 16:
        bm, bn, bk, group, warps, stages = (32, 128, 128, 16, 4, 3) if t < 12 else (64, 128, 128, 16, 4, 4)
    elif t <= 128:
        bm, bn, bk, group, warps, stages = 64, 128, 64, 16, 4, 3
    else:
        bm, bn, bk, group, warps, stages = 128, 128, 64, 16, 8, 3
    if device.backend == "hip":
        stages = 2
    wish = Config({"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": group},
                  num_warps=warps, num_stages=stages)
    return nearest(configs(shape, dtype, device), wish, TILE_WEIGHTS)
