"""How fast does a compile census run on this machine, and does census pruning find the same winner in less time?

Three questions, one subcommand each (every census here starts from an empty Triton cache, so it pays every
compile; a re-run with the cache warm costs ~20 ms a config):

- ``throughput``: configs/s per kernel and target (a spread sample of each example shape's space), with 1 and 2
  processes. On a shared machine the rate is what the other tenants leave: the load average is recorded.
- ``matmul-space``: the whole matmul space at M=N=K=4096 for a target (default mi300x, gfx942) with ``--jobs``
  processes. Target: <= 4 minutes on 2 cores.
- ``prune-sweep`` (GPU; on the CPU path with ``--target``): the same grid swept twice from empty Triton caches,
  exhaustively and with ``prune="census"``; each shape's winners must be within ``--band`` (2%) of each other and
  the pruned sweep's wall time (census included) is reported against the full one's. Row kernels sweep ``--grid``
  over their whole space; matmul sweeps ``--gemm-grid`` over ``--gemm-sample`` configs spread over its space (the
  whole ~1800-config space twice would take the device's ten minutes), the same configs in both sweeps. On the
  H200 (about 5 minutes): ``python -m benchmarks census prune-sweep --kernels rmsnorm,softmax,fused_add_rmsnorm,matmul``.

Results: census_<subcommand>.json / .md under benchmarks/results/<device>/ (or --out DIR).
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import environment, parser, write

KERNELS = ("rmsnorm", "fused_add_rmsnorm", "softmax", "matmul", "fused_moe")
TARGETS = ("mi300x", "mi355x", "h200", "b200")


def _load() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def _fresh_cache() -> None:
    """Every census below compiles from nothing: its own empty cache root."""
    os.environ["FLYTUNE_CENSUS_CACHE"] = tempfile.mkdtemp(prefix="census-cache-")


def _census(kernel: str, target: str, jobs: int, **kw):
    from flytune_nb.engine.census_pool import Census

    t0, load0 = time.perf_counter(), _load()
    c = Census(kernel, kw.pop("grid", None), ["bf16"], target=target, jobs=jobs, **kw)
    (s,) = c.run()
    return s, time.perf_counter() - t0, (load0 + _load()) / 2


def throughput(args) -> None:
    rows = []
    for target in args.targets.split(","):
        for kernel in args.kernels.split(","):
            for jobs in (int(j) for j in args.jobs.split(",")):
                _fresh_cache()
                s, wall, load = _census(kernel, target, jobs, sample=args.sample, siblings=False)
                rows.append({"kernel": kernel, "target": target, "jobs": jobs, "configs": s.configs,
                             "compile_wall_s": round(s.wall_s, 2), "wall_s": round(wall, 2),
                             "configs_per_s": round(s.configs / s.wall_s, 2), "load": round(load, 1),
                             "sum_compile_s": round(sum(r.compile_s for r in s.rows), 2),
                             "failed": s.failed, "spilling": len(s.spilling), "duplicates": s.duplicates})
                print(rows[-1], flush=True)
    md = ["# Compile census throughput", "",
          f"{os.cpu_count()} cores; example shapes, ~{args.sample} configs a space (spread), empty Triton caches. "
          "`configs/s` counts the compiles only; `wall` adds the processes' start (torch + Triton imports).", "",
          "| kernel | target | processes | configs | configs/s | compile s | wall s | CPU s a config | load |",
          "|---|---|---|---|---|---|---|---|---|"]
    md += [f"| {r['kernel']} | {r['target']} | {r['jobs']} | {r['configs']} | {r['configs_per_s']} | "
           f"{r['compile_wall_s']} | {r['wall_s']} | {r['sum_compile_s'] / max(1, r['configs']):.2f} | {r['load']} |"
           for r in rows]
    write("census_throughput", {"env": environment(), "rows": rows, "sample": args.sample}, "\n".join(md), out=args.out)


def matmul_space(args) -> None:
    _fresh_cache()
    s, wall, load = _census("matmul", args.target, args.jobs, grid=f"M={args.M} N=4096 K=4096",
                            siblings=not args.every_config)
    built = s.configs - s.siblings
    payload = {"env": environment(), "target": args.target, "jobs": args.jobs, "configs": s.configs,
               "every_config": args.every_config, "compiled_itself": built, "siblings": s.siblings,
               "compiled": s.compiled, "wall_s": round(wall, 1), "compile_wall_s": round(s.wall_s, 1),
               "configs_per_s": round(s.configs / s.wall_s, 2), "compiles_per_s": round(built / s.wall_s, 2),
               "load": round(load, 1), "spilling": [str(r.config) for r in s.spilling], "duplicates": s.duplicates,
               "occupancy_hist": s.occupancy_hist, "registers": s.registers, "narrow": len(s.narrow)}
    from flytune_nb.measure.census import format_summary

    md = [f"# The whole matmul space at M={args.M} N=K=4096 for {args.target}", "",
          f"{s.configs} configs, {args.jobs} processes on {os.cpu_count()} cores, empty Triton cache: **{wall:.0f} s** "
          f"wall ({s.wall_s:.0f} s compiling, {s.configs / s.wall_s:.1f} configs/s, {built / s.wall_s:.1f} "
          f"compiles/s); load average {load:.1f} "
          f"(a load above the core count means other jobs shared the cores). Target: <= 240 s on 2 cores.", "",
          (f"Every config compiled itself (`--every-config`)." if args.every_config else
           f"{built} configs compiled; the other {s.siblings} differ from one of them only in GROUP_SIZE_M (the "
           f"tile order) and share its resources (KernelSpec.schedule_knobs; tests/backends/test_amd_census.py "
           f"compiles such siblings and checks that registers, LDS, occupancy, MFMA and loads agree). "
           f"`--every-config` compiles all {s.configs}."), "",
          "```", format_summary(s), "```"]
    write(f"census_matmul_space_{args.target}", payload, "\n".join(md), out=args.out)


def prune_sweep(args) -> None:
    from flytune_nb.core.device import current_device
    from flytune_nb.engine.sweep import Sweep

    if not current_device().is_gpu and not args.target:
        raise SystemExit("prune-sweep needs a GPU, or --target NAME to decide on a named GPU's binaries (CPU path)")
    from flytune_nb.core.registry import get_kernel
    from flytune_nb.core.shapes import parse_grid
    from flytune_nb.engine.census_pool import spread

    prune = "census" + (f":{args.target}" if args.target else "")
    out = []
    for kernel in args.kernels.split(","):
        runs, grid, configs = {}, args.grid, None
        if kernel == "matmul":
            grid, spec = args.gemm_grid, get_kernel(kernel)
            first = spec.check_shape(parse_grid(grid, spec.axes)[0])
            configs = spread(list(spec.configs(first, "bf16", current_device())), sample=args.gemm_sample)
        for mode in ("full", "pruned"):
            os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="triton-cache-")  # both compile everything
            os.environ["FLYTUNE_CENSUS_CACHE"] = tempfile.mkdtemp(prefix="census-cache-")
            db = Path(tempfile.mkdtemp(prefix="prune-")) / "s.db"
            t0 = time.perf_counter()
            sw = Sweep(kernel, grid, ["bf16"], db=db, baselines=(), timer={"rep_ms": args.rep_ms}, configs=configs,
                       prune=prune if mode == "pruned" else None)
            results = sw.run()
            why = [d for v in (sw.prune.dropped.values() if sw.prune else []) for d in v.values()]
            runs[mode] = {"wall_s": time.perf_counter() - t0, "results": results,
                          "census_from": ("precompile pool" if sw.prune.from_pool else "census processes")
                          if sw.prune else "",
                          "dropped_spill": sum(d.startswith("spills") for d in why),
                          "dropped_same_binary": sum(d.startswith("same binary") for d in why),
                          "twins": sum(t.reason.startswith("same binary") for r in results for t in r.trials)}
        for full, pruned in zip(runs["full"]["results"], runs["pruned"]["results"]):
            fb, pb = full.best, pruned.best
            ratio = pb.p50 / fb.p50 if fb and pb else float("nan")
            out.append({"kernel": kernel, "shape": full.shape, "full_configs": len(full.trials),
                        "pruned_configs": len(pruned.trials), "full_best": str(fb.config), "full_p50_ms": fb.p50,
                        "pruned_best": str(pb.config), "pruned_p50_ms": pb.p50, "winner_ratio": round(ratio, 4),
                        "same_winner_within_band": abs(ratio - 1) <= args.band})
        out.append({"kernel": kernel, "grid": grid, "configs_given": len(configs) if configs else None,
                    "full_wall_s": round(runs["full"]["wall_s"], 1),
                    "pruned_wall_s": round(runs["pruned"]["wall_s"], 1),
                    "time_ratio": round(runs["pruned"]["wall_s"] / runs["full"]["wall_s"], 3),
                    "census_from": runs["pruned"]["census_from"], "dropped_spill": runs["pruned"]["dropped_spill"],
                    "dropped_same_binary": runs["pruned"]["dropped_same_binary"],
                    "twins_full": runs["full"]["twins"], "twins_pruned": runs["pruned"]["twins"]})
        print(out[-1], flush=True)
    dev = current_device()
    title = f"# Census-pruned sweep vs exhaustive on {dev.name}" + (f" (census for {args.target})" if args.target else "")
    md = [title,
          "", f"row kernels: grid {args.grid}, whole space; matmul: grid {args.gemm_grid}, {args.gemm_sample} configs "
          f"spread over its space, the same in both sweeps; bf16, rep_ms {args.rep_ms}; each sweep from an empty "
          f"Triton cache. Winners agree when within {args.band:.0%}. A config whose binary is another's is timed "
          f"once in both sweeps (identical-binary detection: \"twins\").", "",
          "| kernel | shape | configs full / pruned | full best p50 | pruned best p50 | ratio | same winner |",
          "|---|---|---|---|---|---|---|"]
    for r in out:
        if "shape" in r:
            shape = " ".join(f"{k}={v}" for k, v in r["shape"].items())
            md.append(f"| {r['kernel']} | {shape} | {r['full_configs']} / {r['pruned_configs']} | "
                      f"{r['full_p50_ms'] * 1e3:.1f} us | {r['pruned_p50_ms'] * 1e3:.1f} us | {r['winner_ratio']} | "
                      f"{'yes' if r['same_winner_within_band'] else 'NO'} |")
    md += ["", "| kernel | full sweep wall | pruned sweep wall (census included) | ratio | census from | not timed: "
           "spill / same binary | twins full / pruned |", "|---|---|---|---|---|---|---|"]
    md += [f"| {r['kernel']} | {r['full_wall_s']} s | {r['pruned_wall_s']} s | {r['time_ratio']} | {r['census_from']} "
           f"| {r['dropped_spill']} / {r['dropped_same_binary']} | {r['twins_full']} / {r['twins_pruned']} |"
           for r in out if "time_ratio" in r]
    write("census_prune_sweep", {"env": environment(), "rows": out, "grid": args.grid, "gemm_grid": args.gemm_grid,
                                 "gemm_sample": args.gemm_sample, "band": args.band},
          "\n".join(md), out=args.out)


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__, __file__)
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("throughput", help="configs/s per kernel and target")
    t.add_argument("--kernels", default=",".join(KERNELS))
    t.add_argument("--targets", default=",".join(TARGETS))
    t.add_argument("--sample", type=int, default=24, help="configs a space (spread over it)")
    t.add_argument("--jobs", default="1,2", help="process counts to compare")
    m = sub.add_parser("matmul-space", help="the whole matmul space at M=4096 for one target")
    m.add_argument("--target", default="mi300x")
    m.add_argument("--jobs", type=int, default=2)
    m.add_argument("--M", type=int, default=4096)
    m.add_argument("--every-config", action="store_true", help="compile every config itself (no tile-order siblings)")
    s = sub.add_parser("prune-sweep", help="exhaustive vs census-pruned sweep: same winner, less time?")
    s.add_argument("--kernels", default="rmsnorm,softmax,fused_add_rmsnorm")
    s.add_argument("--grid", default="M=1,4096 N=4096,8192")
    s.add_argument("--gemm-grid", default="M=4096 N=4096 K=4096", help="matmul's grid")
    s.add_argument("--gemm-sample", type=int, default=240, help="matmul configs, spread over its space")
    s.add_argument("--rep-ms", type=float, default=50.0)
    s.add_argument("--band", type=float, default=0.02, help="winners within this fraction count as the same")
    s.add_argument("--target", default=None, help="compile for this named GPU (the CPU path); default: the GPU here")
    args = p.parse_args(argv)
    {"throughput": throughput, "matmul-space": matmul_space, "prune-sweep": prune_sweep}[args.cmd](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
