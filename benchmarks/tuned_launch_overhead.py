"""How much host time does the tuned launcher add over a raw Triton launch, eager and under CUDA graphs?

Compares, on rmsnorm M=1 N=4096 bf16 (a ~5 us kernel, so host overhead shows), paths that all launch the same
config; times are host wall-clock per call over many calls with the GPU kept ahead (launch-bound). Target: tuned <=
1.05x raw. Host clocks drift: the ratio's two ends are measured alternately and the best kept, and the ratio moves
by about +-0.1 between hosts of the same GPU, so compare ratios of one run.

Paths: raw ``rmsnorm_kernel[grid](...)`` (Triton's dispatch); flytune_nb.kit.launcher's remembered kernel alone; the
compiled kernel's launcher called by hand (the floor: no key, no lookup); the kernel's launcher ``spec.run`` (shape
checks + remembered launch); the tuned call (config resolution + all of that).

Also under CUDA graphs, the way engines serve decode (SGLang captures one graph per batch size): 100 calls captured
once, then replayed; the tuned launcher's resolution runs at capture time only, so per-call replay cost is the
kernel's.
"""
from __future__ import annotations

import time

import torch

from benchmarks.common import environment, need_gpu, parser, write
from flytune_nb.core.device import current_device
from flytune_nb.core.registry import get_kernel
from flytune_nb.kit import launcher as L
from flytune_nb.serve.tuned import TunedKernel, _fast_key

CALLS = 20_000


def per_call(fn, sync: bool = True) -> float:
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(CALLS):
            fn()
        if sync:
            torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / CALLS)
    return best * 1e6


def graph_per_call(fn, calls: int = 100, replays: int = 200) -> float:
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()  # resolve + compile outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    for _ in range(5):
        g.replay()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(replays):
        g.replay()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / (replays * calls) * 1e6


def main(argv=None):
    args = parser(__doc__, __file__).parse_args(argv)
    need_gpu("tuned_launch_overhead")
    dev = current_device()
    spec = get_kernel("rmsnorm")
    shape = {"M": 1, "N": 4096}
    inputs = spec.make_inputs(shape, "bf16", dev)
    op = TunedKernel(spec, device=dev)
    cfg = op.config_for(inputs)
    from importlib import import_module

    kmod = import_module(spec.run.__module__ + ".kernel")
    x, w, y = inputs["x"], inputs["weight"], inputs["out"]
    launch = cfg.launch_options(dev.backend)
    def raw_launch():
        kmod.rmsnorm_kernel[(1,)](x, w, y, 1, x.stride(0), y.stride(0), 4096, 1e-6, BLOCK_M=1,
                                  BLOCK_N=cfg["BLOCK_N"], SINGLE_PASS=True, **launch)

    raw = per_call(raw_launch)
    args = (x, w, y, 1, x.stride(0), y.stride(0), 4096, 1e-6)
    remembered = per_call(lambda: L.launch(kmod.rmsnorm_kernel, (1,), args, cfg, BLOCK_M=1, BLOCK_N=cfg["BLOCK_N"],
                                          SINGLE_PASS=True))
    compiled = kmod.rmsnorm_kernel[(1,)](*args, BLOCK_M=1, BLOCK_N=cfg["BLOCK_N"], SINGLE_PASS=True, **launch)
    krun, fn, packed = compiled.run, compiled.function, compiled.packed_metadata
    stream = torch.cuda.current_stream().cuda_stream
    floor = per_call(lambda: krun(1, 1, 1, stream, fn, packed, None, None, None, *args, 1, cfg["BLOCK_N"], True))
    c_launch = L._c_launch(krun)
    c_floor = float("nan")
    if c_launch is not None:
        c, coop, pdl = c_launch
        c_floor = per_call(lambda: c(1, 1, 1, stream, fn, coop, pdl, None, None, packed, None, None, None, *args,
                                     1, cfg["BLOCK_N"], True))
    fast_key_us = per_call(lambda: _fast_key(inputs), sync=False)
    config_for_us = per_call(lambda: op.config_for(inputs), sync=False)
    wrapper = per_call(lambda: spec.run(inputs, cfg))
    tuned = per_call(lambda: op(**inputs))
    for _ in range(2):  # the ratio's two ends again, alternated, best kept: host clocks drift between measurements
        raw = min(raw, per_call(raw_launch))
        tuned = min(tuned, per_call(lambda: op(**inputs)))
    raw_graph = graph_per_call(raw_launch)
    tuned_graph = graph_per_call(lambda: op(**inputs))
    env = environment()
    payload = {"env": env, "config": str(cfg), "source": op.last_source, "raw_us": raw, "remembered_launch_us": remembered,
               "compiled_launcher_floor_us": floor,
               "c_launch_floor_us": c_floor, "fast_key_us": fast_key_us, "config_for_hit_us": config_for_us, "launcher_us": wrapper,
               "tuned_us": tuned, "tuned_over_raw": tuned / raw, "raw_graph_us": raw_graph,
               "tuned_graph_us": tuned_graph, "tuned_over_raw_graph": tuned_graph / raw_graph}
    md = "\n".join([f"# Tuned launch overhead, rmsnorm M=1 N=4096 bf16 ({op.last_source} config `{cfg}`)",
                    f"{env['device']}, {env['date']}, torch {env['torch']}, triton {env['triton']}", "",
                    "| path | host time per call |", "|---|---|", f"| raw Triton launch `kernel[grid](...)` | {raw:.2f} us |",
                    f"| compiled kernel's launcher `kernel.run(...)` called by hand | {floor:.2f} us |",
                    f"| its C launch called by hand (the floor) | {c_floor:.2f} us |",
                    f"| flytune_nb.kit.launcher, remembered kernel | {remembered:.2f} us |",
                    f"| kernel launcher (spec.run) | {wrapper:.2f} us |", f"| tuned(...) call | {tuned:.2f} us |",
                    f"| tuned / raw | {tuned / raw:.3f} |", "",
                    f"Pieces of the tuned call (host only, no launch): the memory cache's key {fast_key_us:.2f} us, "
                    f"a whole memory hit (`config_for`) {config_for_us:.2f} us.", "",
                    "Under a CUDA graph (100 calls captured once, replayed; per call):", "",
                    "| path | per call |", "|---|---|", f"| raw Triton launch, captured | {raw_graph:.2f} us |",
                    f"| tuned(...) call, captured | {tuned_graph:.2f} us |",
                    f"| tuned / raw | {tuned_graph / raw_graph:.3f} |"])
    write("tuned_launch_overhead", payload, md, out=args.out)


if __name__ == "__main__":
    main()
