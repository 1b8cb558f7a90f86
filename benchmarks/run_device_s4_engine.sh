#!/usr/bin/env bash
# Device calls 2 and 3 of session 4 (nvidia-h200): issue #3's engine changes on the GPU.
#   1. every GPU test (the forkserver workers, compile-only precompile, the timer's flush-aware spin are new);
#   2. timing fidelity (the timer change must keep the spread and the medians);
#   3. cost vs triton.autotune (first sweep and a later one);
#   4. precompile speedup, 50 and 100 GEMM configs, each run in a fresh process;
#   5. traced sweeps: where the time goes now.
set -uo pipefail
source benchmarks/device_common.sh
timeout ${GPU_TESTS_S:-200} python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py 2>&1 \
  | tee "$BENCH_OUT/gpu_tests_s4.txt" | tail -4
cd benchmarks
timeout 120 python3 timing_fidelity.py 2>&1 | tail -9
timeout 150 python3 cost_vs_autotune.py 2>&1 | grep -v Warn | tail -16
SIZES=${SIZES:-50,100} timeout 240 python3 precompile_speedup.py 2>&1 | grep -v Warn | tail -12
SECTIONS=ctx,sweep PROFILE_NAME=startup_profile_after.json timeout 90 python3 startup_profile.py 2>&1 | grep -v Warn | tail -3
