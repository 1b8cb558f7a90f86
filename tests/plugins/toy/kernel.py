"""A test kernel whose MODE knob makes configs misbehave on purpose:
0 correct, 1 wrong result, 2 raises at launch, 3 leaves the second half of the output unwritten."""
import triton
import triton.language as tl

from flytune_nb.core.device import current_device


@triton.jit
def scale_kernel(X, Y, N, FACTOR: tl.constexpr, HALF: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    limit = N // 2 if HALF else N
    mask = offs < limit
    x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + offs, (x * FACTOR).to(Y.dtype.element_ty), mask=mask)


def scale(x, out, config):
    mode = config["MODE"]
    if mode == 2:
        raise RuntimeError("launch failed: simulated out of memory for this config")
    n = x.numel()
    block = config["BLOCK"]
    scale_kernel[(triton.cdiv(n, block),)](x, out, n, FACTOR=3.0 if mode == 1 else 2.0, HALF=mode == 3, BLOCK=block,
                                          **config.launch_options(current_device().backend))
    return out
