#!/usr/bin/env bash
# Re-make matmul's committed exports for the GPU it runs on after a change to its kernel folder, in one go: a fresh
# sweep of the exported (N, K) at SGLang's batch sizes, the export (dropping every entry of the old kernel source), and
# the serving benchmark that reads the new files. About 450 s on the H200 (sweep ~250 s, benchmark ~150 s). On H100s the
# sweep and export took ~350 s on one host and the benchmark ~100 s, while another host's sweep alone ran past 450 s
# (32 of its 36 shapes in 330 s; M = 3072 and 4096 take longest): where one call has a time limit, stop it and run
# the script again with RESUME=1 and the same OUT, which keeps the store and resumes.
#
#   OUT=/some/folder bash scripts/gpu_remake_matmul_exports.sh
#   OUT=/some/folder RESUME=1 bash scripts/gpu_remake_matmul_exports.sh
#   OUT=/some/folder BENCH=0 bash scripts/gpu_remake_matmul_exports.sh   # sweep and export only
#
# Needs the `search` extra (optuna) for the surrogate strategy, beside torch and triton.
#
# Writes: $OUT/matmul_resweep.db (the store; commit it under benchmarks/results/<device>/stores/), the exports in
# place under flytune_nb/exports/matmul/ plus a tar of them in $OUT (their names hold '=' and ',', which some copy
# tools drop), and serving_vs_torch's result under $OUT/results/.
set -euo pipefail
OUT=${OUT:-$(mktemp -d)}
PY=${PY:-python3}
mkdir -p "$OUT/results"
DB="$OUT/matmul_resweep.db"
# from empty: a store's older rows would be exported beside the new ones' source only by --replace-stale
[ -n "${RESUME:-}" ] || rm -f "$DB"
$PY -m flytune_nb sweep matmul --grid "M=sglang N=4096,14336 K=4096" --dtype bf16 --strategy surrogate --budget 24 \
    --baselines none --rep-ms 25 --db "$DB"
$PY -m flytune_nb export --db "$DB" --kernel matmul --replace-stale
tar -C flytune_nb/exports -cf "$OUT/matmul_exports.tar" matmul
[ "${BENCH:-1}" = 0 ] || $PY -m benchmarks serving_vs_torch --out "$OUT/results"
echo "done: $OUT"
