#!/usr/bin/env bash
# Session 5, device call 1 (nvidia-h200): the code after session 4's run D, on the GPU for the first time.
#   1. every GPU test (feeder/free slot/watchdog pool, torch-read target, review refactors: unverified so far);
#   2. cost vs triton.autotune (first sweep and a later one);
#   3. precompile speedup, 50 and 100 GEMM configs, each in a fresh process;
#   4. where a sweep's time goes: the parent's calls traced, the timing worker profiled (cProfile snapshots).
set -uo pipefail
source benchmarks/device_common.sh
TAG=${TAG:-s5a}
timeout ${GPU_TESTS_S:-200} python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py 2>&1 \
  | tee "$BENCH_OUT/gpu_tests_$TAG.txt" | tail -4
cd benchmarks
timeout 120 python3 cost_vs_autotune.py 2>&1 | grep -v Warn | tail -16
SIZES=${SIZES:-50,100} timeout 200 python3 precompile_speedup.py 2>&1 | grep -v Warn | tail -7
SECTIONS=cprofile PROFILE_NAME=startup_profile_$TAG.json timeout 90 python3 startup_profile.py 2>&1 | grep -v Warn | cut -c1-400 | tail -4
