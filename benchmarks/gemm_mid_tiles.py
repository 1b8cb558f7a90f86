"""At mid M (128-1024), do K splits or two-box tiles on the TMA path fill the SMs that whole tiles leave idle?

M=256, N=11008 makes 172 tiles of 128x128 (1.3 rounds on 132 SMs) or 86 of 128x256 (65% of one); 43 is prime, so
no power-of-two tile divides the work evenly. Two ways round it:
- SPLIT_K on the non-persistent TMA path (TMA=1) gives each of S programs 1/S of a tile's K steps, reduced in one
  launch by the last to arrive (deterministic): 86 tiles split 3 are 258 programs, 98% of two rounds;
- a tile width of two powers of two (192 = 128 + 64; Triton's blocks are powers of two, so w's rows come in two TMA
  boxes feeding two accumulators from one load of a; a kernel in this file, not a path of matmul's): 116 tiles of
  128x192, 88% of one round.

Per shape, in one run: cuBLAS (torch.matmul), the heuristic default, every tile of TILES on TMA=1 with every split
of SPLITS that keeps two K steps a program and at most six rounds of programs, and every tile of TWO_BOX on TMA=1 and
TMA=2 (persistent), under graph replay (Triton's do_bench_cudagraph); then cuBLAS, the default and the three fastest
of the rest under serving_vs_torch's L2-flushed timer. Every output is checked against an fp32 matmul. bf16, ~2 min
on an H200.
"""
from __future__ import annotations

import time

from benchmarks.common import environment, env_line, gemm_operands, need_gpu, parser, shape_list, write

NK = [(4096, 4096), (14336, 4096), (11008, 4096), (4096, 11008), (6144, 4096), (28672, 4096)]
SHAPES = [(M, N, K) for M in (128, 256, 512, 1024) for N, K in NK]
# (BM, BN, BK, warps, stages)
TILES = [(128, 256, 64, 8, 3), (128, 128, 64, 4, 4), (128, 128, 64, 8, 4), (64, 128, 128, 4, 4),
         (128, 64, 128, 4, 4), (64, 256, 64, 4, 4)]
SPLITS = (1, 2, 3, 4, 5, 6, 8)
TWO_BOX = [(128, 192, 64, 8, 3), (128, 192, 64, 8, 4), (64, 192, 64, 4, 4), (64, 192, 128, 4, 3),
           (128, 96, 128, 4, 4), (64, 96, 128, 4, 4)]
MAX_ROUNDS = 6


def _config(tile, split, tma=1):
    from flytune_nb.kit import Config

    bm, bn, bk, warps, stages = tile
    return Config({"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": 8, "TMA": tma,
                   **({"SPLIT_K": split} if split > 1 else {})}, num_warps=warps, num_stages=stages)


def candidates(M, N, K, sms):
    """Every config this benchmark times at one shape besides the default: the TMA=1 tiles and splits, the two-box
    tiles on both TMA paths."""
    out = [_config(tile, 1, tma) for tile in TWO_BOX for tma in (1, 2)]
    for tile in TILES:
        bm, bn, bk = tile[:3]
        tiles = -(-M // bm) * -(-N // bn)
        for s in SPLITS:
            if (K // bk) // s >= 2 and tiles * s <= MAX_ROUNDS * sms:
                out.append(_config(tile, s))
    return out


def _two_box_kernel():
    """The persistent / one-tile-a-program TMA loop of flytune_nb.kernels.matmul.kernel with the tile's w rows in two
    TMA boxes (not a path of the kernel: it lost at every shape here)."""
    import triton
    import triton.language as tl

    from flytune_nb.kernels.matmul.kernel import _tile_of

    @triton.jit
    def matmul_tma_two_part_kernel(a_desc, w_desc, w2_desc, c_desc, c2_desc, M, N, K, programs,
                                   BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, HEAD_N: tl.constexpr,
                                   BLOCK_SIZE_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr, PERSISTENT: tl.constexpr,
                                   UPCAST: tl.constexpr):
        """matmul_tma_kernel for a tile width that is the sum of two powers of two (192 = 128 + 64, 96 = 64 + 32):
        Triton's blocks are powers of two, so the tile's w rows are two TMA boxes (HEAD_N and BLOCK_SIZE_N - HEAD_N
        rows) feeding two accumulators from one load of a. Such widths divide N where no power of two balances the
        rounds: N=11008 is 43 x 256, so at M=256 128x256 tiles are 86 for 132 SMs (65%) and 128x128 ones 172 (1.3
        rounds); 128x192 tiles are 116 (88%)."""
        TAIL_N: tl.constexpr = BLOCK_SIZE_N - HEAD_N
        num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
        num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
        k_tiles = tl.cdiv(K, BLOCK_SIZE_K)
        if PERSISTENT:
            start, stop, step = tl.program_id(0), num_pid_m * num_pid_n, programs
        else:
            start, stop, step = tl.program_id(0), tl.program_id(0) + 1, 1
        for tile in tl.range(start, stop, step, flatten=PERSISTENT):
            pid_m, pid_n = _tile_of(tile, num_pid_m, num_pid_n, GROUP_SIZE_M)
            off_m = pid_m * BLOCK_SIZE_M
            off_n = pid_n * BLOCK_SIZE_N
            acc = tl.zeros((BLOCK_SIZE_M, HEAD_N), dtype=tl.float32)
            acc2 = tl.zeros((BLOCK_SIZE_M, TAIL_N), dtype=tl.float32)
            for k in range(k_tiles):
                a = a_desc.load([off_m, k * BLOCK_SIZE_K])
                w = w_desc.load([off_n, k * BLOCK_SIZE_K])
                w2 = w2_desc.load([off_n + HEAD_N, k * BLOCK_SIZE_K])
                if UPCAST:
                    a = a.to(tl.float32)
                    w = w.to(tl.float32)
                    w2 = w2.to(tl.float32)
                acc = tl.dot(a, w.T, acc)
                acc2 = tl.dot(a, w2.T, acc2)
            c_desc.store([off_m, off_n], acc.to(c_desc.dtype))
            c2_desc.store([off_m, off_n + HEAD_N], acc2.to(c2_desc.dtype))

    return matmul_tma_two_part_kernel


def _two_box_call(kernel, cfg, a, w, out, sms):
    import triton
    from triton.tools.tensor_descriptor import TensorDescriptor

    M, K = a.shape
    N = w.shape[0]
    bm, bn, bk = cfg["BLOCK_SIZE_M"], cfg["BLOCK_SIZE_N"], cfg["BLOCK_SIZE_K"]
    head = 1 << (bn.bit_length() - 1)
    tail = bn - head
    tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
    programs = min(tiles, sms) if cfg["TMA"] == 2 else tiles
    descs = (TensorDescriptor.from_tensor(a, [bm, bk]), TensorDescriptor.from_tensor(w, [head, bk]),
             TensorDescriptor.from_tensor(w, [tail, bk]), TensorDescriptor.from_tensor(out, [bm, head]),
             TensorDescriptor.from_tensor(out, [bm, tail]))
    return lambda: kernel[(programs,)](*descs, M, N, K, programs, BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, HEAD_N=head,
                                       BLOCK_SIZE_K=bk, GROUP_SIZE_M=cfg["GROUP_SIZE_M"],
                                       PERSISTENT=cfg["TMA"] == 2, UPCAST=False, num_warps=cfg.num_warps,
                                       num_stages=cfg.num_stages)


def two_box(cfg) -> bool:
    bn = cfg["BLOCK_SIZE_N"]
    return bn & (bn - 1) != 0


def main(argv=None):
    ap = parser(__doc__, __file__)
    ap.add_argument("--shapes", type=shape_list, default=SHAPES, metavar="M,N,K;...",
                    help="the shapes (default: the 24 of M = 128-1024 on " +
                         ", ".join(f"{n}x{k}" for n, k in NK) + ")")
    ap.add_argument("--rep-ms", type=float, default=10.0, help="graph replay time per config (default: %(default)s)")
    args = ap.parse_args(argv)
    need_gpu("gemm_mid_tiles")
    import torch

    from benchmarks.serving_vs_torch import Timers
    from flytune_nb.core.device import current_device
    from flytune_nb.kernels.matmul import heuristic
    from flytune_nb.kernels.matmul.kernel import matmul

    dev = current_device()
    timers = Timers(dev, args.rep_ms)
    box_kernel = _two_box_kernel()
    rows, t0 = [], time.perf_counter()
    for M, N, K in args.shapes:
        a, w, out, ref = gemm_operands(M, N, K)
        cublas = lambda: torch.matmul(a, w.T, out=out)  # noqa: E731
        default = heuristic.default({"M": M, "N": N, "K": K}, "bf16", dev)
        row = {"M": M, "N": N, "K": K, "cublas_graph_us": timers.graph(cublas) * 1e3, "default": str(default),
               "timed": []}
        for cfg in [default] + candidates(M, N, K, dev.sm_count):
            entry = {"config": str(cfg), "is_default": cfg is default}
            fn = (_two_box_call(box_kernel, cfg, a, w, out, dev.sm_count) if two_box(cfg)
                  else lambda cfg=cfg: matmul(a, w, out, config=cfg))  # noqa: E731
            try:
                out.fill_(float("nan"))
                fn()
                fn()  # a second call: the split's counters must have been zeroed by the first
                torch.cuda.synchronize()
                entry["rel_error"] = float((out.float() - ref).norm() / ref.norm())
                entry["graph_us"] = timers.graph(fn) * 1e3
            except Exception as e:  # noqa: BLE001 - a config that does not compile is a data point
                entry["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
            row["timed"].append(entry)
        ok = sorted((e for e in row["timed"] if "graph_us" in e and e["rel_error"] < 1e-2 and not e["is_default"]),
                    key=lambda e: e["graph_us"])
        row["cublas_flushed_us"] = timers.flushed(cublas) * 1e3
        by_cfg = {str(c): c for c in [default] + candidates(M, N, K, dev.sm_count)}
        for e in [x for x in row["timed"] if x["is_default"] and "graph_us" in x] + ok[:3]:
            cfg = by_cfg[e["config"]]
            e["flushed_us"] = timers.flushed(_two_box_call(box_kernel, cfg, a, w, out, dev.sm_count) if two_box(cfg)
                                             else lambda cfg=cfg: matmul(a, w, out, config=cfg)) * 1e3
        rows.append(row)
        d = next(e for e in row["timed"] if e["is_default"])
        print(f"{M},{N},{K}: cuBLAS {row['cublas_graph_us']:.1f}/{row['cublas_flushed_us']:.1f} us, default "
              f"{d.get('graph_us', float('nan')):.1f}/{d.get('flushed_us', float('nan')):.1f}, best split " +
              (f"{ok[0]['graph_us']:.1f}/{ok[0].get('flushed_us', float('nan')):.1f} {ok[0]['config']}" if ok else "-"),
              flush=True)
    env = environment()
    write("gemm_mid_tiles", {"env": env, "rows": rows}, report(rows, env, time.perf_counter() - t0), out=args.out)


def report(rows: list, env: dict, seconds: float) -> str:
    lines = ["# K splits and two-box tiles on the TMA path at mid M",
             f"{env_line(env)}. bf16, medians, us; graph: Triton's do_bench_cudagraph; flushed: serving_vs_torch's "
             f"timer (256 MB zeroed before each rep, a GPU spin while the host enqueues); ratio = cuBLAS / ours. "
             f"best: the fastest under graph replay of TMA=1 tiles x splits and two-box tiles on TMA=1 and 2 "
             f"(benchmarks/gemm_mid_tiles.py). "
             f"{seconds:.0f} s.", "",
             "| M | N | K | cuBLAS graph / flushed | default graph / flushed | best graph / flushed | best config | "
             "best unsplit graph | best two-box graph |", "|---" * 9 + "|"]
    wrong = failed = 0
    for r in rows:
        d = next(e for e in r["timed"] if e["is_default"])
        ok = sorted((e for e in r["timed"] if "graph_us" in e and e["rel_error"] < 1e-2 and not e["is_default"]),
                    key=lambda e: e["graph_us"])
        wrong += sum(1 for e in r["timed"] if "graph_us" in e and e["rel_error"] >= 1e-2)
        failed += sum(1 for e in r["timed"] if "error" in e)
        unsplit = [e for e in ok if "SPLIT_K" not in e["config"]]
        two_box = [e for e in ok if "BLOCK_SIZE_N=192" in e["config"] or "BLOCK_SIZE_N=96," in e["config"]]

        def pair(e):
            g = f"{e['graph_us']:.1f} ({r['cublas_graph_us'] / e['graph_us']:.2f}x)" if "graph_us" in e else "-"
            f = f"{e['flushed_us']:.1f} ({r['cublas_flushed_us'] / e['flushed_us']:.2f}x)" if "flushed_us" in e else "-"
            return f"{g} / {f}"

        best = ok[0] if ok else {}
        lines.append(f"| {r['M']} | {r['N']} | {r['K']} | {r['cublas_graph_us']:.1f} / {r['cublas_flushed_us']:.1f} | "
                     f"{pair(d)} | {pair(best) if best else '-'} | `{best.get('config', '-')}` | "
                     f"{pair(unsplit[0]).split(' / ')[0] if unsplit else '-'} | "
                     f"{pair(two_box[0]).split(' / ')[0] + ' `' + two_box[0]['config'] + '`' if two_box else '-'} |")
    lines += ["", f"Outputs off by 1e-2 or more: {wrong}; configs that failed to compile or run: {failed} (the JSON "
              f"has each error and every config's time)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
