"""What Triton code does torch.compile generate for a row kernel's torch baseline at a given shape?

Writes the source Inductor generates for the kernel's torch baseline (static shapes, bf16; its launch config and
autotuning choices included), so a shape where Inductor's kernel is faster than ours can be read side by side with
the kernel folder's code. Nothing is timed: row_variants times the two beside each other.
"""
from __future__ import annotations

import argparse

from benchmarks.common import environment, env_line, need_gpu, parser, static_compiled, write
from flytune_nb.core.device import current_device
from flytune_nb.core.registry import get_kernel

CASES = ("rmsnorm:256x4096", "fused_add_rmsnorm:256x4096")


def case(text: str) -> tuple[str, int, int]:
    """``KERNEL:MxN`` -> (kernel, M, N) (an argparse type)."""
    try:
        kernel, shape = text.split(":")
        m, n = shape.lower().split("x")
        return kernel, int(m), int(n)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected KERNEL:MxN (e.g. rmsnorm:256x4096), got {text!r}") from None


def main(argv=None):
    ap = parser(__doc__, __file__)
    ap.add_argument("--case", action="append", type=case, default=None, metavar="KERNEL:MxN",
                    help=f"a row kernel and shape (repeatable; default: {' '.join(CASES)})")
    args = ap.parse_args(argv)
    need_gpu("inductor_code")
    from torch._inductor.utils import run_and_get_code

    cases, md = [], []
    for kernel, M, N in args.case or [case(c) for c in CASES]:
        spec = get_kernel(kernel)
        inputs = spec.make_inputs({"M": M, "N": N}, "bf16", current_device())
        fn = static_compiled(spec.baseline)
        _, code = run_and_get_code(fn, inputs)
        cases.append({"kernel": kernel, "shape": {"M": M, "N": N}, "dtype": "bf16", "code": code})
        md += ["", f"## {kernel} M={M} N={N} bf16", ""]
        for i, module in enumerate(code):
            md += [f"Generated module {i + 1} of {len(code)}:", "", "```python", module.rstrip(), "```", ""]
    env = environment()
    write("inductor_code", {"env": env, "cases": cases},
          "\n".join(["# What torch.compile generates for the row kernels' torch baselines", env_line(env), *md]),
          out=args.out)


if __name__ == "__main__":
    main()
