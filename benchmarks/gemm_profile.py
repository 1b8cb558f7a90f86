"""Where does the time go in the GEMM shapes that lose to cuBLAS? Nsight Compute's counters for both kernels.

serving_vs_torch measures the ratio; gemm_cublas_tiles splits it with a model (last-wave fill times per-SM speed).
This reads the hardware counters instead, for the kernel flytune_nb.tuned() serves and the one torch.matmul (cuBLAS)
launches, at the same shape, one launch each:

- how long the average SM was busy over the kernel's elapsed time (``sm__cycles_active.avg`` over
  ``sm__cycles_elapsed.max``): the share of the GPU the grid's fill and tail leave working;
- how busy the tensor pipe was while an SM was busy (wgmma's pipe, ``..._hgmma_..._cycles_active`` as a share of
  active cycles): the per-SM speed;
- the grid, waves per SM, registers and shared memory per program, DRAM throughput, L2 hit rate, and the warp stall
  reasons that dominate.

ncu runs a child process of this script (``--clock-control none``: the clocks stay as the GPU sets them; caches flushed
before each kernel, as in the L2-flushed timing mode), profiling only the launches between
``cudaProfilerStart``/``Stop``. Which kernel belongs to which call is counted beforehand with torch.profiler in this
process. bf16; about a minute on an H100 (ncu replays each kernel once per group of counters).
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import math
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common import env_line, environment, kernels_launched, need_gpu, parser, shape_list, write

# The four mid-M shapes furthest behind cuBLAS on the H200 (serving_vs_torch: 0.78-0.85x graph) and M = 64's
# graph-only loss, then three contrasts: ahead in the flushed mode (K = 11008), level at mid M, level at large M.
SHAPES = [(256, 6144, 4096), (256, 11008, 4096), (1024, 11008, 4096), (64, 4096, 4096), (256, 14336, 4096),
          (256, 4096, 11008), (512, 4096, 4096), (4096, 4096, 4096)]
_TENSOR = "sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active"
_STALLS = ("long_scoreboard", "barrier", "wait", "math_pipe_throttle", "mio_throttle", "short_scoreboard",
           "no_instruction", "sleeping", "lg_throttle", "dispatch_stall", "selected", "not_selected", "membar",
           "branch_resolving")
METRICS = [
    "gpu__time_duration.sum", "launch__grid_size", "launch__block_size", "launch__registers_per_thread",
    "launch__shared_mem_per_block_dynamic", "launch__waves_per_multiprocessor", "sm__cycles_active.avg",
    "sm__cycles_active.max", "sm__cycles_active.min", "sm__cycles_elapsed.max",
    f"{_TENSOR}.avg.pct_of_peak_sustained_active", f"{_TENSOR}.avg.pct_of_peak_sustained_elapsed",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed", "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__bytes_read.sum", "lts__t_sector_hit_rate.pct", "sm__warps_active.avg.pct_of_peak_sustained_active",
] + [f"smsp__warp_issue_stalled_{s}_per_warp_active.pct" for s in _STALLS]
_MISSING = re.compile(r"Failed to find metric (\S+)")


# ncu scales a counter's unit to its size unless told `--print-units base`; both are read back to ns and bytes
_SCALE = {"nsecond": 1.0, "usecond": 1e3, "msecond": 1e6, "second": 1e9, "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6,
          "Gbyte": 1e9, "KiB": 1024.0, "MiB": 1024.0 ** 2}


def find_ncu() -> str | None:
    """ncu on the PATH, else where the CUDA toolkit puts it."""
    return shutil.which("ncu") or shutil.which("ncu", path="/usr/local/cuda/bin")


def _number(text: str):
    """A raw-page cell as a number where it is one ("1,234.5" -> 1234.5; ncu groups thousands), else the text."""
    t = text.replace(",", "").strip()
    try:
        return float(t)
    except ValueError:
        return text.strip()


def parse_raw_csv(text: str) -> list[dict]:
    """The kernels of ``ncu --import R --csv --page raw``, in launch order: one dict per kernel, metric name -> value.
    The page's first row names the columns and its second gives their units (times read back in ns, sizes in
    bytes); ncu's own lines (``==PROF==``) are skipped."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    if len(rows) < 2:
        return []
    head, units, body = rows[0], rows[1], rows[2:]
    scale = [_SCALE.get(u.strip(), 1.0) for u in units]
    kernels = []
    for r in body:
        if len(r) == len(head):
            cells = [_number(v) for v in r]
            kernels.append({h: v * f if isinstance(v, float) else v for h, v, f in zip(head, cells, scale)})
    return sorted(kernels, key=lambda k: k.get("ID", 0))


def _base_name(name: str) -> str:
    """A kernel's name without its return type and parameters, the part ncu and torch.profiler both print."""
    name = str(name).strip()
    name = name[5:] if name.startswith("void ") else name
    return re.split(r"[(<]", name, maxsplit=1)[0].strip()


def assign(kernels: list[dict], windows: list[dict]) -> list[dict]:
    """Give each profiled kernel to its call: ``windows`` are the calls in launch order, each with the kernel names
    torch.profiler saw it launch. Returns the windows with ``kernels`` filled; raises ValueError when the counts or
    any call's names disagree (a kernel ncu saw that the count did not, or one call's kernel placed in the next),
    rather than mislabel one."""
    want = sum(len(w["names"]) for w in windows)
    if want != len(kernels):
        raise ValueError(f"ncu profiled {len(kernels)} kernels where torch.profiler counted {want}")
    out, i = [], 0
    for w in windows:
        n = len(w["names"])
        mine = kernels[i:i + n]
        seen = [_base_name(k.get("Kernel Name") or k.get("Function Name") or "") for k in mine]
        if seen != [_base_name(x) for x in w["names"]]:
            raise ValueError(f"at {w['shape']} ({w['side']}) ncu saw {seen} where torch.profiler saw {w['names']}")
        out.append({**w, "kernels": mine})
        i += n
    return out


def summary(k: dict) -> dict:
    """The figures the report reads from one kernel's counters."""
    def get(name, default=math.nan):
        v = k.get(name, default)
        return v if isinstance(v, float) else default

    active, elapsed = get("sm__cycles_active.avg"), get("sm__cycles_elapsed.max")
    stalls = {s: get(f"smsp__warp_issue_stalled_{s}_per_warp_active.pct") for s in _STALLS}
    top = sorted(((v, s) for s, v in stalls.items() if math.isfinite(v) and s != "selected"), reverse=True)[:3]
    return {
        "name": str(k.get("Kernel Name") or k.get("Function Name") or "?"), "us": get("gpu__time_duration.sum") / 1e3,
        "grid": get("launch__grid_size"),
        "regs": get("launch__registers_per_thread"), "smem_kb": get("launch__shared_mem_per_block_dynamic") / 1024,
        "waves": get("launch__waves_per_multiprocessor"),
        "sm_busy": active / elapsed if elapsed and math.isfinite(elapsed) else math.nan,
        "tensor_active_pct": get(f"{_TENSOR}.avg.pct_of_peak_sustained_active"),
        "tensor_elapsed_pct": get(f"{_TENSOR}.avg.pct_of_peak_sustained_elapsed"),
        "dram_pct": get("dram__throughput.avg.pct_of_peak_sustained_elapsed"),
        "l2_hit_pct": get("lts__t_sector_hit_rate.pct"),
        "top_stalls": [(s, round(v, 2)) for v, s in top],
    }


def _calls(shape, dev, check: bool = True):
    """(ours, cublas, served config, where tuned() found it, our output's error relative to its largest value) at one
    (M, N, K): tuned('matmul') as a serving user calls it, and the kernel's torch baseline (``a @ w.T``, which
    allocates its own output). Seeded, so the child builds the same."""
    import torch

    import flytune_nb
    from flytune_nb.core.registry import get_kernel

    spec, op = get_kernel("matmul"), flytune_nb.tuned("matmul")
    M, N, K = shape
    torch.manual_seed(0)
    inputs = spec.make_inputs({"M": M, "N": N, "K": K}, "bf16", dev)
    a, w, out = inputs["a"], inputs["w"], inputs["out"]
    ours = lambda: op(a=a, w=w, out=out)  # noqa: E731
    theirs = lambda: spec.baseline(inputs)  # noqa: E731
    ours()
    source = op.last_source  # the first call's lookup (export or heuristic); later calls hit its memory
    for _ in range(3):
        ours(), theirs()
    if not check:  # the child under ncu: the parent checked the same seeded call
        return ours, theirs, None, source, None
    ref = a.float() @ w.float().T
    err = ((out.float() - ref).abs().max() / ref.abs().max()).item()
    return ours, theirs, str(op.config_for(inputs)), source, err


def child(shapes) -> None:
    """Under ncu: each call once between cudaProfilerStart and Stop, in the order the parent counted."""
    import torch

    from flytune_nb.core.device import current_device

    dev = current_device()
    for shape in shapes:
        ours, theirs, *_ = _calls(shape, dev, check=False)
        for fn in (ours, theirs):
            torch.cuda.synchronize()
            torch.cuda.profiler.start()
            fn()
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()


def profile(shapes, ncu: str, workdir: Path) -> tuple[list[dict], list[str]]:
    """(the calls in launch order with their kernels' counters, the metrics left out because this ncu or GPU does not
    know them: rejected by name, or read back as "n/a" on every kernel)."""
    from flytune_nb.core.device import current_device
    from flytune_nb.errors import RunError

    dev = current_device()
    windows = []
    for shape in shapes:
        ours, theirs, config, source, err = _calls(shape, dev)
        windows.append({"shape": list(shape), "side": "ours", "config": config, "source": source,
                        "rel_err": err, "names": kernels_launched(ours)})
        windows.append({"shape": list(shape), "side": "cublas", "names": kernels_launched(theirs)})
    spec = workdir / "shapes.json"
    spec.write_text(json.dumps([list(s) for s in shapes]))
    metrics, dropped = list(METRICS), []
    rep_path = workdir / "profile"
    for _ in range(len(METRICS)):
        cmd = [ncu, "--clock-control", "none", "--profile-from-start", "off", "--metrics", ",".join(metrics),
               "--export", str(rep_path), "--force-overwrite", sys.executable, "-m", "benchmarks.gemm_profile",
               "--child", str(spec)]
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=Path(__file__).parent.parent)
        missing = set(_MISSING.findall(run.stdout + run.stderr)) & set(metrics)
        if run.returncode == 0 and not missing:
            break
        if not missing:  # e.g. a sandbox without access to the counters: ncu's own words, not a traceback
            said = [ln for ln in (run.stdout + run.stderr).splitlines() if "error" in ln.lower()]
            raise RunError(f"ncu failed (rc {run.returncode}): {(said or ['no message'])[-1].strip()[:300]}")
        dropped += sorted(missing)
        metrics = [m for m in metrics if m not in missing]
    else:
        raise RunError(f"ncu rejected metrics on every try (left out so far: {', '.join(dropped)})")
    raw = subprocess.run([ncu, "--import", f"{rep_path}.ncu-rep", "--csv", "--page", "raw", "--print-units", "base"],
                         capture_output=True, text=True, timeout=300)
    if raw.returncode != 0:
        raise RunError(f"ncu could not read back its report (rc {raw.returncode}): {raw.stderr.strip()[-300:]}")
    kernels = parse_raw_csv(raw.stdout)
    try:
        placed = assign(kernels, windows)
    except ValueError as e:
        raise RunError(f"{e}: which kernel is whose is unknown, so nothing is reported") from None
    # ncu 2025.3 profiles on past a counter the GPU lacks and prints "n/a" for it (seen on an H100); older ones fail
    # the run naming it, handled above. Either way the report lists it rather than showing a blank column.
    dropped += [m for m in metrics if not any(isinstance(k.get(m), float) for k in kernels)]
    for w in placed:
        w["kernels"] = [{**summary(k), "raw": {m: k[m] for m in metrics if m in k}} for k in w["kernels"]]
    return placed, dropped


def _main_kernel(w: dict) -> dict:
    """The call's longest kernel (a call may launch a small helper beside its GEMM)."""
    return max(w["kernels"], key=lambda k: k["us"] if math.isfinite(k["us"]) else -1)


def _ratio(ours: float, theirs: float) -> float:
    return ours / theirs if math.isfinite(ours) and math.isfinite(theirs) and theirs > 0 else math.nan


def report(payload: dict) -> str:
    env = payload["env"]
    lines = ["# Where the time goes in GEMM shapes: Nsight Compute counters, ours against cuBLAS", "",
             env_line(env) + f", ncu {payload.get('ncu_version', '?')}", "",
             "One launch each, profiled with `--clock-control none` and caches flushed before each kernel. "
             "**SM busy** = the average SM's active cycles over the kernel's elapsed cycles (what the grid's fill "
             "and tail leave working); **tensor/active** = wgmma's pipe busy as a share of the SMs' active cycles "
             "(per-SM speed); **tensor/elapsed** = the same over all elapsed cycles (about their product).", ""]
    if payload.get("dropped"):
        lines += [f"Counters this ncu or GPU did not give, left out: {', '.join(payload['dropped'])}.", ""]
    lines += ["| M | N | K | side | us (ncu) | grid | waves | regs | smem KiB | SM busy | tensor/active | "
              "tensor/elapsed | DRAM % | L2 hit % | top stalls (% of warp-active) | kernel / config |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    by_shape: dict[tuple, dict] = {}
    for w in payload["calls"]:
        by_shape.setdefault(tuple(w["shape"]), {})[w["side"]] = w
        k = _main_kernel(w)
        # "memory" says only that an earlier call looked it up (a result from before the first call was read)
        where = f" ({w['source']})" if w.get("source") not in (None, "memory") else ""
        label = f"{w['config']}`{where}" if w.get("config") else f"{k['name'][:60]}`"
        extra = f" (+{len(w['kernels']) - 1} more)" if len(w["kernels"]) > 1 else ""
        M, N, K = w["shape"]
        lines.append(
            f"| {M} | {N} | {K} | {w['side']} | {k['us']:.1f} | {k['grid']:.0f} | {k['waves']:.2f} | {k['regs']:.0f} "
            f"| {k['smem_kb']:.0f} | {k['sm_busy']:.2f} | {k['tensor_active_pct']:.0f}% | "
            f"{k['tensor_elapsed_pct']:.0f}% | {k['dram_pct']:.0f} | {k['l2_hit_pct']:.0f} | "
            + ", ".join(f"{s} {v:.1f}" for s, v in k["top_stalls"]) + f" | `{label}{extra} |")
    lines += ["", "## Ours against cuBLAS, split (each ratio oriented so that below 1 means ours is behind; the time "
              "ratio counts every kernel of a call, the other two its longest kernel)", "",
              "| M | N | K | time ratio (cuBLAS / ours) | SM busy ratio (ours / cuBLAS) | tensor/active ratio "
              "(ours / cuBLAS) | reading |", "|---|---|---|---|---|---|---|"]
    for (M, N, K), sides in by_shape.items():
        if set(sides) != {"ours", "cublas"}:
            continue
        o, c = _main_kernel(sides["ours"]), _main_kernel(sides["cublas"])
        t_all = _ratio(*(sum(k["us"] for k in sides[side]["kernels"]) for side in ("cublas", "ours")))
        busy, per_sm = _ratio(o["sm_busy"], c["sm_busy"]), _ratio(o["tensor_active_pct"], c["tensor_active_pct"])
        if not (math.isfinite(busy) and math.isfinite(per_sm)):
            reading = "a counter is missing: no reading"
        else:
            behind = ([f"fill ({busy:.2f}): our SMs idle more of the time"] if busy < 0.95 else []) + (
                [f"per-SM speed ({per_sm:.2f}): our busy SMs keep the tensor pipe less busy"] if per_sm < 0.95 else [])
            reading = "; ".join(behind) or "level on both or ahead"
        lines.append(f"| {M} | {N} | {K} | {t_all:.2f}x | {busy:.2f} | {per_sm:.2f} | {reading} |")
    wrong = [w for w in payload["calls"] if w["side"] == "ours" and not w.get("rel_err", 0) < 2e-2]
    lines += ["", f"Our outputs checked against an fp32 product before profiling: "
              f"{'all within 2e-2 of the largest output' if not wrong else f'{len(wrong)} WRONG'}."]
    return "\n".join(lines)


def main(argv=None):
    ap = parser(__doc__, __file__)
    ap.add_argument("--shapes", type=shape_list, default=SHAPES, metavar="M,N,K;...",
                    help="the shapes (default: the mid-M shapes furthest behind cuBLAS on the H200, M = 64's "
                         "graph-only loss, three contrasts)")
    ap.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--report", type=Path, default=None, metavar="JSON",
                    help="write the markdown again from a stored result (no GPU)")
    args = ap.parse_args(argv)
    from flytune_nb.errors import UsageError

    if args.child is not None:
        child([tuple(s) for s in json.loads(args.child.read_text())])
        return
    if args.report is not None:
        if not args.report.is_file():
            raise UsageError(f"--report {args.report}: no such file (a gemm_profile.json a run wrote)")
        payload = json.loads(args.report.read_text())
        for w in payload["calls"]:  # the figures again from the stored counters, as this version reads them
            w["kernels"] = [{**summary({**k["raw"], "Kernel Name": k["name"]}), "raw": k["raw"]} if "raw" in k else k
                            for k in w["kernels"]]
        write("gemm_profile", payload, report(payload), args.out or args.report.parent, payload["env"]["device"])
        return
    need_gpu("gemm_profile")
    ncu = find_ncu()
    if ncu is None:
        raise UsageError("gemm_profile reads counters with Nsight Compute (ncu), which is not on this machine's PATH")
    version = subprocess.run([ncu, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1:]
    with tempfile.TemporaryDirectory() as tmp:
        calls, dropped = profile(args.shapes, ncu, Path(tmp))
    payload = {"env": environment(), "ncu_version": " ".join(version), "dropped": dropped, "calls": calls}
    write("gemm_profile", payload, report(payload), args.out)


if __name__ == "__main__":
    main()
