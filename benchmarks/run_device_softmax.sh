#!/usr/bin/env bash
# Session 5, device call 5 (nvidia-h200): issue #6's committed softmax configs. SGLang's 18 batch sizes x N=4096,8192,
# bf16, every config of the space (44 at N=4096), 25 ms of reps. The store is resumable: a call cut short by its
# limit exports what it measured, and the same script continues it.
set -uo pipefail
source benchmarks/device_common.sh
results_db softmax_sweeps.db  # continues the committed store, as the comment above says
STRATEGY=exhaustive GPUS= store_sweep softmax "M=sglang N=4096,8192" ${SWEEP_S:-150}
export_and_regret softmax
