"""At mid M (128-1024), does anything beat the plain persistent TMA GEMM: stream-K, or Triton's warp specialization?

Per shape and tile (64-128 rows, 64-256 columns), four variants of matmul's persistent TMA kernel against cuBLAS
(torch.matmul), in one run, under graph replay (Triton's do_bench_cudagraph):

- ``persistent``: TMA=2, one program per SM walking whole tiles;
- ``stream_k_all``: STREAM_K=1 with every tile's K steps shared out over the programs (the kernel's whole-round
  prefix switched off for the comparison);
- ``stream_k_rounds``: STREAM_K=1 as shipped: whole rounds of tiles first, only the last round cut into K ranges;
- ``warp_specialized``: the persistent loop compiled with ``tl.range(..., warp_specialize=True)``, Triton 3.6's
  automatic warp specialization (a copy of the loop in this file: it is not a knob of the kernel).

Then the L2-flushed gap: at two shapes, cuBLAS and matmul's three load paths under graph replay, under
serving_vs_torch's flushed timer (do_bench's 256 MB flush, a GPU spin that keeps host time out) and under plain
``do_bench``, with each call's host enqueue time. Every output is checked against an fp32 matmul. bf16, ~80 s on
an H200.
"""
from __future__ import annotations

import contextlib
import statistics
import time

from benchmarks.common import add_shapes, env_line, environment, gemm_operands, need_gpu, parser, write

SHAPES = [(128, 11008, 4096), (256, 11008, 4096), (256, 6144, 4096), (256, 4096, 11008), (256, 14336, 4096),
          (512, 11008, 4096), (512, 6144, 4096), (512, 14336, 4096), (1024, 11008, 4096), (128, 4096, 11008),
          (128, 6144, 4096), (128, 4096, 4096), (256, 4096, 4096), (512, 4096, 4096), (1024, 14336, 4096)]
# (BM, BN, BK, warps, stages)
TILES = [(64, 128, 128, 4, 4), (128, 128, 64, 4, 5), (128, 128, 64, 8, 4), (128, 256, 64, 8, 3),
         (64, 256, 64, 4, 4), (128, 64, 128, 4, 4)]
VARIANTS = ("persistent", "stream_k_all", "stream_k_rounds", "warp_specialized")
FLUSH_SHAPES = [((256, 14336, 4096), (128, 128, 64, 4, 5)), ((4096, 14336, 4096), (128, 256, 64, 8, 3))]


def _ws_kernel():
    """The persistent TMA loop of flytune_nb.kernels.matmul.kernel with warp specialization asked for."""
    import triton
    import triton.language as tl

    from flytune_nb.kernels.matmul.kernel import _tile_of

    @triton.jit
    def matmul_ws_kernel(a_desc, w_desc, c_desc, M, N, K, programs, BLOCK_SIZE_M: tl.constexpr,
                         BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr):
        num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
        num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
        k_tiles = tl.cdiv(K, BLOCK_SIZE_K)
        for tile in tl.range(tl.program_id(0), num_pid_m * num_pid_n, programs, flatten=True, warp_specialize=True):
            pid_m, pid_n = _tile_of(tile, num_pid_m, num_pid_n, GROUP_SIZE_M)
            acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
            for k in range(k_tiles):
                a = a_desc.load([pid_m * BLOCK_SIZE_M, k * BLOCK_SIZE_K])
                w = w_desc.load([pid_n * BLOCK_SIZE_N, k * BLOCK_SIZE_K])
                acc = tl.dot(a, w.T, acc)
            c_desc.store([pid_m * BLOCK_SIZE_M, pid_n * BLOCK_SIZE_N], acc.to(c_desc.dtype))

    return matmul_ws_kernel


@contextlib.contextmanager
def _all_tiles_cut():
    from flytune_nb.kernels.matmul import kernel as mk

    keep = mk.stream_k_after
    mk.stream_k_after = lambda tiles, k_steps, programs: 0
    try:
        yield
    finally:
        mk.stream_k_after = keep


def _callable(variant, a, w, out, tile, sms, ws_kernel):
    import triton
    from triton.tools.tensor_descriptor import TensorDescriptor

    from flytune_nb.kernels.matmul.kernel import matmul
    from flytune_nb.kit import Config

    bm, bn, bk, warps, stages = tile
    knobs = {"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": 8, "TMA": 2}
    if variant == "warp_specialized":
        M, K = a.shape
        N = w.shape[0]
        programs = min(triton.cdiv(M, bm) * triton.cdiv(N, bn), sms)
        descs = (TensorDescriptor.from_tensor(a, [bm, bk]), TensorDescriptor.from_tensor(w, [bn, bk]),
                 TensorDescriptor.from_tensor(out, [bm, bn]))
        return lambda: ws_kernel[(programs,)](*descs, M, N, K, programs, BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn,
                                              BLOCK_SIZE_K=bk, GROUP_SIZE_M=8, num_warps=warps, num_stages=stages)
    if variant != "persistent":
        knobs["STREAM_K"] = 1
    cfg = Config(knobs, num_warps=warps, num_stages=stages)
    return lambda: matmul(a, w, out, config=cfg)


def _short(tile) -> str:
    bm, bn, bk, warps, stages = tile
    return f"{bm}x{bn}x{bk} w{warps} s{stages}"


def main(argv=None):
    ap = parser(__doc__, __file__)
    add_shapes(ap, SHAPES)
    ap.add_argument("--name", default="gemm_persistent_variants", help="result file name (default: %(default)s)")
    args = ap.parse_args(argv)
    need_gpu("gemm_persistent_variants")
    import torch
    import triton.testing as tt

    from benchmarks.serving_vs_torch import Timers
    from flytune_nb.core.device import current_device

    dev = current_device()
    timers = Timers(dev, 25.0)
    ws_kernel = _ws_kernel()
    rows, flushed, t0 = [], [], time.perf_counter()
    for M, N, K in args.shapes:
        a, w, out, ref = gemm_operands(M, N, K)
        row = {"M": M, "N": N, "K": K, "cublas_us": timers.graph(lambda: torch.matmul(a, w.T, out=out)) * 1e3,
               "timed": []}
        for tile in TILES:
            for variant in VARIANTS:
                fn = _callable(variant, a, w, out, tile, dev.sm_count, ws_kernel)
                entry = {"tile": _short(tile), "variant": variant}
                try:
                    with _all_tiles_cut() if variant == "stream_k_all" else contextlib.nullcontext():
                        out.fill_(float("nan"))
                        fn()
                        torch.cuda.synchronize()
                        entry["rel_error"] = float((out.float() - ref).norm() / ref.norm())
                        entry["us"] = timers.graph(fn) * 1e3
                except Exception as e:  # noqa: BLE001 - a variant that does not compile is a data point
                    entry["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
                row["timed"].append(entry)
        rows.append(row)
        best = {v: min((e["us"] for e in row["timed"] if e["variant"] == v and "us" in e), default=None)
                for v in VARIANTS}
        print(f"{M},{N},{K}: cuBLAS {row['cublas_us']:.1f} us, best " +
              ", ".join(f"{v} {b:.1f}" for v, b in best.items() if b), flush=True)
    for (M, N, K), (bm, bn, bk, warps, stages) in FLUSH_SHAPES:
        from flytune_nb.kernels.matmul.kernel import matmul
        from flytune_nb.kit import Config

        a, w, out, _ = gemm_operands(M, N, K, seed=None)
        fns = [("cuBLAS", lambda: torch.matmul(a, w.T, out=out))]
        for tma in (2, 1, 0):
            knobs = {"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": 8,
                     **({"TMA": tma} if tma else {})}
            cfg = Config(knobs, num_warps=warps, num_stages=stages)
            fns.append((f"TMA={tma} {bm}x{bn}x{bk} w{warps} s{stages}", lambda cfg=cfg: matmul(a, w, out, config=cfg)))
        for who, fn in fns:
            fn()
            torch.cuda.synchronize()
            host = []
            for _ in range(5):
                t = time.perf_counter()
                for _ in range(20):
                    fn()
                host.append((time.perf_counter() - t) / 20 * 1e6)
                torch.cuda.synchronize()
            flushed.append({"M": M, "N": N, "K": K, "who": who, "graph_us": timers.graph(fn) * 1e3,
                            "flushed_us": timers.flushed(fn) * 1e3,
                            "do_bench_us": tt.do_bench(fn, rep=50, return_mode="median") * 1e3,
                            "host_enqueue_us": min(host)})
            print(flushed[-1], flush=True)
    env = environment()
    md = report(rows, flushed, env, time.perf_counter() - t0)
    write(args.name, {"env": env, "rows": rows, "flushed": flushed}, md, out=args.out)


def report(rows: list, flushed: list, env: dict, seconds: float) -> str:
    lines = ["# Persistent TMA GEMM variants at mid M: stream-K, warp specialization (graph replay)",
             f"{env_line(env)}. bf16, median of Triton's do_bench_cudagraph, us; ratio = cuBLAS / variant. "
             f"{seconds:.0f} s.", "",
             "| M | N | K | cuBLAS | " + " | ".join(f"{v} (best tile)" for v in VARIANTS) +
             " | all cut / rounds | ws / persistent, same tile |", "|---" * (6 + len(VARIANTS)) + "|"]
    gains, ws_ratios, rounds_wins = [], [], 0
    for r in rows:
        ok = [e for e in r["timed"] if "us" in e and e["rel_error"] < 1e-2]
        best = {v: min((e for e in ok if e["variant"] == v), key=lambda e: e["us"], default=None) for v in VARIANTS}
        cells = [f"{r['cublas_us'] / b['us']:.3f}x `{b['tile']}`" if b else "-" for b in best.values()]
        gain = best["stream_k_all"]["us"] / best["stream_k_rounds"]["us"]
        gains.append(gain)
        rounds_wins += best["stream_k_rounds"]["us"] < best["persistent"]["us"]
        by = {(e["variant"], e["tile"]): e["us"] for e in ok}
        ws = [by[("warp_specialized", t)] / by[("persistent", t)] for (v, t) in by if v == "persistent"
              and ("warp_specialized", t) in by]
        ws_ratios += ws
        lines.append(f"| {r['M']} | {r['N']} | {r['K']} | {r['cublas_us']:.1f} | " + " | ".join(cells) +
                     f" | {gain:.2f} | {min(ws):.2f}-{max(ws):.2f} |")
    wrong = sum(1 for r in rows for e in r["timed"] if "us" in e and e["rel_error"] >= 1e-2)
    failed = sum(1 for r in rows for e in r["timed"] if "error" in e)
    lines += ["", f"Stream-K, time cutting every tile / time walking whole rounds first (best tile of each): "
              f"{min(gains):.2f}-{max(gains):.2f}; whole rounds first beats the persistent kernel's best at "
              f"{rounds_wins} of {len(rows)} shapes. Warp-specialized / persistent on the same tile: {min(ws_ratios):.2f}-"
              f"{max(ws_ratios):.2f} (median {statistics.median(ws_ratios):.3f}). Outputs off by 1e-2 or more: "
              f"{wrong}; variants that failed to compile or run: {failed} (the JSON has each error).", "",
              "## After an L2 flush", "",
              "graph: do_bench_cudagraph; flushed: serving_vs_torch's timer (256 MB written before each rep, a GPU "
              "spin while the host enqueues); do_bench: Triton's, plain. host: the host's enqueue time of one call.",
              "", "| M | N | K | who | graph | flushed | do_bench | flushed - graph | host |", "|---" * 9 + "|"]
    for f in flushed:
        lines.append(f"| {f['M']} | {f['N']} | {f['K']} | {f['who']} | {f['graph_us']:.1f} | {f['flushed_us']:.1f} | "
                     f"{f['do_bench_us']:.1f} | {f['flushed_us'] - f['graph_us']:+.1f} | {f['host_enqueue_us']:.0f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
