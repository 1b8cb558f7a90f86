#!/usr/bin/env bash
# One device call: GPU tests, the demo, the benchmarks. Results go to $OUT (device tool) or benchmarks/results.
set -uo pipefail
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1 BENCH_OUT=${OUT:-benchmarks/results}
mkdir -p "$BENCH_OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$BENCH_OUT/nvidia_smi.txt"
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py 2>&1 | tee "$BENCH_OUT/gpu_tests.txt"
timeout 100 python3 -m flytune_nb.cli demo --quiet 2>&1 | tee "$BENCH_OUT/demo.txt"
(cd benchmarks && timeout 120 python3 timing_fidelity.py) 2>&1 | tail -20
(cd benchmarks && timeout 330 python3 kernels_vs_torch.py) 2>&1 | tail -25
