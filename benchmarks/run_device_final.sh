#!/usr/bin/env bash
# Device call 3 of run 5: the regression guard again (with confirmation re-timing), then the kernels slice.
set -uo pipefail
source benchmarks/device_common.sh
timeout 150 python3 -m flytune_nb.cli check exports --md "$BENCH_OUT/check.md" --json "$BENCH_OUT/check.json" 2>&1 | tail -25
(cd benchmarks && BENCH_DEADLINE_S=${DEADLINE:-200} timeout 260 python3 kernels_grid.py) 2>&1 | tail -45
