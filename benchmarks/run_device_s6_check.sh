#!/usr/bin/env bash
# Session 6, device call 6 (nvidia-h200): the GPU tests after the review mends (runtime program count of the
# persistent TMA kernel, refused BLOCK_M configs), and the TMA paths timed again at three shapes to see that the
# runtime program count costs nothing.
set -uo pipefail
source benchmarks/device_common.sh
gpu_tests s6f
cd benchmarks && SHAPES="4096,4096,4096;1024,14336,4096;256,14336,4096" BENCH_NAME=gemm_paths_s6f timeout 150 python3 gemm_paths.py 2>&1 | grep -v Warn | tail -8
