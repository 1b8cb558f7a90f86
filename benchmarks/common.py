"""Shared bits for the GPU benchmarks: the environment line every result carries, and result writing."""
from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path


def environment() -> dict:
    import torch
    import triton

    import flytune_nb
    from flytune_nb.core.device import current_device

    d = current_device()
    return {"device": d.name, "arch": d.arch, "sm_count": d.sm_count, "l2_bytes": d.l2_bytes,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "torch": torch.__version__,
            "triton": triton.__version__, "cuda": torch.version.cuda, "flytune_nb": flytune_nb.__version__,
            "python": platform.python_version()}


def out_dir() -> Path:
    """Where results go: $BENCH_OUT (the device scripts), else benchmarks/results wherever the script runs from."""
    out = Path(os.environ.get("BENCH_OUT") or Path(__file__).parent / "results")
    out.mkdir(parents=True, exist_ok=True)
    return out


def write(name: str, payload: dict, markdown: str) -> None:
    out = out_dir()
    (out / f"{name}.json").write_text(json.dumps(payload, indent=1, sort_keys=True, default=str) + "\n")
    (out / f"{name}.md").write_text(markdown + "\n")
    print(markdown)


def copy_bandwidth(n_bytes: int = 4 << 30) -> float:
    """Measured device-to-device copy, bytes read + written per second (the memory-bound roofline)."""
    import torch

    a = torch.empty(n_bytes // 2, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(10):
        b.copy_(a)
    e.record()
    torch.cuda.synchronize()
    return 2 * a.numel() * 10 / (s.elapsed_time(e) * 1e-3)


def static_compiled(fn):
    """``torch.compile(fn)`` with static shapes on fresh dynamo state, warmed up: reusing one compiled function
    across shapes makes dynamo recompile it with dynamic shapes, which measured 40-60% slower (kernels_vs_torch's
    first table). Returns the compiled function (call it once per shape's inputs)."""
    import torch

    torch._dynamo.reset()
    return torch.compile(fn, dynamic=False)


def timed(timer, spec, inputs, fn) -> float:
    """p50 of ``fn`` with the kernel's in-place inputs restored before every rep (its ``rep_setup``)."""
    return timer.measure(fn, spec.rep_setup(inputs, spec.snapshot(inputs))).p50


def compiled_p50(timer, spec, inputs) -> float:
    """p50 of torch.compile of the kernel's torch baseline (static shapes, warmed up on these inputs)."""
    fn = static_compiled(spec.baseline)
    for _ in range(3):
        fn(inputs)
    return timed(timer, spec, inputs, lambda: fn(inputs))
