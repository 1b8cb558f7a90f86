"""Search space for fused_moe: SGLang's NVIDIA space (REFERENCE.md) — num_stages {2,3,4,5} x BLOCK_SIZE_M
{16..256} x BLOCK_SIZE_K {64,128,256} x BLOCK_SIZE_N {32..256} x num_warps {4,8} x GROUP_SIZE_M {1,16,32,64}, 1920
raw — and its ROCm one (num_stages 2, BK/BN from 16/32, warps 1-8, GROUP {1,4,8,16,32}, waves_per_eu unset), pruned
before anything compiles:
- shared memory / LDS and accumulators per thread, as for matmul (flytune_nb.spaces.tile_fits), for the larger of
  the two GEMMs' K (both use the same config);
- BLOCK_SIZE_M above next_pow2(M*topk) pads every expert's run for nothing (with M=1 only BM=16 survives);
- BLOCK_SIZE_K up to next_pow2(max(K, N)), and it must divide K and N where they are multiples of 64 (the first
  GEMM reduces over K, the second over N; both then run the unmasked loop);
- GROUP_SIZE_M values that give the same tile order as a smaller one are dropped (flytune_nb.spaces.group_options,
  counted on the worst-case number of row tiles).
E=8, N=14336, K=4096, topk=2, bf16 on the H200: M=1 -> 136 configs, M=64 -> 524, M=4096 -> 1152.
"""
from __future__ import annotations

from itertools import product

from flytune_nb.config import Config
from flytune_nb.spaces import group_options, next_pow2, prefer_wide_loads, tile_fits

NV = dict(bm=(16, 32, 64, 128, 256), bn=(32, 64, 128, 256), bk=(64, 128, 256), warps=(4, 8), stages=(2, 3, 4, 5),
          groups=(1, 16, 32, 64))
ROCM = dict(bm=(32, 64, 128, 256), bn=(16, 32, 64, 128, 256), bk=(32, 64, 128, 256), warps=(1, 2, 4, 8), stages=(2,),
            groups=(1, 4, 8, 16, 32))


def configs(shape, dtype, device) -> list[Config]:
    M, E, N, K, topk = shape["M"], shape["E"], shape["N"], shape["K"], shape["topk"]
    s = ROCM if device.backend == "hip" else NV
    rows = M * topk
    bms = [b for b in s["bm"] if b <= max(s["bm"][0], next_pow2(rows))]
    two_n = 2 * N
    bns = [b for b in s["bn"] if b <= max(s["bn"][0], next_pow2(max(two_n, K)))]
    # Both GEMMs run with one BLOCK_SIZE_K: the first reduces over K, the second over N.
    bks = [b for b in s["bk"] if b <= max(s["bk"][0], next_pow2(max(K, N))) and all(d % 64 or d % b == 0 for d in (K, N))]
    out = []
    for bm, bn, bk, warps, stages in product(bms, bns, bks, s["warps"], s["stages"]):
        if not tile_fits(bm, bn, bk, warps, stages, dtype, device):
            continue
        tiles_m = -(-(rows + E * (bm - 1)) // bm)  # the grid's worst-case row tiles
        for g in group_options(tiles_m, s["groups"]):
            out.append(Config({"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": g},
                              num_warps=warps, num_stages=stages))
    return prefer_wide_loads(out, dtype, device)  # HIP: no tile too small for a 16-byte load, where others fit
