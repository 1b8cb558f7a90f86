"""At mid and large M, does storing the output tile from registers (DIRECT_STORE) let two tiles share an SM, or a wide tile pipeline deeper, and close the gap to cuBLAS?

matmul's TMA path stores each output tile with a TMA store, which stages it in shared memory beside the pipeline's
buffers: 32 KiB for a 128x128 bf16 tile, 64 KiB for 128x256. Without that staging (DIRECT_STORE=1: masked stores
from the accumulator's registers) two 128x128x64 3-stage programs fit one SM's 227 KiB, and 128x256x64 fits 4
stages instead of 3. The question is whether a second program on the SM (its loads and MMAs running while the other
waits or stores) or the deeper pipeline buys more than the register stores cost.

Per shape, side by side in one run (Timers.graph_each / flushed_each of serving_vs_torch), under graph replay and
L2-flushed events: cuBLAS (torch.matmul into its own buffer), the heuristic default, and CANDIDATES (TMA=1 is one
program per tile, placed by the hardware, two an SM where they fit; TMA=2 is the persistent kernel, one program an
SM, or two with CTAS_PER_SM=2). Every output is checked against an fp32 matmul. bf16, ~2 min on an H200.

Usage: python -m benchmarks gemm_direct_store [--shapes "M,N,K;..."] [--rep-ms 10] [--out DIR]
"""
from __future__ import annotations

import time

from benchmarks.common import env_line, environment, gemm_case, need_gpu, parser, shape_list, write

NK = [(4096, 4096), (14336, 4096), (11008, 4096), (4096, 11008), (6144, 4096), (28672, 4096)]
SHAPES = [(M, N, K) for M in (128, 256, 512, 1024, 4096) for N, K in NK]
# (name, BM, BN, BK, warps, stages, knobs). Shared memory and programs an SM as `flytune census matmul --target h200`
# reads them on sm_90 (Triton 3.6), after each:
CANDIDATES = [
    ("1x 128x128x64 s3 w4 ds", 128, 128, 64, 4, 3, {"TMA": 1, "DIRECT_STORE": 1}),  # 98,328 B, 2 an SM
    ("1x 128x128x64 s3 w8 ds", 128, 128, 64, 8, 3, {"TMA": 1, "DIRECT_STORE": 1}),  # 98,328 B, 2 an SM
    ("1x 64x128x64 s4 w4 ds", 64, 128, 64, 4, 4, {"TMA": 1, "DIRECT_STORE": 1}),  # 98,336 B, 2 an SM
    ("1x 64x256x64 s3 w4 ds", 64, 256, 64, 4, 3, {"TMA": 1, "DIRECT_STORE": 1}),  # 122,904 B, 1 an SM
    ("1x 128x128x64 s4 w4", 128, 128, 64, 4, 4, {"TMA": 1}),  # 163,872 B, 1 an SM: the staged store, for contrast
    ("2x 128x256x64 s4 w8 ds", 128, 256, 64, 8, 4, {"TMA": 2, "DIRECT_STORE": 1}),  # 229,408 B (3 stages staged)
    ("2x 128x128x64 s6 w4 ds", 128, 128, 64, 4, 6, {"TMA": 2, "DIRECT_STORE": 1}),  # 204,848 B (5 staged)
    ("2x 128x128x64 s3 w4 ds, 2 a SM", 128, 128, 64, 4, 3, {"TMA": 2, "DIRECT_STORE": 1, "CTAS_PER_SM": 2}),
    ("2x 64x128x64 s4 w4 ds, 2 a SM", 64, 128, 64, 4, 4, {"TMA": 2, "DIRECT_STORE": 1, "CTAS_PER_SM": 2}),
    # the last two: 106,520 B (183 registers) and 106,528 B, 2 an SM
]


def _config(bm, bn, bk, warps, stages, knobs):
    from flytune_nb.kit import Config

    return Config({"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": 8, **knobs},
                  num_warps=warps, num_stages=stages)


def main(argv=None) -> int:
    ap = parser(__doc__, __file__)
    ap.add_argument("--shapes", type=shape_list, default=SHAPES, metavar="M,N,K;...",
                    help="the shapes (default: the 30 of M = 128-4096 on " + ", ".join(f"{n}x{k}" for n, k in NK) +
                         ")")
    ap.add_argument("--rep-ms", type=float, default=10.0, help="timing budget per measurement (ms)")
    args = ap.parse_args(argv)
    need_gpu("gemm_direct_store")
    import torch

    from benchmarks.serving_vs_torch import Timers
    from flytune_nb.core.device import current_device
    from flytune_nb.kernels.matmul.kernel import matmul

    dev = current_device()
    timers = Timers(dev, args.rep_ms)
    rows, t0 = [], time.perf_counter()
    for M, N, K in args.shapes:
        a, w, out, ref, default, cublas = gemm_case(M, N, K, dev)
        configs = {"default": default, **{name: _config(*c) for name, *c in CANDIDATES}}
        row = {"M": M, "N": N, "K": K, "default": str(default), "errors": {}, "rel_error": {}}
        sides = {"cuBLAS": cublas}
        for name, cfg in configs.items():
            try:
                out.fill_(float("nan"))
                matmul(a, w, out, config=cfg)
                torch.cuda.synchronize()
                err = float((out.float() - ref).norm() / ref.norm())
                row["rel_error"][name] = err
                if err < 1e-2:  # NaN (an unwritten element) fails this too
                    sides[name] = lambda cfg=cfg: matmul(a, w, out, config=cfg)
            except Exception as e:  # noqa: BLE001 - a config that does not compile or launch is a data point
                row["errors"][name] = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
        try:
            row["graph_us"] = {k: v * 1e3 for k, v in timers.graph_each(sides).items()}
            row["flushed_us"] = {k: v * 1e3 for k, v in timers.flushed_each(sides).items()}
        except Exception as e:  # noqa: BLE001 - a shape whose timing breaks (a capture that fails) is a result
            row["timing_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
            print(f"{M},{N},{K}: timing failed: {row['timing_error']}", flush=True)
            rows.append(row)
            continue
        rows.append(row)
        g, f = row["graph_us"], row["flushed_us"]
        best = min((k for k in g if k != "cuBLAS"), key=g.get, default=None)
        print(f"{M},{N},{K}: cuBLAS {g['cuBLAS']:.1f}/{f['cuBLAS']:.1f} us, default {g.get('default', 0):.1f}/"
              f"{f.get('default', 0):.1f}, " + (f"best {best} {g[best]:.1f}/{f[best]:.1f}" if best else
                                                  "none of ours ran correctly"), flush=True)
    env = environment()
    write("gemm_direct_store", {"env": env, "candidates": [c[0] for c in CANDIDATES], "rows": rows},
          report(rows, env, time.perf_counter() - t0), out=args.out)
    return 0


def report(rows: list, env: dict, seconds: float) -> str:
    names = ["default"] + [c[0] for c in CANDIDATES]
    lines = ["# Output tiles stored from registers on the TMA path (DIRECT_STORE)",
             f"{env_line(env)}. bf16, medians, us, every side of a shape timed side by side; ratio = cuBLAS / ours "
             f"(above 1: ours faster). graph: do_bench_cudagraph's method; flushed: do_bench's, 256 MB zeroed "
             f"before each rep, behind a GPU spin. Names: 1x = TMA=1 (a program per tile), 2x = TMA=2 "
             f"(persistent), BMxBNxBK, stages, warps, ds = DIRECT_STORE=1. {seconds:.0f} s.", "",
             "| M | N | K | mode | cuBLAS | " + " | ".join(names) + " |", "|---" * (5 + len(names)) + "|"]
    wrong = failed = 0
    for r in rows:
        wrong += sum(1 for e in r["rel_error"].values() if not e < 1e-2)
        failed += len(r["errors"])
        if "timing_error" in r:
            lines.append(f"| {r['M']} | {r['N']} | {r['K']} | - | timing failed: {r['timing_error']} |" +
                         " |" * len(names))
            continue
        for mode in ("graph", "flushed"):
            t = r[f"{mode}_us"]
            best = min((k for k in t if k != "cuBLAS"), key=t.get, default=None)
            cells = []
            for n in names:
                if n not in t:
                    cells.append("failed" if n in r["errors"] else "wrong")
                    continue
                cell = f"{t[n]:.1f} ({t['cuBLAS'] / t[n]:.2f}x)"
                cells.append(f"**{cell}**" if n == best else cell)
            lines.append(f"| {r['M']} | {r['N']} | {r['K']} | {mode} | {t['cuBLAS']:.1f} | " + " | ".join(cells) +
                         " |")
    lines += ["", f"Bold: the fastest of ours per row. Outputs off by 1e-2 or more: {wrong}; configs that failed to "
              f"compile or launch: {failed} (the JSON has each error). The default per shape is in the JSON."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
