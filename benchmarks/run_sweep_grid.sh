#!/usr/bin/env bash
# The committed-configs sweep: SGLang's batch sizes x hidden sizes, bf16 + fp16, both kernels, resumable.
# Successive halving with sweep-grade timing keeps one kernel x dtype under ~10 min on the H200; re-run the same
# command after a time-out and it continues where it stopped (the store is the state). Then:
#   flytune export --db benchmarks/results/h200_sweeps.db --out exports
set -uo pipefail
source benchmarks/device_common.sh  # import path, unbuffered output, checkpoint_db
DB=${OUT:-benchmarks/results}/h200_sweeps.db
[ -f benchmarks/results/h200_sweeps.db ] && [ "$DB" != benchmarks/results/h200_sweeps.db ] && cp benchmarks/results/h200_sweeps.db "$DB"
for dtype in ${DTYPES:-bf16 fp16}; do
  for k in ${KERNELS:-rmsnorm fused_add_rmsnorm}; do
    timeout ${STEP_TIMEOUT:-280} python3 -m flytune_nb.cli sweep $k --grid "M=sglang N=2048,4096,5120,8192" \
      --dtype $dtype --strategy halving --db "$DB" --baselines none --rep-ms 25 --quiet 2>&1 | tail -3
  done
done
checkpoint_db "$DB"
