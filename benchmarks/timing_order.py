"""Does timing one side after the other, instead of side by side, move a GEMM's ratio against cuBLAS?

A ratio of two timings is only as good as the state the GPU was in for each. Timed one after another, each side runs
after whatever came before it: cuBLAS's graph timing (do_bench_cudagraph) is ~200 ms of back-to-back large GEMMs, and
the side timed next starts from the clock that burst left. Per shape, on the heuristic default, in one run:
- ``ours first``: each side timed whole, one after another (ours graph, cuBLAS graph, ours flushed, cuBLAS
  flushed);
- ``cuBLAS first``: the same with the two swapped;
- ``side by side`` (twice): serving_vs_torch's Timers.graph_each / flushed_each, the sides' reps interleaved.
All four use the same two methods (Timers: graph replay, and events behind an L2 flush); only the order differs.
cuBLAS (torch.matmul) writes a preallocated output, as ours does.
If the order does not matter, the two sequential ratios agree with each other and with side by side, within the
spread of the two side-by-side runs. bf16, ~1 min on an H200.

Usage: python -m benchmarks timing_order [--shapes "M,N,K;..."] [--rep-ms 20] [--out DIR]
"""
from __future__ import annotations

import time

from benchmarks.common import env_line, environment, gemm_case, need_gpu, parser, shape_list, write

SHAPES = [(128, 4096, 4096), (256, 11008, 4096), (512, 4096, 4096), (512, 6144, 4096), (1024, 11008, 4096),
          (4096, 6144, 4096), (4096, 14336, 4096)]
PROTOCOLS = ("ours first", "cuBLAS first", "side by side", "side by side again")


def measure(timers, ours, theirs) -> dict:
    """{protocol: {"graph": (ours ms, cuBLAS ms), "flushed": (...)}} for one shape."""
    out = {}
    for protocol in PROTOCOLS:
        if protocol.startswith("side"):
            g = timers.graph_each({"ours": ours, "cublas": theirs})
            f = timers.flushed_each({"ours": ours, "cublas": theirs})
            out[protocol] = {"graph": (g["ours"], g["cublas"]), "flushed": (f["ours"], f["cublas"])}
            continue
        first, second = (ours, theirs) if protocol == "ours first" else (theirs, ours)
        g1, g2 = timers.graph(first), timers.graph(second)
        f1, f2 = timers.flushed(first), timers.flushed(second)
        flip = protocol != "ours first"
        out[protocol] = {"graph": (g2, g1) if flip else (g1, g2), "flushed": (f2, f1) if flip else (f1, f2)}
    return out


def main(argv=None) -> int:
    ap = parser(__doc__, __file__)
    ap.add_argument("--shapes", type=shape_list, default=SHAPES, metavar="M,N,K;...",
                    help="GEMM shapes (default: %(default)s)")
    ap.add_argument("--rep-ms", type=float, default=20.0, help="timing budget per measurement (ms)")
    args = ap.parse_args(argv)
    need_gpu("timing_order")
    from benchmarks.serving_vs_torch import Timers
    from flytune_nb.core.device import current_device
    from flytune_nb.kernels.matmul.kernel import matmul

    dev = current_device()
    timers = Timers(dev, args.rep_ms)
    rows, t0 = [], time.perf_counter()
    for M, N, K in args.shapes:
        a, w, out, ref, cfg, theirs = gemm_case(M, N, K, dev)
        ours = lambda: matmul(a, w, out, config=cfg)  # noqa: E731
        row = {"M": M, "N": N, "K": K, "config": str(cfg)}
        rows.append(row)
        try:
            out.fill_(float("nan"))
            ours()
            row["rel_error"] = float((out.float() - ref).norm() / ref.norm())
            row.update(measure(timers, ours, theirs))
        except Exception as e:  # noqa: BLE001 - a shape that does not compile or time is a row that says so
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
            print(f"{M},{N},{K}: failed: {row['error']}", flush=True)
            continue
        print(f"{M},{N},{K}: " + "; ".join(
            f"{p}: graph {row[p]['graph'][1] / row[p]['graph'][0]:.3f}x flushed "
            f"{row[p]['flushed'][1] / row[p]['flushed'][0]:.3f}x" for p in PROTOCOLS), flush=True)
    env = environment()
    write("timing_order", {"env": env, "protocols": PROTOCOLS, "rows": rows},
          report(rows, env, time.perf_counter() - t0), out=args.out)
    return 0


def report(rows: list, env: dict, seconds: float) -> str:
    lines = ["# Timing one side after the other against side by side",
             f"{env_line(env)}. bf16, the heuristic default against cuBLAS (torch.matmul); ratio = cuBLAS / ours "
             f"(above 1: ours faster). graph: do_bench_cudagraph's method; flushed: do_bench's, 256 MB zeroed before "
             f"each rep, behind a GPU spin (benchmarks/serving_vs_torch.py Timers). {seconds:.0f} s.", "",
             "| M | N | K | mode | " + " | ".join(PROTOCOLS) + " | ours first - cuBLAS first |",
             "|---" * (5 + len(PROTOCOLS)) + "|"]
    wrong = 0
    for r in rows:
        wrong += not r.get("rel_error", 0.0) < 1e-2  # NaN (an unwritten element) counts
        if "error" in r:
            lines.append(f"| {r['M']} | {r['N']} | {r['K']} | - | failed: {r['error']} |" + " |" * len(PROTOCOLS))
            continue
        for mode in ("graph", "flushed"):
            ratios = [r[p][mode][1] / r[p][mode][0] for p in PROTOCOLS]
            cells = [f"{x:.3f}x ({r[p][mode][0] * 1e3:.1f} / {r[p][mode][1] * 1e3:.1f})" for x, p in
                     zip(ratios, PROTOCOLS)]
            lines.append(f"| {r['M']} | {r['N']} | {r['K']} | {mode} | " + " | ".join(cells) +
                         f" | {ratios[0] - ratios[1]:+.3f} |")
    lines += ["", "Cells: ratio (ours us / cuBLAS us). Outputs of ours off by 1e-2 or more: " f"{wrong}."]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
