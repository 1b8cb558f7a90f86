#!/usr/bin/env bash
# Issue #6's committed configs for fused_moe and matmul (written in session 4 for the next device session; run on
# nvidia-h200-x2 with .whl carried, for optuna). SGLang's 18 batch sizes per model shape, bf16, surrogate search:
# the spaces are 136-1152 (MoE) and 68-1126 (GEMM) configs, too many to time whole in one session; the compile pool
# compiles each pick first and the rest of the space ahead (written after the last GPU run of session 4: unmeasured
# on the GPU). Both GPUs, one worker each; the store is resumable, so a call cut short by its time limit is
# continued by running the same script again.
#   MoE: Mixtral-8x7B (E=8 N=14336 K=4096 top-2) and Qwen3-30B-A3B (E=128 N=768 K=2048 top-8) — the pair.
#   GEMM: N,K = 4096,4096 and 14336,4096 (Llama-3-8B o_proj-like and a gate/up half), the shapes kernels_grid_gemm.md
#   compares with cuBLAS.
# Then: export (SGLang files + provenance into exports/), heuristic regret from the same store.
set -uo pipefail
source benchmarks/device_common.sh
source benchmarks/install_carried.sh || { echo INSTALL FAILED; exit 1; }
results_db moe_gemm_sweeps.db
store_sweep fused_moe "M=sglang E=8 N=14336 K=4096 topk=2" ${MOE_S:-150}
store_sweep fused_moe "M=sglang E=128 N=768 K=2048 topk=8" ${MOE_S:-150}
store_sweep matmul "M=sglang N=4096,14336 K=4096" ${GEMM_S:-150}
export_and_regret
