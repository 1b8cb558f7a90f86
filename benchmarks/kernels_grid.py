"""How do the built-in kernels, heuristic default and tuned, compare with torch on this GPU?

Compares, in one run on one GPU, every time from the same GpuTimer (L2 flushed per rep):

1. fused_moe: the heuristic default and the committed export vs the plain torch loop over experts (Mixtral-8x7B);
2. matmul: the heuristic default and the committed export vs torch.matmul (cuBLAS), batch sizes x two model shapes;
3. memory-bound kernels (rmsnorm, fused_add_rmsnorm, softmax), bf16, M x N grid: heuristic default, the best
   one-row-per-program config and the searched best (--mem-strategy, through the sweep engine, precompiled) vs
   torch eager and torch.compile (static shapes); the best's share of the measured device-to-device copy bandwidth
   and its speed against a copy of the same bytes.

A deadline keeps it bounded: sections stop adding shapes when it passes, and the table says which were skipped
(the whole default grid takes about 5 minutes on an H200).
"""
from __future__ import annotations

import time

import torch

from benchmarks.common import compiled_p50, copy_bandwidth, environment, int_list, need_gpu, parser, timed, write
from flytune_nb.analysis.scores import geomean
from flytune_nb.measure.timer import GpuTimer
from flytune_nb.core.device import current_device
from flytune_nb.serve.lookup import artifact_hook
from flytune_nb.core.registry import get_kernel
from flytune_nb.engine.sweep import Sweep

MEM_M, MEM_N = (1, 256, 4096, 32768), (1024, 4096, 16384)
GEMM_M, GEMM_NK = (1, 16, 64, 256, 1024, 4096), ((4096, 4096), (14336, 4096))
MOE = {"E": 8, "N": 14336, "K": 4096, "topk": 2}
MOE_M = (1, 64, 512, 4096)
SECTIONS = ("moe", "gemm", "memory")
MEM_KERNELS = ("rmsnorm", "fused_add_rmsnorm", "softmax")


class Deadline:
    def __init__(self, seconds: float):
        self.end = time.perf_counter() + seconds

    def __call__(self) -> float:
        """Seconds left."""
        return self.end - time.perf_counter()


def copy_p50(timer, n_bytes, dev):
    """A device-to-device copy moving the same bytes (half read, half written): what any kernel of this size can
    reach, launch and ramp included (4096 x 1024 bf16 rmsnorm moves 16 MiB: ~4 us at the 4.25 TB/s of a 4 GiB
    copy, which a small copy's ramp never reaches)."""
    src = torch.empty(n_bytes // 2, dtype=torch.uint8, device=dev.torch_device)
    dst = torch.empty_like(src)
    return timer.measure(lambda: dst.copy_(src)).p50


def one_row_best(r):
    """The fastest correct trial without BLOCK_M (one row per program), to show what rows per program add."""
    ok = [t for t in r.trials if t.ok and t.config.get("BLOCK_M") is None and t.fidelity == "full"]
    return min(ok, key=lambda t: t.p50).config if ok else None


def memory_bound(dev, timer, bw, rows, data, args, left):
    strategy = args.mem_strategy
    grid = {"M": list(args.mem_m), "N": list(args.mem_n)}
    for kernel in args.mem_kernels.split(","):
        if left() < 60:
            rows.append(f"| {kernel} | skipped: deadline | | | | | | | | | | |")
            continue
        spec = get_kernel(kernel)
        results = Sweep(kernel, grid, ["bf16"], strategy=strategy, baselines=(),
                        timer={"rep_ms": 25.0, "warmup_ms": 5.0}).run()
        for r in results:
            shape = r.shape
            if left() < 10:
                rows.append(f"| {kernel} | {shape['M']} | {shape['N']} | skipped: deadline | | | | | | | | |")
                continue
            inputs = spec.make_inputs(shape, "bf16", dev)
            best = timed(timer, spec, inputs, lambda: spec.run(inputs, r.best.config))
            one_cfg = one_row_best(r)
            one = timed(timer, spec, inputs, lambda: spec.run(inputs, one_cfg)) if one_cfg else float("nan")
            default = timed(timer, spec, inputs, lambda: spec.run(inputs, r.default))
            eager = timed(timer, spec, inputs, lambda: spec.baseline(inputs))
            comp = compiled_p50(timer, spec, inputs)
            n_bytes = spec.bytes(shape, "bf16")
            copy = copy_p50(timer, n_bytes, dev)
            frac = n_bytes / (best * 1e-3) / bw
            vs = min(eager, comp) / best
            data.append({"kernel": kernel, "shape": shape, "best": str(r.best.config), "best_ms": best,
                         "one_row_best": str(one_cfg), "one_row_best_ms": one,
                         "default": str(r.default), "default_ms": default, "eager_ms": eager, "compile_ms": comp,
                         "copy_same_bytes_ms": copy, "copy_bw_fraction": frac, "vs_same_bytes_copy": copy / best,
                         "vs_better_torch": vs, "configs": len(r.trials), "strategy": strategy})
            rows.append(f"| {kernel} | {shape['M']} | {shape['N']} | {default * 1e3:.2f} | {one * 1e3:.2f} | "
                        f"{best * 1e3:.2f} | {eager * 1e3:.2f} | {comp * 1e3:.2f} | {vs:.2f}x | {frac:.0%} | "
                        f"{copy / best:.0%} | `{r.best.config}` |")
            del inputs


def gemm(dev, timer, rows, data, left):
    spec = get_kernel("matmul")
    for N, K in GEMM_NK:
        for M in GEMM_M:
            if left() < 10:
                rows.append(f"| {M} | {N} | {K} | skipped: deadline | | | | | | |")
                continue
            shape = {"M": M, "N": N, "K": K}
            inputs = spec.make_inputs(shape, "bf16", dev)
            cfg, tuned_cfg = spec.default(shape, "bf16", dev), artifact_hook(spec, shape, "bf16", dev)
            ours = timed(timer, spec, inputs, lambda: spec.run(inputs, cfg))
            tuned = timed(timer, spec, inputs, lambda: spec.run(inputs, tuned_cfg)) if tuned_cfg not in (None, cfg) \
                else ours
            torch_ms = timed(timer, spec, inputs, lambda: spec.baseline(inputs))
            best = min(ours, tuned)
            tflops = spec.flops(shape, "bf16") / (best * 1e-3) / 1e12
            data.append({"shape": shape, "default": str(cfg), "default_ms": ours, "export": str(tuned_cfg),
                         "export_ms": tuned, "torch_ms": torch_ms, "ratio_default": torch_ms / ours,
                         "ratio_export": torch_ms / tuned, "tflops_best": tflops})
            rows.append(f"| {M} | {N} | {K} | {ours * 1e3:.1f} | {tuned * 1e3:.1f} | {torch_ms * 1e3:.1f} | "
                        f"{torch_ms / ours:.2f}x | {torch_ms / tuned:.2f}x | {tflops:.0f} | `{tuned_cfg or cfg}` |")
            del inputs


def moe(dev, timer, rows, data, left):
    spec = get_kernel("fused_moe")
    for M in MOE_M:
        if left() < 10:
            rows.append(f"| {M} | skipped: deadline | | | | | |")
            continue
        shape = {"M": M, **MOE}
        inputs = spec.make_inputs(shape, "bf16", dev)
        cfg, tuned_cfg = spec.default(shape, "bf16", dev), artifact_hook(spec, shape, "bf16", dev)
        ours = timed(timer, spec, inputs, lambda: spec.run(inputs, cfg))
        tuned = timed(timer, spec, inputs, lambda: spec.run(inputs, tuned_cfg)) if tuned_cfg not in (None, cfg) \
            else ours
        ref = timed(timer, spec, inputs, lambda: spec.baseline(inputs))
        data.append({"shape": shape, "default": str(cfg), "default_ms": ours, "export": str(tuned_cfg),
                     "export_ms": tuned, "torch_loop_ms": ref})
        rows.append(f"| {M} | {ours * 1e3:.1f} | {tuned * 1e3:.1f} | {ref * 1e3:.1f} | {ref / ours:.2f}x | "
                    f"{ref / tuned:.2f}x | `{tuned_cfg or cfg}` |")
        del inputs


def main(argv=None):
    ap = parser(__doc__, __file__)
    ap.add_argument("--deadline-s", type=float, default=330,
                    help="seconds after which sections stop adding shapes (default %(default)s)")
    ap.add_argument("--sections", default=",".join(SECTIONS), help="which sections (default: %(default)s)")
    ap.add_argument("--mem-m", type=int_list, default=MEM_M, metavar="M,...",
                    help="memory-bound batch sizes (default: " + ",".join(map(str, MEM_M)) + ")")
    ap.add_argument("--mem-n", type=int_list, default=MEM_N, metavar="N,...",
                    help="memory-bound row lengths (default: " + ",".join(map(str, MEM_N)) + ")")
    ap.add_argument("--mem-kernels", default=",".join(MEM_KERNELS), help="memory-bound kernels (default: %(default)s)")
    ap.add_argument("--mem-strategy", default="halving",
                    help="how the memory-bound best is searched: halving, exhaustive, ... (default: %(default)s)")
    ap.add_argument("--name", default="kernels_grid", help="result file name (default: %(default)s)")
    args = ap.parse_args(argv)
    sections = [s for s in args.sections.split(",") if s]
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        ap.error(f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    need_gpu("kernels_grid")
    left = Deadline(args.deadline_s)
    dev = current_device()
    bw = copy_bandwidth()
    timer = GpuTimer(dev, warmup_ms=5, rep_ms=25)
    env = environment()
    mem_rows, gemm_rows, moe_rows = [], [], []
    payload = {"env": env, "copy_bandwidth_Bps": bw, "memory_bound": [], "matmul": [], "fused_moe": []}
    if "moe" in sections:
        moe(dev, timer, moe_rows, payload["fused_moe"], left)
    if "gemm" in sections:
        gemm(dev, timer, gemm_rows, payload["matmul"], left)
    if "memory" in sections:
        memory_bound(dev, timer, bw, mem_rows, payload["memory_bound"], args, left)
    mb = payload["memory_bound"]
    geo = geomean(c["vs_better_torch"] for c in mb)
    payload["memory_bound_geomean_vs_better_torch"] = geo
    md = "\n".join([
        f"# Kernels on {env['device']}: tuned / heuristic default vs torch",
        f"{env['device']} ({env['arch']}), {env['date']}, torch {env['torch']}, triton {env['triton']}, "
        f"flytune_nb {env['flytune_nb']}; measured copy bandwidth {bw / 1e12:.2f} TB/s (read+write). "
        "All times p50 of flytune's GpuTimer (L2 flushed between reps), in us.", "",
        f"## fused_moe, bf16, E={MOE['E']} N={MOE['N']} K={MOE['K']} top-{MOE['topk']}: heuristic default and the "
        "committed export (tuned) vs the torch loop over experts", "",
        "| M | default | tuned | torch loop | default speedup | tuned speedup | tuned config |",
        "|---|---|---|---|---|---|---|", *moe_rows, "",
        "## matmul, bf16: heuristic default (no search) and the committed export (tuned) vs torch.matmul (cuBLAS)", "",
        "| M | N | K | default | tuned | torch.matmul | torch / default | torch / tuned | best TFLOP/s | tuned config |",
        "|---|---|---|---|---|---|---|---|---|---|", *gemm_rows, "",
        f"## Memory-bound, bf16 (best = {args.mem_strategy} over the pruned space)", "",
        "one-row best: the fastest config without BLOCK_M (one row per program). Copy BW: the best's bytes over its "
        "time, as a share of the 4 GiB copy's bandwidth; same-bytes copy: a device copy moving the same bytes, its "
        "time over ours.", "",
        "| kernel | M | N | default | one-row best | best | torch eager | torch.compile | best vs better torch "
        "| share of copy BW | vs same-bytes copy | best config |", "|---|---|---|---|---|---|---|---|---|---|---|---|",
        *mem_rows, "",
        f"Geomean of best vs the better of eager/compile: {geo:.2f}x over {len(mb)} shapes."])
    write(args.name, payload, md, out=args.out)


if __name__ == "__main__":
    main()
