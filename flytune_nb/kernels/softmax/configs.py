"""Search space for softmax.

Knobs as rmsnorm (BLOCK_N, BLOCK_M, num_warps, num_stages; waves_per_eu on HIP), plus SPLIT_N (programs per row,
absent = 1). The single-pass form keeps x and exp(x) of the row live, so at most 32 elements per thread; rows up
to 64 KiB of the input dtype are offered in one pass (bf16 N=32000: 32768 lanes on 32 warps), where x is read once
instead of twice. Looped blocks from 256 up to half the row, where pipelining (num_stages 2) is worth searching.

SPLIT_N (kernel.py): offered for rows over 16 KiB when there are fewer rows than SMs (a vocabulary softmax at decode
batch sizes), on 1-4K-element blocks with 4 or 8 warps, splits 2..128 such that every program has at least half a
block and the grid stays within two programs per SM. bf16 on the H200: M=1, N=152064: 94 configs (40 split); M=64:
66 (12).
"""
from __future__ import annotations

from flytune_nb.kit import Config, itemsize
from flytune_nb.kit.spaces import pow2_between, row_space, with_hip_knobs

MAX_SINGLE_PASS_BYTES = 64 * 1024
MAX_ELEMS_PER_THREAD = 32
SPLIT_FROM_BYTES = 16 * 1024  # a row this wide keeps one SM streaming for a while: worth spreading at small M
SPLIT_BLOCKS, SPLIT_WARPS = (1024, 2048, 4096), (4, 8)


def configs(shape, dtype, device) -> list[Config]:
    out = row_space(shape, dtype, device, max_single_bytes=MAX_SINGLE_PASS_BYTES,
                    max_elems_per_thread=MAX_ELEMS_PER_THREAD)
    M, N = shape["M"], shape["N"]
    sms = max(device.sm_count, 1)
    if N * itemsize(dtype) <= SPLIT_FROM_BYTES or M >= sms:
        return out
    split = []
    for block in SPLIT_BLOCKS:
        for s in pow2_between(2, 128):
            if -(-N // s) < block // 2 or M * s > 2 * sms:
                continue
            split += [Config({"BLOCK_N": block, "SPLIT_N": s}, num_warps=w, num_stages=1) for w in SPLIT_WARPS]
    return out + with_hip_knobs(split, device)
