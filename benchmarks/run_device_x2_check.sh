#!/usr/bin/env bash
# Device call 2 of session 3 (nvidia-h200-x2, .whl carried):
#   GPU 0: every GPU test; GPU 1 meanwhile: `flytune check exports` over all 288 committed entries (issue #4);
#   then, on the idle machine, the launch-overhead benchmark (issue #4) and a sweep through Ray with one actor per
#   GPU (issue #3), with a sampler recording which processes sit on which GPU.
set -uo pipefail
source benchmarks/device_common.sh
source benchmarks/install_carried.sh || { echo INSTALL FAILED; exit 1; }
CUDA_VISIBLE_DEVICES=0 timeout 420 python3 -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider \
  > "$BENCH_OUT/gpu_tests_run6.txt" 2>&1 &
TESTS=$!
CUDA_VISIBLE_DEVICES=1 timeout 420 python3 -m flytune_nb.cli check exports --md "$BENCH_OUT/check.md" \
  --json "$BENCH_OUT/check.json" > "$BENCH_OUT/check.txt" 2>&1
echo "check exit code: $?" | tee -a "$BENCH_OUT/check.txt"
wait $TESTS; echo "gpu tests exit code: $?" >> "$BENCH_OUT/gpu_tests_run6.txt"
tail -4 "$BENCH_OUT/gpu_tests_run6.txt"; tail -6 "$BENCH_OUT/check.txt"
(cd benchmarks && timeout 120 python3 tuned_launch_overhead.py) 2>&1 | tail -24
(while true; do date +%T; nvidia-smi --query-compute-apps=gpu_bus_id,pid,process_name,used_memory --format=csv,noheader; sleep 3; done) \
  > "$BENCH_OUT/gpu_apps_ray.txt" 2>&1 &
start=$(date +%s)
timeout 150 python3 -m flytune_nb.cli sweep softmax --grid "M=1,64,1024,4096 N=4096,8192" --dtype bf16 --ray local \
  --db "$BENCH_OUT/ray_x2.db" --baselines none --rep-ms 25 --quiet > "$BENCH_OUT/ray_x2.txt" 2>&1
echo "ray sweep exit code $? after $(( $(date +%s) - start )) s" >> "$BENCH_OUT/ray_x2.txt"
tail -14 "$BENCH_OUT/ray_x2.txt"
python3 -c "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('PRAGMA wal_checkpoint(TRUNCATE)'); print(c.execute('select status, count(*) from trials group by status').fetchall()); c.close()" "$BENCH_OUT/ray_x2.db"
