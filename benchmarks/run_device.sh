#!/usr/bin/env bash
# One device call (<= 10 min): GPU tests, the sweep-engine and artifact benchmarks, the regression guard on the
# committed configs. Results go to benchmarks/results, or under the device tool's $OUT as one results.tar (it returns
# at most 8 files). The long SGLang-grid sweep is run_sweep_grid.sh.
set -uo pipefail
source benchmarks/device_common.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$BENCH_OUT/nvidia_smi.txt"
timeout 130 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py 2>&1 | tee "$BENCH_OUT/gpu_tests.txt" | tail -5
(cd benchmarks && timeout 250 python3 precompile_speedup.py) 2>&1 | tail -12
(cd benchmarks && timeout 90 python3 cost_vs_autotune.py) 2>&1 | tail -12
(cd benchmarks && timeout 40 python3 tuned_launch_overhead.py) 2>&1 | tail -8
timeout 50 python3 -m flytune_nb.cli check exports --md "$BENCH_OUT/check.md" --json "$BENCH_OUT/check.json" 2>&1 | tail -15
