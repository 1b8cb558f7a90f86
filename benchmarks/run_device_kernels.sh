#!/usr/bin/env bash
# Device call 2 of run 5 (<= 10 min): GPU tests of what changed since run 4 (new kernels, tuner, precompile), the
# sweep-cost and launch-overhead benchmarks again, and the first kernels benchmark slice. Returns $OUT/results.tar.
set -uo pipefail
source benchmarks/device_common.sh
timeout 170 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py \
  -k "softmax or matmul or fused_moe or isolated_sweep or inplace_restore or search_beats" 2>&1 \
  | tee "$BENCH_OUT/gpu_tests_run5.txt" | tail -6
(cd benchmarks && timeout 60 python3 cost_vs_autotune.py) 2>&1 | tail -9
(cd benchmarks && timeout 40 python3 tuned_launch_overhead.py) 2>&1 | tail -14
(cd benchmarks && BENCH_DEADLINE_S=60 timeout 80 python3 kernels_grid.py) 2>&1 | tail -30
