"""What does the serving path cost the host per call: a lookup hit, a tuned call's config resolution? (no GPU)

Compares, on the host CPU alone (no kernel launch, so it runs anywhere, GPU or not): an artifact lookup hit over a
file of SGLang's 18 batch sizes (nearest M), and TunedKernel.config_for's memory hit (shape, dtype, stride classes,
env). Target: a lookup hit <= 2 us. Filed under this machine's device name (CPU_interpreter without a GPU).
"""
from __future__ import annotations

import platform
import tempfile
import timeit
from pathlib import Path

from benchmarks.common import environment, parser, write
from flytune_nb.artifacts.files import file_name, render, triton_dir_name
from flytune_nb.core.device import current_device
from flytune_nb.core.shapes import SGLANG_BATCH_SIZES
from flytune_nb.serve.lookup import LOOKUP
from flytune_nb.core.registry import get_kernel
from flytune_nb.serve.tuned import TunedKernel

N_CALLS = 200_000


def main(argv=None):
    ap = parser(__doc__, __file__)
    ap.add_argument("--calls", type=int, default=N_CALLS, help="calls per repeat of the lookup (default %(default)s)")
    args = ap.parse_args(argv)
    if args.calls < 10:
        ap.error("--calls must be at least 10")
    import torch
    import triton

    spec, dev = get_kernel("rmsnorm"), current_device()
    root = Path(tempfile.mkdtemp())
    folder = root / "rmsnorm" / triton_dir_name(triton.__version__)
    folder.mkdir(parents=True)
    table = {m: spec.default({"M": m, "N": 4096}, "bf16", dev).to_dict() for m in SGLANG_BATCH_SIZES}
    (folder / file_name(spec, {"M": 1, "N": 4096}, dev.name, "bf16")).write_text(render(table))
    shape = {"M": 37, "N": 4096}
    assert LOOKUP(spec, shape, "bf16", dev, str(root)) is not None
    n = args.calls
    hit = min(timeit.repeat(lambda: LOOKUP(spec, shape, "bf16", dev, str(root)), number=n, repeat=5))
    op = TunedKernel(spec, device=dev, cache_dir=root / "cache", artifact_lookup=lambda *a: None)
    x = torch.randn(37, 4096, dtype=torch.bfloat16)
    inputs = {"x": x, "weight": torch.randn(4096, dtype=torch.bfloat16), "out": torch.empty_like(x)}
    op.config_for(inputs)
    resolve = min(timeit.repeat(lambda: op.config_for(inputs), number=n // 10, repeat=5))
    us_hit, us_resolve = hit / n * 1e6, resolve / (n // 10) * 1e6
    env = environment()
    payload = {"env": env, "cpu": platform.processor() or platform.machine(), "python": platform.python_version(),
               "lookup_hit_us": us_hit, "tuned_config_for_memory_hit_us": us_resolve, "calls": n}
    md = "\n".join([
        "# Serving-path host cost (no kernel launch)",
        f"{platform.machine()} CPU ({env['cpu_count']} cores), Python {platform.python_version()}, {env['date']}, "
        f"flytune_nb {env['flytune_nb']}" + (f", commit {env['commit']}" if env["commit"] else "")
        + f"; best of 5 x {n} calls", "",
        "| path | cost per call |", "|---|---|",
        f"| artifact lookup hit (18 batch sizes, nearest M) | {us_hit:.2f} us |",
        f"| TunedKernel.config_for, memory hit (shape, dtype, stride classes, env) | {us_resolve:.2f} us |"])
    write("lookup_cost", payload, md, out=args.out)


if __name__ == "__main__":
    main()
