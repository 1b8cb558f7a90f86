#!/usr/bin/env bash
# Session 6, device call 1 (nvidia-h200): the GPU tests of the tree (matmul's TMA paths and the row kernels' BLOCK_M
# are new), then the evidence for the kernel changes:
#   1. matmul's pointer / TMA / persistent-TMA paths against cuBLAS (gemm_paths.py);
#   2. the row kernels exhaustively over M x N with BLOCK_M in the space: one-row best vs best, torch.compile, and a
#      copy of the same bytes (kernels_grid.py, memory section).
set -uo pipefail
source benchmarks/device_common.sh
TAG=${TAG:-s6a}
gpu_tests "$TAG"
cd benchmarks
BENCH_NAME=gemm_paths_$TAG timeout ${GEMM_S:-170} python3 gemm_paths.py 2>&1 | grep -v Warn | tail -14
SECTIONS=memory MEM_STRATEGY=exhaustive MEM_M=${MEM_M:-256,4096,32768} MEM_N=${MEM_N:-1024,4096,16384} \
  BENCH_DEADLINE_S=${MEM_S:-190} BENCH_NAME=kernels_grid_mem_$TAG timeout $(( ${MEM_S:-190} + 30 )) python3 kernels_grid.py \
  2>&1 | grep -v Warn | tail -32
