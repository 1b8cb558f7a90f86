#!/usr/bin/env bash
# Session 5, device call 5 (nvidia-h200): issue #6's committed softmax configs. SGLang's 18 batch sizes x N=4096,8192,
# bf16, every config of the space (44 at N=4096), 25 ms of reps. The store is resumable: a call cut short by its
# limit exports what it measured, and the same script continues it.
set -uo pipefail
source benchmarks/device_common.sh
DB=${OUT:-benchmarks/results}/softmax_sweeps.db
start=$(date +%s)
timeout ${SWEEP_S:-150} python3 -m flytune_nb.cli sweep softmax --grid "M=sglang N=4096,8192" --dtype bf16 \
  --db "$DB" --baselines none --rep-ms 25 --quiet 2>&1 | tail -6
echo "softmax: $(( $(date +%s) - start )) s"
checkpoint_db "$DB"
python3 -m flytune_nb.cli export --db "$DB" --out exports 2>&1 | tail -3
(cd benchmarks && python3 heuristic_regret.py "$DB") 2>&1 | tail -5
PACK_EXTRA=(exports)
