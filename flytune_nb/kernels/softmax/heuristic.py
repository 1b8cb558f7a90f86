"""The heuristic default for softmax (zero search).

- single pass whenever the row fits 64 KiB (N <= 32768 in bf16: a 32000-token vocabulary included): x is read from
  HBM once, the memory-bound minimum;
- warps so that each thread holds ~32 bytes of the row (two 16-byte vector loads), up to the device's maximum:
  N=1024 bf16 -> 2 warps, 4096 -> 8, 8192 -> 16, 16384 and wider -> 32. 16 bytes a thread (twice the threads,
  because softmax keeps x and exp(x) live) is not borne out by the H200 sweeps: at N=4096, 16 warps are 1.14-1.22x
  slower than 8 for M >= 1024 (an exhaustive H200 sweep), and at N=16384, 32 warps beat
  16 (H200). At 32000 the row is 64 KiB: one 1024-thread program per row, 32 elements per thread;
- wider rows with fewer rows than SMs (a 152064-token vocabulary at decode batch sizes): the row split over
  programs (SPLIT_N) so that the grid covers every SM once (M=1, N=152064: 128 programs of 1188 columns), in
  2 KiB blocks on 4 warps when a program's share is at most that, else 4 KiB on 8; one program looping over a
  297 KiB row issues one block's loads at a time, the split issues blocks on every SM at once;
- otherwise (wide rows, many of them): looped 16 KiB blocks on the most warps a block has (16 bytes a thread), one
  stage (H200, M=256, N=152064, graph replay, stores/rows_wide.db: 8192 on 32 warps 63.7 us, the sweep's best,
  against 103.7 for 4 KiB blocks on 8 warps and torch eager's 85.2).
"""
from __future__ import annotations

from flytune_nb.kit import Config, itemsize
from flytune_nb.kit.spaces import lanes, max_warps, next_pow2

from .configs import MAX_SINGLE_PASS_BYTES, SPLIT_FROM_BYTES, configs


def default(shape, dtype, device) -> Config:
    M, N, es = shape["M"], shape["N"], itemsize(dtype)
    full = next_pow2(N)
    if full * es <= MAX_SINGLE_PASS_BYTES:
        warps = max(1, min(max_warps(device), full * es // (lanes(device) * 32)))
        return Config({"BLOCK_N": full}, num_warps=warps, num_stages=1)
    block, sms = 4096 // es, max(device.sm_count, 1)
    if N * es > SPLIT_FROM_BYTES and M < sms:
        split = 2
        while split < 128 and M * split < sms and -(-N // (2 * split)) >= block // 4:
            split *= 2
        # about two blocks a program: 8 KiB in flight on each SM, then its exponentials
        small = -(-N // split) <= block // 2
        want = Config({"BLOCK_N": block // 2 if small else block, "SPLIT_N": split}, num_warps=4 if small else 8,
                      num_stages=1)
        if want in configs(shape, dtype, device):
            return want
    return Config({"BLOCK_N": 4 * block}, num_warps=max_warps(device), num_stages=1)
