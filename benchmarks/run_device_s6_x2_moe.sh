#!/usr/bin/env bash
# Session 6, device call 5 (nvidia-h200-x2, optuna's wheels carried): fused_moe's committed configs again, now that
# make_inputs draws each shape's routing from a seed (session 5's sweeps drew a new routing per timing, and a small-M
# config measured up to 16% apart within one run). A fresh store, so no trial of the unseeded sweeps is replayed;
# same shapes, batch sizes and budget as session 5 (run_device_x2_moe_gemm.sh). Then export and regret.
set -uo pipefail
source benchmarks/device_common.sh
source benchmarks/install_carried.sh || { echo INSTALL FAILED; exit 1; }
results_db moe_seeded_sweeps.db
store_sweep fused_moe "M=sglang E=8 N=14336 K=4096 topk=2" ${MOE_S:-130}
store_sweep fused_moe "M=sglang E=128 N=768 K=2048 topk=8" ${MOE_S:-130}
export_and_regret fused_moe
