#!/usr/bin/env bash
# Session 6, device call 3 (nvidia-h200): every GPU test of the final tree (TMA matmul space and heuristic, the row
# kernels' BLOCK_M, the re-swept matmul exports), then issue #6's whole benchmark again (kernels_grid.py: fused_moe
# and matmul default + committed export vs torch, the memory-bound grid by successive halving with one-row best and
# a same-bytes copy), and Inductor's generated code where its kernel led ours in call 1 (256 x 4096).
set -uo pipefail
source benchmarks/device_common.sh
TAG=${TAG:-s6c}
gpu_tests "$TAG"
cd benchmarks
for k in fused_add_rmsnorm rmsnorm; do timeout 60 python3 inductor_code.py $k 256 4096 2>&1 | tail -1; done
BENCH_DEADLINE_S=${GRID_S:-320} BENCH_NAME=kernels_grid_$TAG timeout $(( ${GRID_S:-320} + 40 )) python3 kernels_grid.py \
  2>&1 | grep -v Warn | tail -62
