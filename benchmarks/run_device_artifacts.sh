#!/usr/bin/env bash
# Device call 1 of run 5 (<= 10 min): finish the committed-config sweep, export on the device, guard it with
# `flytune check`, serve from it, measure the consumption paths and the precompile pool. Returns $OUT/results.tar
# (res/ + exports/) and $OUT/h200_sweeps.db.
set -uo pipefail
source benchmarks/device_common.sh
PACK_EXTRA=(exports)
STEP_TIMEOUT=140 DTYPES=bf16 KERNELS=fused_add_rmsnorm bash benchmarks/run_sweep_grid.sh
DB=${OUT:-benchmarks/results}/h200_sweeps.db
timeout 30 python3 -m flytune_nb.cli export --db "$DB" --out exports
timeout 100 python3 -m flytune_nb.cli check exports --md "$BENCH_OUT/check.md" --json "$BENCH_OUT/check.json" 2>&1 | tail -6
timeout 30 python3 examples/serve.py --kernel rmsnorm --shape N=4096 --dtype bf16 --json "$BENCH_OUT/serve_h200.json" 2>&1 | tee "$BENCH_OUT/serve_h200.txt" | tail -4
(cd benchmarks && timeout 50 python3 consumption_paths.py) 2>&1 | tail -9
(cd benchmarks && timeout 200 python3 precompile_speedup.py) 2>&1 | tail -8
