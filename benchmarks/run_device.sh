#!/usr/bin/env bash
# One device call: GPU tests, the benchmarks, a stored H200 sweep (the strategies' replay fixture), the demo.
# Results go to $OUT (device tool) or benchmarks/results.
set -uo pipefail
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1 BENCH_OUT=${OUT:-benchmarks/results}
mkdir -p "$BENCH_OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$BENCH_OUT/nvidia_smi.txt"
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py 2>&1 | tee "$BENCH_OUT/gpu_tests.txt" | tail -5
(cd benchmarks && timeout 120 python3 precompile_speedup.py) 2>&1 | tail -12
(cd benchmarks && timeout 90 python3 cost_vs_autotune.py) 2>&1 | tail -12
for k in rmsnorm fused_add_rmsnorm; do
  timeout 100 python3 -m flytune_nb.cli sweep $k --grid "M=1,64,4096 N=4096,8192" --db "$BENCH_OUT/h200_sweeps.db" \
    --baselines none --quiet 2>&1 | tail -9
done
timeout 100 python3 -m flytune_nb.cli demo --quiet 2>&1 | tee "$BENCH_OUT/demo.txt" | tail -8
