"""How far is the row kernels' heuristic default from their searched best, and both from torch?

Compares rmsnorm and fused_add_rmsnorm (bf16, M = 1, 64, 4096 x N = 4096, 8192): the heuristic default, the
searched best (every config of the space), torch eager and torch.compile (static shapes), with the best's share of
the measured copy bandwidth. All timed with the same GpuTimer (L2 flushed per rep) in one run on one GPU;
kernels_grid asks the same of every built-in kernel over a larger grid.
"""
from __future__ import annotations

from benchmarks.common import copy_bandwidth, environment, need_gpu, parser, static_compiled, write
from flytune_nb.measure.timer import GpuTimer
from flytune_nb.core.device import current_device
from flytune_nb.core.registry import get_kernel
from flytune_nb.strategies.loop import search

CASES = [("rmsnorm", m, n) for m in (1, 64, 4096) for n in (4096, 8192)] + \
        [("fused_add_rmsnorm", m, n) for m in (1, 64, 4096) for n in (4096, 8192)]


def main(argv=None):
    args = parser(__doc__, __file__).parse_args(argv)
    need_gpu("kernels_vs_torch")
    dev = current_device()
    bw = copy_bandwidth()
    timer = GpuTimer(dev)
    search_timer = GpuTimer(dev, warmup_ms=5, rep_ms=25)  # ~50 configs x 12 cases must fit one device call
    payload = {"env": environment(), "copy_bandwidth_Bps": bw, "cases": []}
    rows = []
    for kernel, M, N in CASES:
        spec = get_kernel(kernel)
        shape = {"M": M, "N": N}
        r = search(spec, shape, "bf16", dev, search_timer)
        inputs = spec.make_inputs(shape, "bf16", dev)
        setup = spec.rep_setup(inputs, spec.snapshot(inputs))
        base = spec.baseline
        eager = timer.measure(lambda: base(inputs), setup).p50
        compiled_fn = static_compiled(base)  # static shapes, fresh dynamo state per case (common.py says why)
        for _ in range(3):
            compiled_fn(inputs)
        compiled = timer.measure(lambda: compiled_fn(inputs), setup).p50
        nbytes = spec.bytes(shape, "bf16")
        # Re-time the two configs that matter with the full timer, like the baselines.
        best = timer.measure(lambda: spec.run(inputs, r.best.config), setup).p50
        default = timer.measure(lambda: spec.run(inputs, r.default), setup).p50
        pct = lambda ms: nbytes / (ms * 1e-3) / bw  # noqa: E731
        case = {"kernel": kernel, "shape": shape, "default": str(r.default), "default_ms": default,
                "best": str(r.best.config), "best_ms": best, "eager_ms": eager, "compile_ms": compiled,
                "n_configs": len(r.trials), "n_ok": sum(t.ok for t in r.trials), "bytes": nbytes}
        payload["cases"].append(case)
        rows.append(f"| {kernel} | {M} | {N} | {len(r.trials)} | {default * 1e3:.2f} | {best * 1e3:.2f} "
                    f"({pct(best):.0%}) | {default / best:.2f}x | {eager * 1e3:.2f} | {compiled * 1e3:.2f} | "
                    f"{compiled / best:.2f}x | `{r.best.config}` |")
    env = payload["env"]
    md = "\n".join([
        "# rmsnorm / fused_add_rmsnorm, bf16: heuristic default vs searched best vs torch",
        f"{env['device']} ({env['arch']}), {env['date']}, torch {env['torch']}, triton {env['triton']}, "
        f"flytune_nb {env['flytune_nb']}; measured copy bandwidth {bw / 1e12:.2f} TB/s (read+write)", "",
        "| kernel | M | N | configs | default (us) | best (us, % of copy BW) | best vs default | torch eager (us) "
        "| torch.compile (us) | best vs compile | best config |",
        "|---|---|---|---|---|---|---|---|---|---|---|", *rows, "",
        "All p50 of flytune's GpuTimer (L2 flushed between reps). In-place residual restored before every rep."])
    write("kernels_vs_torch", payload, md, out=args.out)


if __name__ == "__main__":
    main()
