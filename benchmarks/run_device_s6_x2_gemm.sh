#!/usr/bin/env bash
# Session 6, device call 2 (nvidia-h200-x2, .whl carried for optuna): matmul's committed configs again, now that its
# space has the persistent TMA path above M=128 and its kernel source changed (an export file holds one source
# version, so every batch size is swept again, not only the large ones). SGLang's 18 batch sizes x N,K = 4096,4096
# and 14336,4096, bf16, surrogate search (32 picks per shape, the heuristic default always among them), both GPUs.
# Then: export into exports/, heuristic regret from the store, and the launch-overhead benchmark (rmsnorm's kernel
# gained an argument and a constexpr).
set -uo pipefail
source benchmarks/device_common.sh
source benchmarks/install_carried.sh || { echo INSTALL FAILED; exit 1; }
# A store of its own: the regret script groups a store's trials by shape, and session 5's pointer-only matmul trials
# (moe_gemm_sweeps.db) are of the older kernel source.
results_db gemm_tma_sweeps.db
store_sweep matmul "M=sglang N=4096,14336 K=4096" ${GEMM_S:-240}
export_and_regret matmul
(cd benchmarks && timeout 60 python3 tuned_launch_overhead.py) 2>&1 | grep -v Warn | tail -12
