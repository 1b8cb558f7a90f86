#!/usr/bin/env bash
# Session 5, device call 4 (nvidia-h200): the forkserver computes Triton's key beside torch's meta-op imports.
#   1. the GPU tests of the isolated, precompiled path;
#   2. cost vs triton.autotune as the host is (PYTHONDONTWRITEBYTECODE=1, no .pyc anywhere), then with bytecode
#      caches as a pip install has them (writing allowed, cached under PYTHONPYCACHEPREFIX by one import first);
#   3. precompile speedup, 50 and 100 GEMM configs.
set -uo pipefail
source benchmarks/device_common.sh
TAG=${TAG:-s5c}
timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py -k "precompile or isolated or c_helpers or target" 2>&1 \
  | tee "$BENCH_OUT/gpu_tests_$TAG.txt" | tail -3
cd benchmarks
BENCH_NAME=cost_vs_autotune_$TAG timeout 100 python3 cost_vs_autotune.py 2>&1 | grep -v Warn | tail -12
export PYTHONPYCACHEPREFIX=/tmp/pyc; unset PYTHONDONTWRITEBYTECODE
timeout 60 python3 -c "import sys; sys.path.insert(0, '..'); import torch, triton, flytune_nb._preload, flytune_nb.sweep, flytune_nb.tasks, flytune_nb.trial" 2>&1 | tail -2
echo "pyc files: $(find /tmp/pyc -name '*.pyc' | wc -l)"
BENCH_NAME=cost_vs_autotune_${TAG}_pyc timeout 100 python3 cost_vs_autotune.py 2>&1 | grep -v Warn | tail -12
export PYTHONDONTWRITEBYTECODE=1; unset PYTHONPYCACHEPREFIX
SIZES=${SIZES:-50,100} timeout 170 python3 precompile_speedup.py 2>&1 | grep -v Warn | tail -5
