"""After an L2 flush our GEMMs lose more time than cuBLAS: is it the flushed data, the dirty lines the flush leaves, or the kernel's own code?

serving_vs_torch's flushed timer zeroes a 256 MB buffer before each rep (triton.testing.do_bench's flush), then
spins the GPU while the host enqueues the call. Under it matmul's persistent TMA kernel has read 7-25 us slower
than under graph replay where cuBLAS reads 0-5 us slower, at shapes whose weights never fit in L2 either way. This
times, per shape, cuBLAS (torch.matmul), the heuristic default and the same tile on the pointer path, each starting
from a different state, in one run:

- ``graph``: Triton's do_bench_cudagraph, back to back (no flush);
- ``spin``: the flushed timer with nothing before the spin (no flush: what the spin and events alone cost);
- ``dirty``: the flushed timer as serving_vs_torch runs it (256 MB zeroed: L2 left full of dirty lines);
- ``clean``: 256 MB read instead of written (L2 as cold for the call's data, but its lines clean: no write-back);
- ``dirty + warm code``: zeroed, then the same callable once on a 16 x 128 problem before the spin (the same
  binary: its code, descriptors and constants back in the caches, 0.4 MB of other data).

If ``dirty`` - ``clean`` carries the gap, the write-back of the flush's lines costs our kernel more than cuBLAS's;
if ``dirty + warm code`` closes it, the code fetch does. bf16, ~1 min on an H200.
"""
from __future__ import annotations

import time

from benchmarks.common import add_shapes, env_line, environment, gemm_operands, need_gpu, parser, write

SHAPES = [(256, 14336, 4096), (256, 11008, 4096), (128, 4096, 4096), (1024, 4096, 11008), (4096, 4096, 4096)]
MODES = ("graph", "spin", "dirty", "clean", "dirty + warm code")


def _read_all(buf) -> None:
    buf.sum()  # every byte read, none written: the flush leaves clean lines


def main(argv=None):
    ap = parser(__doc__, __file__)
    add_shapes(ap, SHAPES)
    args = ap.parse_args(argv)
    need_gpu("gemm_flush_gap")
    import torch

    from benchmarks.serving_vs_torch import Timers
    from flytune_nb.core.device import current_device
    from flytune_nb.core.registry import get_kernel
    from flytune_nb.kernels.matmul.kernel import matmul
    from flytune_nb.kit import Config

    dev = current_device()
    spec = get_kernel("matmul")
    timers = Timers(dev, 25.0)
    rows, t0 = [], time.perf_counter()
    for M, N, K in args.shapes:
        a, w, out, ref = gemm_operands(M, N, K)
        # a 16 x 128 problem with the same K and alignment: the same binary of each of our configs
        ta, tw = a[:16].clone(), w[:128].clone()
        tout = torch.empty(16, 128, device="cuda", dtype=torch.bfloat16)
        default = spec.default({"M": M, "N": N, "K": K}, "bf16", dev)
        pointer = Config({k: v for k, v in default.to_dict().items() if k not in ("TMA", "STREAM_K", "num_warps",
                                                                                  "num_stages")},
                         num_warps=default.num_warps, num_stages=default.num_stages)
        callers = [("cuBLAS", lambda: torch.matmul(a, w.T, out=out), lambda: torch.matmul(ta, tw.T, out=tout)),
                   (f"default {default}", lambda: matmul(a, w, out, config=default),
                    lambda: matmul(ta, tw, tout, config=default)),
                   (f"pointer {pointer}", lambda: matmul(a, w, out, config=pointer),
                    lambda: matmul(ta, tw, tout, config=pointer))]
        for who, fn, tiny in callers:
            out.fill_(float("nan"))
            fn()
            tiny()
            torch.cuda.synchronize()
            row = {"M": M, "N": N, "K": K, "who": who,
                   "rel_error": float((out.float() - ref).norm() / ref.norm())}
            row["graph"] = timers.graph(fn) * 1e3
            row["spin"] = timers.flushed(fn, between=lambda buf: None) * 1e3
            row["dirty"] = timers.flushed(fn) * 1e3
            row["clean"] = timers.flushed(fn, between=_read_all) * 1e3
            row["dirty + warm code"] = timers.flushed(fn, between=lambda buf, tiny=tiny: (buf.zero_(), tiny())) * 1e3
            rows.append(row)
            print(f"{M},{N},{K} {who}: " + ", ".join(f"{m} {row[m]:.1f}" for m in MODES), flush=True)
    env = environment()
    write("gemm_flush_gap", {"env": env, "rows": rows}, report(rows, env, time.perf_counter() - t0), out=args.out)


def report(rows: list, env: dict, seconds: float) -> str:
    lines = ["# What an L2 flush costs our GEMMs and cuBLAS",
             f"{env_line(env)}. bf16, medians, us. graph: do_bench_cudagraph; the others serving_vs_torch's flushed "
             f"timer (events around the call, a GPU spin while the host enqueues) with a different start: spin: "
             f"none; dirty: 256 MB zeroed (serving_vs_torch's flushed column); clean: 256 MB read; dirty + warm "
             f"code: zeroed, then the same callable on a 16 x 128 problem. {seconds:.0f} s.", "",
             "| M | N | K | who | " + " | ".join(MODES) + " | dirty - graph | dirty - clean | dirty - warm code | "
             "error |", "|---" * (5 + len(MODES) + 3) + "|"]
    for r in rows:
        lines.append(f"| {r['M']} | {r['N']} | {r['K']} | {r['who']} | " +
                     " | ".join(f"{r[m]:.1f}" for m in MODES) +
                     f" | {r['dirty'] - r['graph']:+.1f} | {r['dirty'] - r['clean']:+.1f} | "
                     f"{r['dirty'] - r['dirty + warm code']:+.1f} | {r['rel_error']:.1e} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
