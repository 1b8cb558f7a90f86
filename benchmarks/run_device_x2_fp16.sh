#!/usr/bin/env bash
# Issue #4 on a 2-GPU H200 host (kind nvidia-h200-x2), device call 1 of session 3:
#   1. smoke-test flytune_nb.launch's remembered kernels on the GPU; stop here if that fails (the sweeps use it);
#   2. time the launch paths (tuned call vs raw Triton launch);
#   3. sweep fp16 for both row kernels over SGLang's batch sizes x N, spread over both GPUs (--gpus 0,1, which is
#      also issue #3's several-local-GPUs run), into a copy of the committed store; export everything.
set -uo pipefail
source benchmarks/device_common.sh
PACK_EXTRA=(exports)
nvidia-smi -L > "$BENCH_OUT/nvidia_smi_x2.txt"
python3 -m pytest -q -m gpu tests/test_gpu.py -k remembered -p no:cacheprovider 2>&1 | tee "$BENCH_OUT/gpu_smoke.txt" | tail -3
grep -q " passed" "$BENCH_OUT/gpu_smoke.txt" && ! grep -q -E "failed|error" "$BENCH_OUT/gpu_smoke.txt" || { echo SMOKE FAILED; exit 1; }
(cd benchmarks && timeout 120 python3 tuned_launch_overhead.py) 2>&1 | tail -20
# which processes sit on which GPU, every 5 s: the evidence that both GPUs did work
(while true; do date +%T; nvidia-smi --query-compute-apps=gpu_bus_id,pid,used_memory --format=csv,noheader; sleep 5; done) \
  > "$BENCH_OUT/gpu_apps_fp16.txt" 2>&1 &
DB=$BENCH_OUT/h200_sweeps.db
cp benchmarks/results/h200_sweeps.db "$DB"
for k in rmsnorm fused_add_rmsnorm; do
  start=$(date +%s)
  timeout ${STEP_TIMEOUT:-200} python3 -m flytune_nb.cli sweep $k --grid "M=sglang N=2048,4096,5120,8192" \
    --dtype fp16 --strategy halving --db "$DB" --baselines none --rep-ms 25 --gpus 0,1 --quiet 2>&1 | tail -4
  echo "$k fp16 on 2 GPUs: $(( $(date +%s) - start )) s" | tee -a "$BENCH_OUT/sweep_x2_times.txt"
done
checkpoint_db "$DB"
python3 -m flytune_nb.cli export --db "$DB" --out exports 2>&1 | tail -5
