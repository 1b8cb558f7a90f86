"""What does each way of getting a config cost on its first call, and on every later call?

Compares the consumption paths of a tuned kernel (docs/guide.md quotes the result): rmsnorm M=64 N=4096 bf16, for
which a committed H200 export exists. Each path gets a fresh TunedKernel; "first call"
is host wall time of one call including resolution, compile (Triton's cache warm unless stated) and the launch,
synchronised. Paths: heuristic default (artifacts switched off), offline artifact (the file read and validated),
online search (every config of the space timed, correctness-checked; with a cold and a warm Triton cache), disk
cache (the winner a previous search stored), and the memory hit every later call takes."""
from __future__ import annotations

import os
import tempfile
import time

import torch

from benchmarks.common import environment, need_gpu, parser, write
from flytune_nb.core.device import current_device
from flytune_nb.serve.lookup import LOOKUP
from flytune_nb.core.registry import get_kernel
from flytune_nb.serve.tuned import TunedKernel

SHAPE, DTYPE = {"M": 64, "N": 4096}, "bf16"


def first_call(op, inputs) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    op(**inputs)
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def hit_us(op, inputs, n=5000) -> float:
    for _ in range(100):
        op(**inputs)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        op(**inputs)
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1e6


def main(argv=None):
    args = parser(__doc__, __file__).parse_args(argv)
    need_gpu("consumption_paths")
    dev, spec = current_device(), get_kernel("rmsnorm")
    inputs = spec.make_inputs(SHAPE, DTYPE, dev)
    spec.run(inputs, spec.default(SHAPE, DTYPE, dev))  # compile the default once: first calls below compare lookups
    cache = tempfile.mkdtemp(prefix="flytune-cache-")
    rows = []

    op = TunedKernel(spec, device=dev, cache_dir=cache, autotune=False, artifact_lookup=lambda *a: None)
    rows.append(("heuristic default", first_call(op, inputs), op.last_source, hit_us(op, inputs)))
    LOOKUP.clear()
    op = TunedKernel(spec, device=dev, cache_dir=cache, autotune=False)
    rows.append(("offline artifact (flytune_nb/exports/)", first_call(op, inputs), op.last_source, hit_us(op, inputs)))
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="triton-cold-")
    op = TunedKernel(spec, device=dev, cache_dir=tempfile.mkdtemp(), autotune=True)
    rows.append(("online search, cold Triton cache", first_call(op, inputs), op.last_source, hit_us(op, inputs)))
    n_space = len(op.last_result.trials)
    op = TunedKernel(spec, device=dev, cache_dir=cache, autotune=True)
    rows.append(("online search, warm Triton cache", first_call(op, inputs), op.last_source, hit_us(op, inputs)))
    op = TunedKernel(spec, device=dev, cache_dir=cache, autotune=False)
    rows.append(("disk cache (a previous search)", first_call(op, inputs), op.last_source, hit_us(op, inputs)))

    env = environment()
    payload = {"env": env, "shape": SHAPE, "dtype": DTYPE, "space": n_space,
               "rows": [{"path": p, "first_call_s": f, "source": s, "later_call_us": h} for p, f, s, h in rows]}
    md = [f"# First-call cost of each consumption path: rmsnorm M=64 N=4096 bf16 ({n_space} configs in the space)",
          f"{env['device']}, {env['date']}, torch {env['torch']}, triton {env['triton']}", "",
          "| path | first call | source | every later call (host) |", "|---|---|---|---|"]
    md += [f"| {p} | {f * 1e3:.1f} ms | {s} | {h:.2f} us |" for p, f, s, h in rows]
    write("consumption_paths", payload, "\n".join(md), out=args.out)


if __name__ == "__main__":
    main()
