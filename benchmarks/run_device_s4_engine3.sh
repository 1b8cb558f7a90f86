#!/usr/bin/env bash
# Device call 5 of session 4 (nvidia-h200), the last of its budget: Triton's version key computed once in the
# forkserver (flytune_nb._preload). Cost vs triton.autotune, precompile speedup, then the GPU tests of the pool path.
set -uo pipefail
source benchmarks/device_common.sh
cd benchmarks
timeout 110 python3 cost_vs_autotune.py 2>&1 | grep -v Warn | tail -16
SIZES=${SIZES:-50,100} timeout 170 python3 precompile_speedup.py 2>&1 | grep -v Warn | tail -7
cd ..
timeout 60 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py -k "precompile_on_meta or isolated" 2>&1 \
  | tee "$BENCH_OUT/gpu_tests_s4d.txt" | tail -3
