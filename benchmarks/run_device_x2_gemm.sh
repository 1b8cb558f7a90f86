#!/usr/bin/env bash
# Device call 3 of session 3 (nvidia-h200-x2, .whl carried for optuna):
#   1. issue #3's surrogate benchmark: exhaustive matmul sweeps (M=256/1024/4096, N=K=4096) over both GPUs, with
#      torch.matmul timed beside each shape, then TPE and random replayed at 10% of the evaluations. If the sweep
#      runs out of time, the replay still runs over the shapes that finished;
#   2. issue #6's softmax slice of the memory-bound grid (halving vs eager / torch.compile / copy bandwidth).
set -uo pipefail
source benchmarks/device_common.sh
source benchmarks/install_carried.sh || { echo INSTALL FAILED; exit 1; }
start=$(date +%s)
(cd benchmarks && GPUS=0,1 timeout ${SURROGATE_S:-330} python3 surrogate_gemm.py) 2>&1 | tail -12
checkpoint_db "$BENCH_OUT/gemm_sweeps.db"
[ -f "$BENCH_OUT/surrogate_matmul.md" ] || (cd benchmarks && python3 surrogate_gemm.py --replay "$BENCH_OUT/gemm_sweeps.db") 2>&1 | tail -10
echo "surrogate step: $(( $(date +%s) - start )) s"
(cd benchmarks && SECTIONS=memory MEM_KERNELS=softmax BENCH_NAME=kernels_grid_softmax BENCH_DEADLINE_S=${GRID_S:-150} \
  timeout 220 python3 kernels_grid.py) 2>&1 | tail -20
