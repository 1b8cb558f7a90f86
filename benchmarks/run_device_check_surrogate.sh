#!/usr/bin/env bash
# Device call 3 of session 3 (nvidia-h200, .whl carried for optuna), the last of the session's budget:
#   1. `flytune check exports` (drift-aware guard) over all 288 committed entries, on the kind the bf16 files were
#      tuned on (the x2 host of call 2 timed every tiny kernel ~1 us slower; see check_x2_nodrift.*);
#   2. issue #3's surrogate benchmark on one GEMM-sized space (M=256 N=K=4096: 618 configs), exhaustive then
#      replayed; a sweep cut short by its time limit is replayed over what finished and says so.
set -uo pipefail
source benchmarks/device_common.sh
source benchmarks/install_carried.sh || { echo INSTALL FAILED; exit 1; }
timeout ${CHECK_S:-330} python3 -m flytune_nb.cli check exports --md "$BENCH_OUT/check.md" --json "$BENCH_OUT/check.json" \
  > "$BENCH_OUT/check.txt" 2>&1
echo "check exit code: $?" | tee -a "$BENCH_OUT/check.txt"
grep -E "^(FAIL|WARN)" "$BENCH_OUT/check.txt" | cut -c1-160 | head -20; tail -3 "$BENCH_OUT/check.txt"
start=$(date +%s)
(cd benchmarks && SHAPES="M=256 N=4096 K=4096" timeout ${SURROGATE_S:-200} python3 surrogate_gemm.py) 2>&1 | tail -8
checkpoint_db "$BENCH_OUT/gemm_sweeps.db"
[ -f "$BENCH_OUT/surrogate_matmul.md" ] || (cd benchmarks && python3 surrogate_gemm.py --replay "$BENCH_OUT/gemm_sweeps.db") 2>&1 | tail -8
echo "surrogate step: $(( $(date +%s) - start )) s"
