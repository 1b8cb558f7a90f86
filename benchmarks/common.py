"""Shared parts of the benchmark scripts (not a benchmark): the argument parser every script starts from, the
environment line every result carries, where results and stores live, and result writing.

Results are one current file pair per benchmark per device, ``benchmarks/results/<device>/<name>.{json,md}``, where
``<device>`` is ``flytune_nb.core.device.current_device().name`` (``NVIDIA_H200``; ``CPU_interpreter`` without a
GPU). A new run replaces the file; earlier runs are in git history. The results stores (SQLite) that exports and
benchmarks read live in ``benchmarks/results/<device>/stores/``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
REPO = HERE.parent


class _Parser(argparse.ArgumentParser):
    """argparse whose refusals are one line, as flytune's CLI prints them: what was wrong and where the usage is,
    not the usage block first."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (usage: {self.prog} --help)\n")


def parser(doc: str, file: str) -> argparse.ArgumentParser:
    """The parser a benchmark script starts from: ``python -m benchmarks NAME`` as its program name, the module
    docstring (the question first) as its description, and ``--out``."""
    name = Path(file).stem
    ap = _Parser(prog=f"python -m benchmarks {name}", description=doc,
                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=None, metavar="DIR",
                    help="folder for the result files (default: benchmarks/results/<device>/, <device> being the "
                         "name of the GPU that ran it, or of the GPU whose stored timings it analyses)")
    return ap


def _commit() -> str | None:
    """The checkout's commit (``+dirty`` when its code has changes: result files do not count), or None outside a git
    checkout."""
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no", "--", ".",
                                ":(exclude)benchmarks/results"], capture_output=True, text=True, timeout=10).stdout.strip()
        return head.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def environment() -> dict:
    """Where and when a result was produced: device, date, versions, the code's commit, the host's cores."""
    import torch
    import triton

    import flytune_nb
    from flytune_nb.core.device import current_device

    d = current_device()
    return {"device": d.name, "arch": d.arch, "sm_count": d.sm_count, "l2_bytes": d.l2_bytes,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "torch": torch.__version__,
            "triton": triton.__version__, "cuda": torch.version.cuda, "hip": getattr(torch.version, "hip", None),
            "flytune_nb": flytune_nb.__version__, "python": platform.python_version(), "commit": _commit(),
            "cpu_count": os.cpu_count(), "bytecode_writes": not sys.dont_write_bytecode}


def device_name() -> str:
    from flytune_nb.core.device import current_device

    return current_device().name


def results_dir(out: Path | str | None = None, device: str | None = None) -> Path:
    """``out`` when given, else benchmarks/results/<device>/ (default: this machine's device); created."""
    from flytune_nb.errors import UsageError

    path = Path(out) if out is not None else RESULTS / (device or device_name())
    what = f"--out {path}" if out is not None else f"the results folder {path}"
    if path.exists() and not path.is_dir():
        raise UsageError(f"{what} is a file; name a folder for the result files")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # a file on the way (--out afile/sub), no permission: the one line the runner prints
        raise UsageError(f"{what}: cannot make the folder: {e.strerror or e}") from None
    return path


def stores(device: str | None = None) -> list[Path]:
    """The committed results stores: every ``results/*/stores/*.db``, or one device's."""
    return sorted(RESULTS.glob(f"{device or '*'}/stores/*.db"))


def find_result(name: str, device: str | None = None) -> Path:
    """The current ``<name>.json`` of one device (default: this machine's if it has one, else the only device that
    has one). A UsageError names the candidates when that is ambiguous or there is none."""
    from flytune_nb.errors import UsageError

    if device is None and (RESULTS / device_name() / f"{name}.json").exists():
        device = device_name()
    found = sorted(RESULTS.glob(f"{device or '*'}/{name}.json"))
    if len(found) == 1:
        return found[0]
    where = f"benchmarks/results/{device or '*'}/{name}.json"
    if not found:
        raise UsageError(f"no {where}: run `python -m benchmarks {name}` on a GPU first, or pass the file")
    raise UsageError(f"several {where}: pick one ({', '.join(str(p.parent.name) for p in found)})")


def write(name: str, payload: dict, markdown: str, out: Path | str | None = None,
          device: str | None = None) -> Path:
    """Write ``<name>.json`` and ``<name>.md`` into ``results_dir(out, device)`` and print the markdown. ``device``
    files a result under the device whose timings it reports (a replay of stored H200 sweeps run on a laptop belongs
    with the H200's results). The payload gets this run's ``environment()`` as ``env`` unless it has one."""
    folder = results_dir(out, device)
    if "env" not in payload:
        payload = {"env": environment(), **payload}
    (folder / f"{name}.json").write_text(json.dumps(payload, indent=1, sort_keys=True, default=str) + "\n")
    (folder / f"{name}.md").write_text(markdown + "\n")
    print(markdown)
    print(f"\nwrote {folder / name}.json and .md", file=sys.stderr)
    return folder


def env_line(env: dict) -> str:
    """The line under a result's title: device, date, versions, commit."""
    return (f"{env['device']} ({env['arch']}), {env['date']}, torch {env['torch']}, triton {env['triton']}, "
            f"flytune_nb {env['flytune_nb']}" + (f", commit {env['commit']}" if env.get("commit") else ""))


def per_m_table(rows: list[dict], names, first: str = "path", digits: int = 1) -> list[str]:
    """Markdown lines of a microseconds table: one row per name, one column per result row's ``shape["M"]``."""
    lines = [f"| {first} | " + " | ".join(f"M={r['shape']['M']}" for r in rows) + " |", "|---|" + "---|" * len(rows)]
    return lines + [f"| {n} | " + " | ".join(f"{r[n]:.{digits}f} us" for r in rows) + " |" for n in names]


def int_list(text: str) -> list[int]:
    """``"1,64,4096"`` -> [1, 64, 4096] (an argparse type)."""
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def shape_list(text: str) -> list[tuple[int, ...]]:
    """``"256,4096;1,1024"`` -> [(256, 4096), (1, 1024)] (an argparse type)."""
    try:
        return [tuple(int(v) for v in part.split(",")) for part in text.split(";") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected shapes as 'a,b;c,d', got {text!r}") from None


def add_shapes(ap: argparse.ArgumentParser, shapes, help: str | None = None) -> None:
    """A ``--shapes M,N,K;...`` option defaulting to ``shapes``, which the help lists unless ``help`` is given."""
    ap.add_argument("--shapes", type=shape_list, default=shapes, metavar="M,N,K;...",
                    help=help or "the shapes (default: " + ";".join(",".join(map(str, s)) for s in shapes) + ")")


def add_budget(ap: argparse.ArgumentParser, seconds: float = 300.0) -> None:
    """A ``--budget-s`` option: the run starts no new shape once this much time has passed."""
    ap.add_argument("--budget-s", type=float, default=seconds,
                    help=f"stop starting new shapes after this (default {seconds:g})")


def within_budget(shapes, budget_s: float):
    """``shapes`` one by one until ``budget_s`` seconds have passed since the first; then says which were left out."""
    t0 = time.perf_counter()
    for i, shape in enumerate(shapes):
        if time.perf_counter() - t0 > budget_s:
            print(f"budget spent: {len(shapes) - i} shapes not run, from {shape} on", flush=True)
            return
        yield shape


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


def need_gpu(name: str) -> None:
    """Stop with one line, not a CUDA traceback, when a GPU-only benchmark runs without a GPU."""
    from flytune_nb.core.device import current_device
    from flytune_nb.errors import UsageError

    if not current_device().is_gpu:
        raise UsageError(f"{name} times kernels on a GPU and this machine has none (`--help` says what it measures)")


def kernels_launched(fn) -> list[str]:
    """The names of the GPU kernels one call of ``fn`` launches, in order, read with torch.profiler after a warm-up
    call (memsets are not kernels to a profiler that replays kernels, so they are left out)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type.name == "CUDA" and not e.name.startswith("Memset")]


def gemm_operands(M: int, N: int, K: int, *, seed: int | None = 0, device: str = "cuda"):
    """(a, w, out, ref) of a bf16 ``a @ w.T`` benchmark: a (M, K) ~ N(0, 1), w (N, K) ~ N(0, 1/64^2) (outputs of
    order 1), an empty (M, N) output and the fp32 product to check it against. ``seed`` None draws unseeded."""
    import torch

    if seed is not None:
        torch.manual_seed(seed)
    a = torch.randn(M, K, device=device, dtype=torch.bfloat16)
    w = torch.randn(N, K, device=device, dtype=torch.bfloat16) / 64
    out = torch.empty(M, N, device=device, dtype=torch.bfloat16)
    return a, w, out, a.float() @ w.float().T


def gemm_case(M: int, N: int, K: int, dev):
    """(a, w, out, ref, default, cublas) of one bf16 GEMM shape: gemm_operands, the matmul heuristic's config there,
    and torch.matmul writing a preallocated output of its own, as ours does (no allocation timed)."""
    import torch

    from flytune_nb.kernels.matmul import heuristic

    a, w, out, ref = gemm_operands(M, N, K)
    theirs = torch.empty_like(out)
    return (a, w, out, ref, heuristic.default({"M": M, "N": N, "K": K}, "bf16", dev),
            lambda: torch.matmul(a, w.T, out=theirs))


def static_compiled(fn):
    """``torch.compile(fn)`` with static shapes on fresh dynamo state, warmed up: reusing one compiled function
    across shapes makes dynamo recompile it with dynamic shapes, which measured 40-60% slower (kernels_vs_torch's
    first table). Returns the compiled function (call it once per shape's inputs)."""
    import torch

    from flytune_nb._compat.torch import dynamo_reset

    dynamo_reset()
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
