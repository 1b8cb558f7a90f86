"""The space SGLang's own tuning script sweeps, in its order, pruned before anything compiles.

SGLang's space (benchmark/kernels/fused_moe_triton/common_utils.py, ``get_configs_compute_bound``; the benchmark
folder is not part of the sglang wheel and nothing in the wheel exposes it, so this is our copy of the rule):
- NVIDIA: num_stages {2,3,4,5} x BLOCK_SIZE_M {16,32,64,128,256} x BLOCK_SIZE_K {64,128,256} x BLOCK_SIZE_N
  {32,64,128,256} x num_warps {4,8} x GROUP_SIZE_M {1,16,32,64} = 1920 configs, looped in that order;
- ROCm (``get_rocm_configs_compute_bound``): num_stages {2} x BM {32,64,128,256} x BK {32,64,128,256} x BN
  {16,32,64,128,256} x warps {1,2,4,8} x GROUP {1,4,8,16,32}, each with waves_per_eu=0 = 1600.

Pruned as flytune's own fused_moe space is (kernels/fused_moe/configs.py), since SGLang times every one of them:
- shared memory (LDS) and accumulators per thread from the device (flytune_nb.kit.spaces.tile_fits): a config that
  cannot compile or spills is never a winner (SGLang's search_space.py filter keeps only the staged-operand bound);
- BLOCK_SIZE_M above next_pow2(M*topk) pads every expert's run for nothing;
- BLOCK_SIZE_K above next_pow2(max(K, N)), or not dividing K and N where they are multiples of 64 (SGLang's launcher
  then takes the masked loop: even_Ks is K % BLOCK_SIZE_K == 0);
- BLOCK_SIZE_N above next_pow2(max(2N, K));
- GROUP_SIZE_M values that give the same tile order as a smaller one (flytune_nb.kit.spaces.group_options).
"""
from __future__ import annotations

from itertools import product

from flytune_nb.kit import Config
from flytune_nb.kit.spaces import group_options, next_pow2, tile_fits

NVIDIA = dict(stages=(2, 3, 4, 5), bm=(16, 32, 64, 128, 256), bk=(64, 128, 256), bn=(32, 64, 128, 256),
              warps=(4, 8), groups=(1, 16, 32, 64))
ROCM = dict(stages=(2,), bm=(32, 64, 128, 256), bk=(32, 64, 128, 256), bn=(16, 32, 64, 128, 256),
            warps=(1, 2, 4, 8), groups=(1, 4, 8, 16, 32))


def sglang_space(device) -> list[Config]:
    """SGLang's whole space for this device's vendor, unpruned, in its loop order."""
    hip = device.backend == "hip"
    s = ROCM if hip else NVIDIA
    extra = {"waves_per_eu": 0} if hip else {}
    return [Config({"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": g},
                   num_warps=w, num_stages=st, **extra)
            for st, bm, bk, bn, w, g in product(s["stages"], s["bm"], s["bk"], s["bn"], s["warps"], s["groups"])]


def configs(shape, dtype, device, *, block_m: int | None = None) -> list[Config]:
    """``block_m``: only configs with this BLOCK_SIZE_M (the down GEMM shares the up GEMM's alignment)."""
    M, E, N, K, topk = shape["M"], shape["E"], shape["N"], shape["K"], shape["topk"]
    s = ROCM if device.backend == "hip" else NVIDIA
    rows = M * topk
    bm_cap = max(s["bm"][0], next_pow2(rows))
    bn_cap = max(s["bn"][0], next_pow2(max(2 * N, K)))
    bk_cap = max(s["bk"][0], next_pow2(max(K, N)))
    fits: dict = {}
    out = []
    for c in sglang_space(device):
        bm, bn, bk = c["BLOCK_SIZE_M"], c["BLOCK_SIZE_N"], c["BLOCK_SIZE_K"]
        if block_m is not None and bm != block_m:
            continue
        if block_m is None and bm > bm_cap:
            continue
        if bn > bn_cap or bk > bk_cap or any(d % 64 == 0 and d % bk for d in (K, N)):
            continue
        key = (bm, bn, bk, c.num_warps, c.num_stages)
        if key not in fits:
            fits[key] = tile_fits(bm, bn, bk, c.num_warps, c.num_stages, dtype, device)
        if not fits[key]:
            continue
        tiles_m = -(-(rows + (E + 1) * (bm - 1)) // bm)  # the grid's worst-case row tiles
        if c["GROUP_SIZE_M"] not in group_options(tiles_m, s["groups"]):
            continue
        out.append(c)
    return out
