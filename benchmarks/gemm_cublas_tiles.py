"""Which tile does cuBLAS run at each GEMM shape, and how full is its last wave of tiles against ours?

At mid M (128-512) our GEMM loses most to cuBLAS where its tiles fill the GPU's SMs badly: M=256, N=6144 makes 96
tiles of 128x128 for 132 SMs. This records, per shape, the kernel torch.matmul launches (its name, read with
torch.profiler, carries cuBLAS's tile: ``nvjet_sm90_tst_96x128_64x7_2x1_v_bz_TNN`` is a 96x128 tile, K step 64, 7
stages, a 2x1 cluster), the tile count and last-wave fill of that tile and of the config flytune_nb.tuned() serves,
and both calls' times under graph replay and L2-flushed events, side by side.

cuBLAS is column-major: for ``a @ w.T`` it computes the transpose, so its tile's first extent runs along our N and
its second along our M. That reading is the one under which its tile counts fill the SMs (M=256, N=11008: 66 x 2 =
132 tiles of 168x128 for 132 SMs); the other reading would make 172. Fill = tiles / (waves x SMs), one program an SM
(a tile that fits twice per SM may do better than its fill says). The report splits each graph ratio into that fill's
share and the rest. bf16, about 30 s on an H100; ``--report JSON`` writes the markdown again from a stored result,
without a GPU.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

from benchmarks.common import (
    env_line, environment, gemm_operands, kernels_launched, need_gpu, parser, shape_list, write)
from flytune_nb.kit.spaces import wave_use

SHAPES = [(m, n, k) for n, k in ((4096, 4096), (14336, 4096), (11008, 4096), (6144, 4096), (4096, 11008))
          for m in (64, 128, 256, 512, 1024)]
# nvjet_sm90_tst_<first>x<second>_<bk>x<stages>_<cluster>_...; sm90_xmma_..._tilesize<first>x<second>x<bk>_...
_NVJET = re.compile(r"nvjet_\w+?_(\d+)x(\d+)_(\d+)x(\d+)_(\d+)x(\d+)_")
_XMMA = re.compile(r"tilesize(\d+)x(\d+)x(\d+)")


def cublas_tile(name: str) -> tuple[int, int] | None:
    """(extent along our N, extent along our M) of a cuBLAS kernel's name, or None when the name carries no tile."""
    m = _NVJET.search(name) or _XMMA.search(name)
    return (int(m.group(1)), int(m.group(2))) if m else None


def main(argv=None):
    ap = parser(__doc__, __file__)
    ap.add_argument("--shapes", type=shape_list, default=SHAPES, metavar="M,N,K;...",
                    help="the shapes (default: M = 64..1024 at the (N, K) serving_vs_torch times)")
    ap.add_argument("--rep-ms", type=float, default=25.0, help="timing budget per side and mode (default 25)")
    ap.add_argument("--report", type=Path, default=None, metavar="JSON",
                    help="write the markdown again from a stored result (no GPU), into its device's folder")
    args = ap.parse_args(argv)
    if args.report is not None:
        stored = json.loads(args.report.read_text())
        write("gemm_cublas_tiles", stored, report(stored["rows"], stored["sm_count"], stored["env"]), args.out,
              device=stored["env"]["device"])
        return
    need_gpu("gemm_cublas_tiles")
    import torch

    import flytune_nb
    from benchmarks.serving_vs_torch import Timers
    from flytune_nb.core.device import current_device

    dev = current_device()
    timers, op = Timers(dev, args.rep_ms), flytune_nb.tuned("matmul")
    rows = []
    for M, N, K in args.shapes:
        a, w, out, ref = gemm_operands(M, N, K)
        theirs = torch.empty_like(out)
        sides = {"ours": lambda: op(a=a, w=w, out=out), "cublas": lambda: torch.matmul(a, w.T, out=theirs)}
        names = kernels_launched(sides["cublas"])
        cfg = op.config_for({"a": a, "w": w, "out": out})
        sides["ours"]()
        err = ((out.float() - ref).abs().max() / ref.abs().max()).item()
        tile = next((t for t in map(cublas_tile, names) if t), None)
        their_tiles = math.ceil(N / tile[0]) * math.ceil(M / tile[1]) if tile else None
        bm, bn, split = cfg["BLOCK_SIZE_M"], cfg["BLOCK_SIZE_N"], cfg.get("SPLIT_K", 1)
        our_tiles = math.ceil(M / bm) * math.ceil(N / bn) * split
        graph, flushed = timers.graph_each(sides), timers.flushed_each(sides)
        row = {"shape": {"M": M, "N": N, "K": K}, "cublas_kernels": names, "cublas_tile_nm": tile,
               "cublas_tiles": their_tiles,
               "cublas_fill": their_tiles and round(wave_use(their_tiles, dev.sm_count), 3),
               "ours_config": str(cfg), "ours_source": op.last_source, "ours_tile_nm": (bn, bm), "ours_split_k": split,
               "ours_tiles": our_tiles, "ours_fill": round(wave_use(our_tiles, dev.sm_count), 3), "ours_rel_err": err,
               "graph_us": {k: v * 1e3 for k, v in graph.items()},
               "flushed_us": {k: v * 1e3 for k, v in flushed.items()}}
        rows.append(row)
        print(f"M={M} N={N} K={K}: cuBLAS {tile} {their_tiles} tiles; ours {(bn, bm)} x{split} {our_tiles} tiles; "
              f"graph {graph['cublas'] / graph['ours']:.2f}x", flush=True)
    env = environment()
    write("gemm_cublas_tiles", {"env": env, "sm_count": dev.sm_count, "rows": rows}, report(rows, dev.sm_count, env),
          args.out)


def report(rows: list[dict], sms: int, env: dict) -> str:
    """The markdown: one line per shape, both tiles, their tile counts and fills, both timing modes' ratios, and the
    graph ratio cut in two factors: our fill over cuBLAS's (what the wave quantisation costs) and the rest (the
    ratio over that: how fast an SM runs while it has a tile, padding and epilogue included). With time = work /
    (SMs x fill x per-SM rate) the ratio is exactly their product."""
    lines = [f"# Which tile cuBLAS runs, and the last wave's fill ({sms} SMs)", "", env_line(env), "",
             "Tiles written N x M (cuBLAS's first extent runs along our N). Ratio = cuBLAS time / ours (> 1: ours "
             "faster), bf16. The graph ratio = fill factor (our fill / cuBLAS's) x the rest (per-SM speed while "
             "busy): a split that holds where each SM runs one compute-bound tile at a time (M >= 256 here); at small "
             "M several memory-bound tiles share an SM and the fill says little.", "",
             "| M | N | K | cuBLAS tile | tiles | fill | ours tile | tiles | fill | cuBLAS graph | ours graph | "
             "ratio graph | fill factor | the rest | ratio flushed |", "|---" * 15 + "|"]
    for r in rows:
        s, g, f = r["shape"], r["graph_us"], r["flushed_us"]
        their = f"{r['cublas_tile_nm'][0]}x{r['cublas_tile_nm'][1]}" if r["cublas_tile_nm"] else "?"
        ours = f"{r['ours_tile_nm'][0]}x{r['ours_tile_nm'][1]}" + (f" split {r['ours_split_k']}"
                                                                 if r["ours_split_k"] > 1 else "")
        factor = r["ours_fill"] / r["cublas_fill"] if r["cublas_fill"] else None
        lines.append(f"| {s['M']} | {s['N']} | {s['K']} | {their} | {r['cublas_tiles'] or '?'} | "
                     f"{r['cublas_fill'] or '?'} | {ours} | {r['ours_tiles']} | {r['ours_fill']} | "
                     f"{g['cublas']:.1f} us | {g['ours']:.1f} us | {g['cublas'] / g['ours']:.2f}x | "
                     + (f"{factor:.2f} | {g['cublas'] / g['ours'] / factor:.2f} | " if factor else "? | ? | ")
                     + f"{f['cublas'] / f['ours']:.2f}x |")
    lines += ["", "cuBLAS kernels: " + "; ".join(sorted({n for r in rows for n in r["cublas_kernels"]}))]
    return "\n".join(lines)
