#!/usr/bin/env bash
# Device call 4 of session 4 (nvidia-h200): the pool compiling with no CUDA in its processes (flytune_nb.compiling).
#   1. the GPU tests that exercise it (the full suite passed in call 3 on the code before this change);
#   2. is there a context in a pool process after compiling? (startup_profile ctx), and traced sweeps;
#   3. cost vs triton.autotune; 4. precompile speedup (50 and 100 GEMM configs, fresh processes).
set -uo pipefail
source benchmarks/device_common.sh
timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py \
  -k "precompile or isolated or remembered or timer or search" 2>&1 | tee "$BENCH_OUT/gpu_tests_s4c.txt" | tail -4
cd benchmarks
SECTIONS=ctx,sweep PROFILE_NAME=startup_profile_s4c.json timeout 90 python3 startup_profile.py 2>&1 | grep -v Warn | tail -3
timeout 150 python3 cost_vs_autotune.py 2>&1 | grep -v Warn | tail -16
SIZES=${SIZES:-50,100} timeout 240 python3 precompile_speedup.py 2>&1 | grep -v Warn | tail -9
