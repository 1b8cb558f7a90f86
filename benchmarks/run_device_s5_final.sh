#!/usr/bin/env bash
# Session 5, device call 3 (nvidia-h200): after the forkserver preloads torch's meta machinery and the pool builds
# Triton's C helpers, and with the new matmul / fused_moe heuristics.
#   1. every GPU test;
#   2. why this host compiles Python sources in every process (bytecode caches?);
#   3. cost vs triton.autotune as the host is, then with a bytecode cache (PYTHONPYCACHEPREFIX, filled first), as
#      a pip install that compiled its .pyc files would have;
#   4. precompile speedup, 50 and 100 GEMM configs;
#   5. where a sweep's time goes now (traced + the worker profiled);
#   6. old vs new heuristic defaults against the searched best of moe_gemm_sweeps.db.
set -uo pipefail
source benchmarks/device_common.sh
TAG=${TAG:-s5b}
timeout ${GPU_TESTS_S:-200} python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py 2>&1 \
  | tee "$BENCH_OUT/gpu_tests_$TAG.txt" | tail -4
python3 - <<'PY' 2>&1 | tee "$BENCH_OUT/pyc_$TAG.txt"
import os, sys, torch
d = os.path.dirname(torch.__file__)
print("dont_write_bytecode", sys.flags.dont_write_bytecode, "PYTHONDONTWRITEBYTECODE", os.environ.get("PYTHONDONTWRITEBYTECODE"),
      "torch dir writable", os.access(d, os.W_OK), "pycache entries", len(os.listdir(os.path.join(d, "__pycache__"))) if os.path.isdir(os.path.join(d, "__pycache__")) else None)
PY
cd benchmarks
timeout 200 python3 heuristic_ab.py 2>&1 | grep -v Warn | tail -12
BENCH_NAME=cost_vs_autotune_$TAG timeout 100 python3 cost_vs_autotune.py 2>&1 | grep -v Warn | tail -16
export PYTHONPYCACHEPREFIX=/tmp/pyc
timeout 60 python3 -c "import sys; sys.path.insert(0, '..'); import torch, triton, flytune_nb._preload, flytune_nb.sweep" 2>&1 | tail -2
BENCH_NAME=cost_vs_autotune_${TAG}_pyc timeout 100 python3 cost_vs_autotune.py 2>&1 | grep -v Warn | tail -9
unset PYTHONPYCACHEPREFIX
SIZES=${SIZES:-50,100} timeout 200 python3 precompile_speedup.py 2>&1 | grep -v Warn | tail -7
SECTIONS=cprofile PROFILE_NAME=startup_profile_$TAG.json timeout 80 python3 startup_profile.py 2>&1 | grep -v Warn | cut -c1-600 | tail -4
