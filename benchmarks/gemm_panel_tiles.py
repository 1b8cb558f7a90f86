"""Do GEMM tiles as wide as cuBLAS's (96, 192, 224 columns), built from power-of-two panels, close the mid-M gap?

cuBLAS fills the SMs' last wave with tile widths Triton cannot declare (``gemm_cublas_tiles``: 96x128, 168x128,
112x128 at M=256 for N=6144, 11008, 14336 on 132 SMs): a Triton tensor's extents are powers of two. This builds
such a tile from up to three panels (192 = 128 + 64, 176 = 128 + 32 + 16, 224 = 128 + 64 + 32): one fp32
accumulator and one tl.dot per panel, all sharing the tile's A block, its weight panels loaded through one TMA
descriptor each, the output stored from registers. Two schedules: one program per tile, and persistent (one program
per SM walking the tiles). A copy of the loop in this file, not a knob of matmul's kernel: it answers whether such a
knob would pay. ``gemm_mid_tiles`` timed two-panel tiles (192 = 128 + 64 and 96 = 64 + 32) on the H200; this adds
three-panel widths (176, 224) and picks each shape's tiles by the last wave's fill.

Per shape, every panel tile whose count fills the last wave to >= 90% (the largest first, four of them) and the plain
128x128 tile, on both schedules and three (K step, stages) pairs, timed under graph replay; then the fastest beside
cuBLAS and flytune_nb.tuned() (the committed export, else the heuristic default), side by side, in both timing modes.
Every output is checked against an fp32 matmul. bf16, about 2 minutes on an H100.
"""
from __future__ import annotations

import math

import triton
import triton.language as tl

from benchmarks.common import (
    add_budget, add_shapes, env_line, environment, gemm_operands, need_gpu, parser, within_budget, write)
from flytune_nb.kernels.matmul.kernel import _store_tile, _tile_of
from flytune_nb.kit.spaces import wave_use

SHAPES = [(256, 6144, 4096), (512, 6144, 4096), (256, 11008, 4096), (512, 11008, 4096), (256, 14336, 4096),
          (128, 6144, 4096), (1024, 11008, 4096), (1024, 14336, 4096), (128, 11008, 4096)]
# panel widths of a tile, widest first: every sum from 48 to 320 columns the tiles below need
PANELS = [(128,), (64, 32), (64, 32, 16), (128, 32), (128, 32, 16), (128, 64), (128, 64, 32), (64, 64),
          (128, 128, 64)]
# (BLOCK_SIZE_K, num_stages); 5 stages of a 128 x 176 tile's 64-deep buffers take 195 KiB of the 227
STEPS = ((64, 4), (64, 5), (128, 3))


@triton.jit
def panel_tiles_kernel(a_desc, w_desc0, w_desc1, w_desc2, C, stride_cm, M, N, K, programs,
                       BM: tl.constexpr, BN0: tl.constexpr, BN1: tl.constexpr, BN2: tl.constexpr, BK: tl.constexpr,
                       GROUP_M: tl.constexpr, PERSISTENT: tl.constexpr):
    """One (BM x (BN0 + BN1 + BN2)) tile a step, panels of width 0 left out at compile time. PERSISTENT: ``programs``
    programs walk the tiles in steps of ``programs``; else one program per tile."""
    TN: tl.constexpr = BN0 + BN1 + BN2
    num_pid_m = tl.cdiv(M, BM)
    num_pid_n = tl.cdiv(N, TN)
    if PERSISTENT:
        start, stop, step = tl.program_id(0), num_pid_m * num_pid_n, programs
    else:
        start, stop, step = tl.program_id(0), tl.program_id(0) + 1, 1
    for tile in tl.range(start, stop, step, flatten=PERSISTENT):
        pid_m, pid_n = _tile_of(tile, num_pid_m, num_pid_n, GROUP_M)  # matmul's grouped order
        off_m = pid_m * BM
        off_n = pid_n * TN
        acc0 = tl.zeros((BM, BN0), dtype=tl.float32)
        if BN1 > 0:
            acc1 = tl.zeros((BM, BN1), dtype=tl.float32)
        if BN2 > 0:
            acc2 = tl.zeros((BM, BN2), dtype=tl.float32)
        for k in range(tl.cdiv(K, BK)):
            a = a_desc.load([off_m, k * BK])
            acc0 = tl.dot(a, w_desc0.load([off_n, k * BK]).T, acc0)
            if BN1 > 0:
                acc1 = tl.dot(a, w_desc1.load([off_n + BN0, k * BK]).T, acc1)
            if BN2 > 0:
                acc2 = tl.dot(a, w_desc2.load([off_n + BN0 + BN1, k * BK]).T, acc2)
        _store_tile(C, stride_cm, 1, off_m, off_n, acc0, M, N, BM, BN0)
        if BN1 > 0:
            _store_tile(C, stride_cm, 1, off_m, off_n + BN0, acc1, M, N, BM, BN1)
        if BN2 > 0:
            _store_tile(C, stride_cm, 1, off_m, off_n + BN0 + BN1, acc2, M, N, BM, BN2)


def panel_matmul(a, w, out, bm: int, widths: tuple, bk: int, *, persistent: bool, sms: int, num_stages: int,
                 num_warps: int = 4, group_m: int = 8):
    """A launcher for ``a @ w.T`` into ``out`` with its descriptors built once: returns the zero-argument call."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    M, K = a.shape
    N = w.shape[0]
    bn = list(widths) + [0] * (3 - len(widths))
    # a width-0 panel's descriptor is never read; any valid block shape stands in
    descs = [TensorDescriptor.from_tensor(w, [max(b, 16), bk]) for b in bn]
    a_desc = TensorDescriptor.from_tensor(a, [bm, bk])
    tiles = math.ceil(M / bm) * math.ceil(N / sum(widths))
    programs = min(tiles, sms) if persistent else tiles

    def call():
        panel_tiles_kernel[(programs,)](a_desc, *descs, out, out.stride(0), M, N, K, programs, BM=bm, BN0=bn[0],
                                        BN1=bn[1], BN2=bn[2], BK=bk, GROUP_M=group_m, PERSISTENT=persistent,
                                        num_warps=num_warps, num_stages=num_stages)
        return out

    return call


def candidates(M: int, N: int, sms: int, keep: int = 4) -> list[tuple[int, tuple]]:
    """(BM, panel widths): the ``keep`` largest tiles whose last wave is >= 90% full, then 128 x 128."""
    tiles = [(bm, p) for bm in (128, 64) for p in PANELS if (bm, p) != (128, (128,))
             and wave_use(math.ceil(M / bm) * math.ceil(N / sum(p)), sms) >= 0.9]
    tiles.sort(key=lambda t: -t[0] * sum(t[1]))
    return tiles[:keep] + [(128, (128,))]


def main(argv=None):
    ap = parser(__doc__, __file__)
    add_shapes(ap, SHAPES)
    add_budget(ap)
    args = ap.parse_args(argv)
    need_gpu("gemm_panel_tiles")
    import torch

    import flytune_nb
    from benchmarks.serving_vs_torch import Timers
    from flytune_nb.core.device import current_device

    dev = current_device()
    timers, op, rows = Timers(dev, 25.0), flytune_nb.tuned("matmul"), []
    for M, N, K in within_budget(args.shapes, args.budget_s):
        a, w, out, ref = gemm_operands(M, N, K)
        scale = ref.abs().max().item()
        tried = []
        for bm, widths in candidates(M, N, dev.sm_count):
            for persistent in (True, False):
                for bk, stages in STEPS:
                    cfg = {"BM": bm, "widths": list(widths), "BK": bk, "num_stages": stages, "persistent": persistent,
                           "tiles": math.ceil(M / bm) * math.ceil(N / sum(widths))}
                    try:
                        call = panel_matmul(a, w, out, bm, widths, bk, persistent=persistent, sms=dev.sm_count,
                                            num_stages=stages)
                        out.zero_()
                        call()
                        cfg["rel_err"] = (out.float() - ref).abs().max().item() / scale
                        cfg["graph_us"] = triton.testing.do_bench_cudagraph(call, rep=20) * 1e3
                    except Exception as e:  # noqa: BLE001 - a tile that does not fit (shared memory) is a result
                        cfg["error"] = f"{type(e).__name__}: {str(e)[:200]}"
                    tried.append(cfg)
        ok = [c for c in tried if "graph_us" in c and c["rel_err"] < 1e-2]
        row = {"shape": {"M": M, "N": N, "K": K}, "tried": tried, "wrong": [c for c in tried if c.get("rel_err", 0)
                                                                            >= 1e-2]}
        theirs, ours_out = torch.empty_like(out), torch.empty_like(out)
        sides = {"cublas": lambda: torch.matmul(a, w.T, out=theirs), "tuned": lambda: op(a=a, w=w, out=ours_out)}
        row["tuned_config"] = str(op.config_for({"a": a, "w": w, "out": ours_out}))
        if ok:
            best = min(ok, key=lambda c: c["graph_us"])
            row["best"] = best
            sides["panels"] = panel_matmul(a, w, out, best["BM"], tuple(best["widths"]), best["BK"],
                                           persistent=best["persistent"], sms=dev.sm_count,
                                           num_stages=best["num_stages"])
        row["graph_us"] = {k: v * 1e3 for k, v in timers.graph_each(sides).items()}
        row["flushed_us"] = {k: v * 1e3 for k, v in timers.flushed_each(sides).items()}
        rows.append(row)
        g = row["graph_us"]
        print(f"M={M} N={N} K={K}: cuBLAS {g['cublas']:.1f} tuned {g['tuned']:.1f} panels "
              f"{g.get('panels', float('nan')):.1f} us ({row.get('best', {}).get('widths')})", flush=True)
    env = environment()
    write("gemm_panel_tiles", {"env": env, "rows": rows}, report(rows, env), args.out)


def report(rows: list[dict], env: dict) -> str:
    """Per shape: the fastest panel tile, and cuBLAS / each of ours in both timing modes (> 1: ours faster)."""
    lines = ["# Panel tiles (cuBLAS-wide tiles from power-of-two panels) at mid M", "", env_line(env), "",
             "Ratio = cuBLAS time / ours, side by side (> 1: ours faster). tuned = what flytune_nb.tuned() serves "
             "today; panels = the fastest panel tile of this run.", "",
             "| M | N | K | fastest panel tile (M x widths, K step, stages, schedule) | tiles | cuBLAS graph | "
             "tuned graph | panels graph | tuned / panels (graph) | vs cuBLAS graph: tuned, panels | "
             "vs cuBLAS flushed: tuned, panels |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        s, g, f, b = r["shape"], r["graph_us"], r["flushed_us"], r.get("best")
        tile = (f"{b['BM']} x {'+'.join(map(str, b['widths']))}, {b['BK']}, {b['num_stages']}, "
                f"{'persistent' if b['persistent'] else 'one per tile'}") if b else "none ran"
        p_g, p_f = g.get("panels"), f.get("panels")
        lines.append(f"| {s['M']} | {s['N']} | {s['K']} | {tile} | {b['tiles'] if b else '-'} | {g['cublas']:.1f} us | "
                     f"{g['tuned']:.1f} us | " + (f"{p_g:.1f} us | {g['tuned'] / p_g:.2f}x | " if p_g else "- | - | ")
                     + f"{g['cublas'] / g['tuned']:.2f}x, " + (f"{g['cublas'] / p_g:.2f}x" if p_g else "-") + " | "
                     + f"{f['cublas'] / f['tuned']:.2f}x, " + (f"{f['cublas'] / p_f:.2f}x" if p_f else "-") + " |")
    wrong = sum(len(r["wrong"]) for r in rows)
    failed = sum(1 for r in rows for c in r["tried"] if "error" in c)
    lines += ["", f"Panel configs timed: {sum(len(r['tried']) for r in rows)}; wrong outputs: {wrong}; did not "
              f"compile or launch: {failed} (shared memory, mostly)."]
    return "\n".join(lines)
