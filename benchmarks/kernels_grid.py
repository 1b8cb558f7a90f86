"""Issue #6's first benchmark slice, one run on one GPU, every time from the same GpuTimer (L2 flushed per rep):

1. fused_moe: the heuristic default vs the plain torch loop over experts (Mixtral-8x7B shape);
2. matmul: the heuristic default (no search yet) vs torch.matmul (cuBLAS) over SGLang batch sizes x two model shapes;
3. memory-bound kernels (rmsnorm, fused_add_rmsnorm, softmax), bf16, M x N grid: heuristic default and searched best
   (successive halving through the sweep engine, precompiled) vs torch eager and torch.compile (static shapes), and
   the best's share of the measured device-to-device copy bandwidth.
A deadline (BENCH_DEADLINE_S, default 330 s) keeps it inside one device call: sections stop adding shapes when it
passes, and the table says which were skipped. SECTIONS (default moe,gemm,memory) and MEM_KERNELS pick a slice;
BENCH_NAME names the result files (default kernels_grid)."""
from __future__ import annotations

import os
import time

import torch

from common import copy_bandwidth, environment, write
from flytune_nb.analysis import geomean
from flytune_nb.bench import GpuTimer
from flytune_nb.device import current_device
from flytune_nb.registry import get_kernel
from flytune_nb.sweep import Sweep

T0 = time.perf_counter()
DEADLINE = float(os.environ.get("BENCH_DEADLINE_S", 330))
MEM_M, MEM_N = (1, 256, 4096, 32768), (1024, 4096, 16384)
GEMM_M, GEMM_NK = (1, 16, 64, 256, 1024, 4096), ((4096, 4096), (14336, 4096))
MOE = {"E": 8, "N": 14336, "K": 4096, "topk": 2}
MOE_M = (1, 64, 512, 4096)


def left() -> float:
    return DEADLINE - (time.perf_counter() - T0)


def timed(timer, spec, inputs, fn):
    setup = spec.rep_setup(inputs, spec.snapshot(inputs))
    return timer.measure(fn, setup).p50


def compiled_p50(timer, spec, inputs):
    torch._dynamo.reset()  # static shapes, fresh dynamo state per shape (a reused function recompiles dynamic)
    fn = torch.compile(spec.baseline, dynamic=False)
    for _ in range(3):
        fn(inputs)
    return timed(timer, spec, inputs, lambda: fn(inputs))


def memory_bound(dev, timer, bw, rows, data):
    for kernel in os.environ.get("MEM_KERNELS", "rmsnorm,fused_add_rmsnorm,softmax").split(","):
        if left() < 60:
            rows.append(f"| {kernel} | skipped: deadline | | | | | | | | |")
            continue
        spec = get_kernel(kernel)
        grid = {"M": list(MEM_M), "N": list(MEM_N)}
        results = Sweep(kernel, grid, ["bf16"], strategy="halving", baselines=(),
                        timer={"rep_ms": 25.0, "warmup_ms": 5.0}).run()
        for r in results:
            shape = r.shape
            if left() < 10:
                rows.append(f"| {kernel} | {shape['M']} | {shape['N']} | skipped: deadline | | | | | | |")
                continue
            inputs = spec.make_inputs(shape, "bf16", dev)
            best = timed(timer, spec, inputs, lambda: spec.run(inputs, r.best.config))
            default = timed(timer, spec, inputs, lambda: spec.run(inputs, r.default))
            eager = timed(timer, spec, inputs, lambda: spec.baseline(inputs))
            comp = compiled_p50(timer, spec, inputs)
            frac = spec.bytes(shape, "bf16") / (best * 1e-3) / bw
            vs = min(eager, comp) / best
            data.append({"kernel": kernel, "shape": shape, "best": str(r.best.config), "best_ms": best,
                         "default": str(r.default), "default_ms": default, "eager_ms": eager, "compile_ms": comp,
                         "copy_bw_fraction": frac, "vs_better_torch": vs, "configs": len(r.trials)})
            rows.append(f"| {kernel} | {shape['M']} | {shape['N']} | {default * 1e3:.2f} | {best * 1e3:.2f} | "
                        f"{eager * 1e3:.2f} | {comp * 1e3:.2f} | {vs:.2f}x | {frac:.0%} | `{r.best.config}` |")
            del inputs


def gemm(dev, timer, rows, data):
    spec = get_kernel("matmul")
    for N, K in GEMM_NK:
        for M in GEMM_M:
            if left() < 10:
                rows.append(f"| {M} | {N} | {K} | skipped: deadline | | | | |")
                continue
            shape = {"M": M, "N": N, "K": K}
            inputs = spec.make_inputs(shape, "bf16", dev)
            cfg = spec.default(shape, "bf16", dev)
            ours = timed(timer, spec, inputs, lambda: spec.run(inputs, cfg))
            torch_ms = timed(timer, spec, inputs, lambda: spec.baseline(inputs))
            tflops = spec.flops(shape, "bf16") / (ours * 1e-3) / 1e12
            data.append({"shape": shape, "default": str(cfg), "default_ms": ours, "torch_ms": torch_ms,
                         "ratio": torch_ms / ours, "tflops": tflops})
            rows.append(f"| {M} | {N} | {K} | {ours * 1e3:.1f} | {torch_ms * 1e3:.1f} | {torch_ms / ours:.2f}x | "
                        f"{tflops:.0f} | `{cfg}` |")


def moe(dev, timer, rows, data):
    spec = get_kernel("fused_moe")
    for M in MOE_M:
        if left() < 10:
            rows.append(f"| {M} | skipped: deadline | | | |")
            continue
        shape = {"M": M, **MOE}
        inputs = spec.make_inputs(shape, "bf16", dev)
        cfg = spec.default(shape, "bf16", dev)
        ours = timed(timer, spec, inputs, lambda: spec.run(inputs, cfg))
        ref = timed(timer, spec, inputs, lambda: spec.baseline(inputs))
        data.append({"shape": shape, "default": str(cfg), "default_ms": ours, "torch_loop_ms": ref})
        rows.append(f"| {M} | {ours * 1e3:.1f} | {ref * 1e3:.1f} | {ref / ours:.2f}x | `{cfg}` |")
        del inputs


def main():
    dev = current_device()
    bw = copy_bandwidth()
    timer = GpuTimer(dev, warmup_ms=5, rep_ms=25)
    env = environment()
    mem_rows, gemm_rows, moe_rows = [], [], []
    payload = {"env": env, "copy_bandwidth_Bps": bw, "memory_bound": [], "matmul": [], "fused_moe": []}
    sections = os.environ.get("SECTIONS", "moe,gemm,memory").split(",")
    if "moe" in sections:
        moe(dev, timer, moe_rows, payload["fused_moe"])
    if "gemm" in sections:
        gemm(dev, timer, gemm_rows, payload["matmul"])
    if "memory" in sections:
        memory_bound(dev, timer, bw, mem_rows, payload["memory_bound"])
    mb = payload["memory_bound"]
    geo = geomean(c["vs_better_torch"] for c in mb)
    payload["memory_bound_geomean_vs_better_torch"] = geo
    md = "\n".join([
        "# Kernels on the H200: tuned / heuristic default vs torch",
        f"{env['device']} ({env['arch']}), {env['date']}, torch {env['torch']}, triton {env['triton']}, "
        f"flytune_nb {env['flytune_nb']}; measured copy bandwidth {bw / 1e12:.2f} TB/s (read+write). "
        "All times p50 of flytune's GpuTimer (L2 flushed between reps), in us.", "",
        f"## fused_moe, bf16, E={MOE['E']} N={MOE['N']} K={MOE['K']} top-{MOE['topk']}: heuristic default vs the "
        "torch loop over experts", "",
        "| M | ours | torch loop | speedup | default config |", "|---|---|---|---|---|", *moe_rows, "",
        "## matmul, bf16: heuristic default (no search) vs torch.matmul (cuBLAS)", "",
        "| M | N | K | ours | torch.matmul | torch / ours | ours TFLOP/s | default config |",
        "|---|---|---|---|---|---|---|---|", *gemm_rows, "",
        "## Memory-bound, bf16 (best = successive halving over the pruned space)", "",
        "| kernel | M | N | default | best | torch eager | torch.compile | best vs better torch | best, share of copy BW "
        "| best config |", "|---|---|---|---|---|---|---|---|---|---|", *mem_rows, "",
        f"Geomean of best vs the better of eager/compile: {geo:.2f}x over {len(mb)} shapes."])
    write(os.environ.get("BENCH_NAME", "kernels_grid"), payload, md)


if __name__ == "__main__":
    main()
