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
