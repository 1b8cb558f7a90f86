"""How does fused_moe compare with every MoE implementation this machine has?

Compares, in one run with the same GpuTimer (L2 flushed per rep), on Mixtral-8x7B's shape (E=8 N=14336 K=4096
top-2, bf16): our kernel with the committed export's config, the torch loop over experts, and torch's grouped GEMM
path (torch._grouped_mm, the fused implementation torch itself ships; benchmarks/moe_grouped.py). It also records
which fused MoE packages are installed (vLLM, SGLang, sgl-kernel, FlashInfer, aiter: none is timed here). Each
path's output is checked: against the fp64 reference up to M=64, against the bf16 torch loop above.
"""
from __future__ import annotations

import importlib.util

from benchmarks.common import environment, int_list, need_gpu, parser, write
from benchmarks.moe_grouped import fused_moe_grouped
from flytune_nb.measure.timer import GpuTimer
from flytune_nb.measure.correctness import compare
from flytune_nb.core.device import current_device
from flytune_nb.serve.lookup import lookup
from flytune_nb.core.registry import get_kernel

SHAPE = {"E": 8, "N": 14336, "K": 4096, "topk": 2}
PACKAGES = ("vllm", "sglang", "sgl_kernel", "flashinfer", "aiter")
MOE_M = (1, 64, 512, 4096)


def main(argv=None):
    ap = parser(__doc__, __file__)
    ap.add_argument("--m", type=int_list, default=MOE_M, metavar="M,...",
                    help="batch sizes (default: " + ",".join(map(str, MOE_M)) + ")")
    ap.add_argument("--name", default="moe_baselines", help="result file name (default: %(default)s)")
    opts = ap.parse_args(argv)  # not `args`: the loop below names (and deletes) each shape's kernel arguments
    need_gpu("moe_baselines")
    dev = current_device()
    spec = get_kernel("fused_moe")
    timer = GpuTimer(dev, warmup_ms=5, rep_ms=25)
    installed = [p for p in PACKAGES if importlib.util.find_spec(p) is not None]
    rows, data = [], []
    for M in opts.m:
        shape = {"M": M, **SHAPE}
        inputs = spec.make_inputs(shape, "bf16", dev)
        args = [inputs[k] for k in ("x", "w1", "w2", "topk_weights", "topk_ids")]
        # the fp64 loop costs ~3 TFLOP of fp64 at M=4096 (about a minute): above M=64 the bf16 loop is the yardstick
        ref = spec.reference(inputs) if M <= 64 else spec.baseline(inputs).double()
        cfg, source = lookup(spec, shape, "bf16", device=dev)
        paths = {"flytune (export)": lambda: spec.run(inputs, cfg), "torch loop": lambda: spec.baseline(inputs),
                 "torch._grouped_mm": lambda: fused_moe_grouped(*args)}
        row = {"M": M, "config": str(cfg), "config_source": source}
        for name, fn in paths.items():
            try:
                ok = compare(fn(), ref, spec.tol("bf16"), spec.element_tol("bf16")).ok
                row[name] = {"ms": timer.measure(fn).p50, "correct": ok}
            except Exception as e:  # noqa: BLE001 - a path this torch or GPU lacks is a data point
                row[name] = {"error": f"{type(e).__name__}: {str(e)[:160]}"}
        data.append(row)
        cells = [f"{row[n]['ms'] * 1e3:.1f}{'' if row[n]['correct'] else ' (WRONG)'}" if "ms" in row[n]
                 else row[n]["error"][:60] for n in paths]
        ours = row["flytune (export)"].get("ms")
        ratios = [f"{row[n]['ms'] / ours:.2f}x" if ours and "ms" in row[n] else "-" for n in list(paths)[1:]]
        rows.append(f"| {M} | " + " | ".join(cells + ratios) + " |")
        print(rows[-1], flush=True)
        del inputs, args, ref
    env = environment()
    md = "\n".join([
        f"# fused_moe vs the MoE implementations on this device, E={SHAPE['E']} N={SHAPE['N']} K={SHAPE['K']} "
        f"top-{SHAPE['topk']}, bf16", f"{env['device']}, {env['date']}, torch {env['torch']}, triton {env['triton']}. "
        "p50 us, L2 flushed per rep; every output checked against the fp64 reference (M <= 64) or the bf16 torch loop "
        "(larger M). Fused MoE packages installed: "
        f"{', '.join(installed) or 'none of ' + ', '.join(PACKAGES)}.", "",
        "| M | flytune (committed export) | torch loop | torch._grouped_mm | loop / ours | grouped / ours |",
        "|---|---|---|---|---|---|", *rows])
    write(opts.name, {"env": env, "installed": installed, "rows": data}, md, out=opts.out)


if __name__ == "__main__":
    main()
