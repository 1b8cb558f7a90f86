# Sourced by the run_device*.sh scripts: import path, unbuffered output, where results go, and packing them.
# Under the device tool ($OUT set) results go to $OUT/res and leave as one results.tar (the tool returns at most 8
# files); elsewhere straight into benchmarks/results. `pack_results exports` also packs the exports folder.
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
if [ -n "${OUT:-}" ]; then export BENCH_OUT=$OUT/res; else export BENCH_OUT=$PWD/benchmarks/results; fi
mkdir -p "$BENCH_OUT"
PACK_EXTRA=()
pack_results() {
  [ -n "${OUT:-}" ] || return 0
  local d
  for d in "${PACK_EXTRA[@]}"; do cp -r "$d" "$OUT/$d"; done
  tar -C "$OUT" -cf "$OUT/results.tar" res "${PACK_EXTRA[@]}" && rm -rf "$OUT/res" "${PACK_EXTRA[@]/#/$OUT/}"
}
trap pack_results EXIT
# Fold a results store's write-ahead log into its file: a step killed by its timeout can leave trials only in -wal,
# and only the files named under $OUT come back.
checkpoint_db() {
  python3 -c "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('PRAGMA wal_checkpoint(TRUNCATE)'); c.close()" "$1"
}
# The GPU's clocks and every GPU test, into nvidia_smi_<tag>.txt and gpu_tests_<tag>.txt (GPU_TESTS_S bounds it).
gpu_tests() {
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv \
    > "$BENCH_OUT/nvidia_smi_$1.txt" 2>&1
  timeout ${GPU_TESTS_S:-200} python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py 2>&1 \
    | tee "$BENCH_OUT/gpu_tests_$1.txt" | tail -15
}
# One sweep into $DB, bounded by a time limit, then its write-ahead log folded in: store_sweep KERNEL GRID SECONDS.
# STRATEGY (default surrogate, $BUDGET picks per shape, default 32; "exhaustive" times the whole space) and GPUS
# (default 0,1: one worker per GPU; empty: one GPU) from the environment.
store_sweep() {
  local start=$(date +%s) strategy=${STRATEGY:-surrogate} gpus=${GPUS-0,1}
  timeout "$3" python3 -m flytune_nb.cli sweep "$1" --grid "$2" --dtype bf16 --strategy "$strategy" \
    $([ "$strategy" = surrogate ] && echo --budget "${BUDGET:-32}") ${gpus:+--gpus "$gpus"} \
    --db "$DB" --baselines none --rep-ms 25 --quiet 2>&1 | tail -6
  echo "$1 $2: $(( $(date +%s) - start )) s"
  checkpoint_db "$DB"
}
# DB: the results store NAME, under $OUT when on the device (so it comes back), continuing the committed one if any.
results_db() {
  DB=${OUT:-$PWD/benchmarks/results}/$1  # absolute: the regret step reads it from benchmarks/
  if [ -f "benchmarks/results/$1" ] && [ "$DB" != "$PWD/benchmarks/results/$1" ]; then cp "benchmarks/results/$1" "$DB"; fi
}
# Export KERNEL's winners from $DB into exports/ (brought back with the results), then its heuristic regret.
export_and_regret() {
  python3 -m flytune_nb.cli export --db "$DB" --out exports ${1:+--kernel "$1"} 2>&1 | tail -4
  (cd benchmarks && python3 heuristic_regret.py "$DB") 2>&1 | tail -8
  PACK_EXTRA=(exports)
}
