"""What torch.compile generates for a row kernel's torch baseline at one shape: the Triton source Inductor writes
(its launch config included), so a shape where Inductor's kernel is faster than ours can be read side by side.
Usage: python inductor_code.py KERNEL M N  ->  $BENCH_OUT/inductor_<kernel>_<M>x<N>.py.txt"""
from __future__ import annotations

import sys

from torch._inductor.utils import run_and_get_code

from common import out_dir, static_compiled
from flytune_nb.core.device import current_device
from flytune_nb.core.registry import get_kernel


def main():
    kernel, M, N = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    spec = get_kernel(kernel)
    inputs = spec.make_inputs({"M": M, "N": N}, "bf16", current_device())
    fn = static_compiled(spec.baseline)
    _, code = run_and_get_code(fn, inputs)
    path = out_dir() / f"inductor_{kernel}_{M}x{N}.py.txt"  # kept as text: generated code, not ours
    path.write_text("\n\n# ---- next module ----\n\n".join(code))
    print(path, sum(len(c) for c in code), "chars")


if __name__ == "__main__":
    main()
