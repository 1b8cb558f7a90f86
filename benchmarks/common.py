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
    from flytune_nb.device import current_device

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
