"""SGLang's tuning space (kernels/sglang_fused_moe/configs.py), pruned the same way, with BLOCK_SIZE_M fixed to the up
config's (SGLang's own down-GEMM tuner, tune_down_moe.py, pins it the same way)."""
from __future__ import annotations

from .heuristic import up_config
from .kernel import base


def configs(shape, dtype, device):
    bm = up_config(shape, dtype, device)["BLOCK_SIZE_M"]
    return base().configs.configs(shape, dtype, device, block_m=bm)
