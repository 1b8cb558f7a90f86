"""Does cutting only the last, partial round of GEMM tiles into K ranges close the mid-M gap?

At mid M the output tiles fill whole rounds of the SMs and then part of one more: M=256, N=11008 in 128x128 tiles is
172 tiles on 132 SMs, two tile-times for 1.3 of work. The kernel here is matmul's TMA kernel one program per tile
(TMA=1) with a split that runs the whole rounds' tiles whole and cuts each tile of the last round into S K ranges,
reduced in split order by the last program to arrive: 132 whole + 40 x 3 = 252 programs, 1.33 tile-times by the
schedule model. matmul's persistent stream-K kernel schedules the same work and ran at 0.75x cuBLAS there
(gemm_persistent_variants); this is the same cut without a persistent loop. A copy of that kernel in this file, with
matmul's own tile order, partial store and read-back: it answers whether such a knob would pay.

Per shape and tile, under graph replay: the persistent TMA tile (TMA=2, what the heuristic serves at mid M), the same
tile one program per tile (TMA=1), and the tail cut in the three S the schedule model puts fastest (where the grid is
under one round every tile is the tail: matmul's plain SPLIT_K of such grids). Then the fastest tail split beside
cuBLAS and flytune_nb.tuned(), side by side in both timing modes. Every output is checked against an fp32 matmul,
twice (the second call's bits must equal the first's). bf16, about 100 s on an H100.
"""
from __future__ import annotations

import math

import triton
import triton.language as tl

from benchmarks.common import (
    add_budget, add_shapes, env_line, environment, gemm_operands, need_gpu, parser, within_budget, write)
from flytune_nb.kernels.matmul.kernel import _last_to_arrive, _read_part, _tile_of

SHAPES = [(256, 11008, 4096), (512, 6144, 4096), (256, 6144, 4096), (512, 11008, 4096), (1024, 11008, 4096),
          (256, 14336, 4096), (128, 11008, 4096), (128, 6144, 4096), (512, 14336, 4096), (1024, 14336, 4096),
          (256, 4096, 11008), (384, 11008, 4096)]
# (BM, BN, BK, warps, stages): the persistent tiles the mid-M sweeps pick (gemm_mid_balance, gemm_persistent_variants)
TILES = [(128, 128, 64, 4, 4), (128, 128, 64, 4, 5), (64, 128, 128, 4, 4), (128, 256, 64, 8, 3), (128, 64, 128, 4, 4)]
MAX_SPLIT = 8
SPLIT_COST = 0.05  # a guess, for ranking only: the run times every kept S


@triton.jit
def tail_split_kernel(a_desc, w_desc, c_desc, WS, LOCKS, M, N, K, whole_tiles, BLOCK_SIZE_M: tl.constexpr,
                      BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr,
                      SPLIT_K: tl.constexpr, UPCAST: tl.constexpr):
    """Programs below ``whole_tiles`` run their tile whole; each later tile is cut into SPLIT_K K ranges run by
    neighbouring programs, the last to arrive summing the fp32 parts in split order. ``slot`` numbers the cut
    programs from 0 (slot // SPLIT_K is the cut tile's own counter)."""
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    k_tiles = tl.cdiv(K, BLOCK_SIZE_K)
    slot = tl.maximum(pid - whole_tiles, 0)
    cut = pid >= whole_tiles
    split = slot % SPLIT_K
    tile = tl.where(cut, whole_tiles + slot // SPLIT_K, pid)
    k_lo = tl.where(cut, split * k_tiles // SPLIT_K, 0)
    k_hi = tl.where(cut, (split + 1) * k_tiles // SPLIT_K, k_tiles)
    pid_m, pid_n = _tile_of(tile, num_pid_m, num_pid_n, GROUP_SIZE_M)
    off_m = pid_m * BLOCK_SIZE_M
    off_n = pid_n * BLOCK_SIZE_N
    acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(k_lo, k_hi):
        a = a_desc.load([off_m, k * BLOCK_SIZE_K])
        w = w_desc.load([off_n, k * BLOCK_SIZE_K])
        if UPCAST:
            a = a.to(tl.float32)
            w = w.to(tl.float32)
        acc = tl.dot(a, w.T, acc)
    if tile < whole_tiles:
        c_desc.store([off_m, off_n], acc.to(c_desc.dtype))
    else:
        part = slot // SPLIT_K
        if _last_to_arrive(acc, WS, LOCKS, part, slot, BLOCK_SIZE_M, BLOCK_SIZE_N) == SPLIT_K - 1:
            total = _read_part(WS, part * SPLIT_K, BLOCK_SIZE_M, BLOCK_SIZE_N)
            for s in tl.static_range(1, SPLIT_K):
                total += _read_part(WS, part * SPLIT_K + s, BLOCK_SIZE_M, BLOCK_SIZE_N)
            c_desc.store([off_m, off_n], total.to(c_desc.dtype))
            tl.atomic_xchg(LOCKS + part, 0)


def whole_tiles(tiles: int, sms: int) -> int:
    """How many tiles run whole before the rest are cut: every full round of ``sms`` tiles; none (all cut) for a
    grid under one round."""
    return 0 if tiles < sms else tiles - tiles % sms


def tail_split_matmul(a, w, out, tile: tuple, split: int, sms: int):
    """A launcher for ``a @ w.T`` into ``out`` with its descriptors and scratch made once: the zero-argument call.
    ``tile`` is (BM, BN, BK, warps, stages)."""
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor

    bm, bn, bk, warps, stages = tile
    M, K = a.shape
    N = w.shape[0]
    tiles = math.ceil(M / bm) * math.ceil(N / bn)
    whole = whole_tiles(tiles, sms)
    cut = tiles - whole
    ws = torch.empty(max(cut, 1) * split * bm * bn, dtype=torch.float32, device=a.device)
    locks = torch.zeros(max(cut, 1), dtype=torch.int32, device=a.device)  # each tile's last arrival zeroes it again
    descs = (TensorDescriptor.from_tensor(a, [bm, bk]), TensorDescriptor.from_tensor(w, [bn, bk]),
             TensorDescriptor.from_tensor(out, [bm, bn]))
    upcast = a.dtype == torch.bfloat16 and not a.is_cuda  # the interpreter's numpy dot has no bf16

    def call():
        tail_split_kernel[(whole + cut * split,)](*descs, ws, locks, M, N, K, whole, BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn,
                                                  BLOCK_SIZE_K=bk, GROUP_SIZE_M=8, SPLIT_K=split, UPCAST=upcast,
                                                  num_warps=warps, num_stages=stages)
        return out

    return call


def tail_splits(tiles: int, sms: int, k_steps: int, keep: int = 3) -> list[int]:
    """The K splits worth timing for a grid's last round (the whole grid when it is under one round): the ``keep``
    values of S = 2..MAX_SPLIT the schedule model puts fastest (each split charged SPLIT_COST of a tile-time for
    its partials), among those that finish the tail in at most 0.85 of a tile-time in at most three rounds of cut
    programs, each range keeping >= 2 K steps. None when the grid fills its last round."""
    tail = tiles % sms if tiles >= sms else tiles
    if tail == 0:
        return []
    fits = [s for s in range(2, MAX_SPLIT + 1) if s * tail <= 3 * sms and k_steps // s >= 2
            and math.ceil(tail * s / sms) / s <= 0.85]
    return sorted(sorted(fits, key=lambda s: math.ceil(tail * s / sms) / s + SPLIT_COST * s)[:keep])


def rounds(tiles: int, sms: int, split: int) -> float:
    """Tile-times a grid takes with its tail cut in ``split`` (1: not cut), one program an SM: the whole rounds, then
    the rounds of cut programs, each 1/split of a tile-time (the cut's own costs left out)."""
    whole = tiles // sms if tiles >= sms else 0
    tail = tiles - whole * sms
    return whole + (math.ceil(tail * split / sms) / split if tail else 0)


def _config(tile, **knobs):
    from flytune_nb.kit import Config

    bm, bn, bk, warps, stages = tile
    return Config({"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": 8, **knobs},
                  num_warps=warps, num_stages=stages)


def main(argv=None):
    ap = parser(__doc__, __file__)
    add_shapes(ap, SHAPES)
    add_budget(ap)
    args = ap.parse_args(argv)
    need_gpu("gemm_tail_split")
    import torch

    import flytune_nb
    from benchmarks.serving_vs_torch import Timers
    from flytune_nb.core.device import current_device
    from flytune_nb.kernels.matmul.kernel import matmul

    dev = current_device()
    sms = dev.sm_count
    timers, op, rows = Timers(dev, 25.0), flytune_nb.tuned("matmul"), []
    for M, N, K in within_budget(args.shapes, args.budget_s):
        a, w, out, ref = gemm_operands(M, N, K)
        scale = ref.abs().max().item()
        tried = []
        for tile in TILES:
            bm, bn, bk = tile[:3]
            tiles, k_steps = math.ceil(M / bm) * math.ceil(N / bn), math.ceil(K / bk)
            variants = [("persistent", _config(tile, TMA=2), 1), ("one per tile", _config(tile, TMA=1), 1)]
            variants += [("tail split", None, s) for s in tail_splits(tiles, sms, k_steps)]
            for kind, cfg, split in variants:
                name = str(cfg) if cfg else f"{bm}x{bn}x{bk} w{tile[3]} s{tile[4]}, tail split {split}"
                row = {"tile": list(tile), "kind": kind, "split": split, "config": name, "tiles": tiles,
                       "model_rounds": rounds(tiles, sms, split) if kind != "persistent" else tiles / sms}
                try:
                    if cfg is None:
                        call = tail_split_matmul(a, w, out, tile, split, sms)
                    else:
                        def call(cfg=cfg):
                            return matmul(a, w, out, config=cfg)

                    out.fill_(float("nan"))
                    call()
                    first = out.clone()
                    call()
                    row["rel_err"] = (out.float() - ref).abs().max().item() / scale
                    row["same_bits"] = bool(torch.equal(first, out))
                    row["graph_us"] = triton.testing.do_bench_cudagraph(call, rep=20) * 1e3
                except Exception as e:  # noqa: BLE001 - a tile that does not fit is a result
                    row["error"] = f"{type(e).__name__}: {str(e)[:200]}"
                tried.append(row)
        ok = [c for c in tried if "graph_us" in c and c["rel_err"] < 1e-2 and c["same_bits"]]
        result = {"shape": {"M": M, "N": N, "K": K}, "tried": tried,
                  "wrong": [c for c in tried if "graph_us" in c and not (c["rel_err"] < 1e-2 and c["same_bits"])]}
        theirs, ours_out, best_out = torch.empty_like(out), torch.empty_like(out), torch.empty_like(out)
        sides = {"cublas": lambda: torch.matmul(a, w.T, out=theirs), "tuned": lambda: op(a=a, w=w, out=ours_out)}
        result["tuned_config"] = str(op.config_for({"a": a, "w": w, "out": ours_out}))
        for kind in ("persistent", "tail split"):
            mine = [c for c in ok if c["kind"] == kind]
            if mine:
                best = min(mine, key=lambda c: c["graph_us"])
                result[f"best_{kind.replace(' ', '_')}"] = best
                if kind == "persistent":
                    sides[kind] = lambda cfg=_config(best["tile"], TMA=2): matmul(a, w, best_out, config=cfg)
                else:
                    sides[kind] = tail_split_matmul(a, w, best_out, tuple(best["tile"]), best["split"], sms)
        result["graph_us"] = {k: v * 1e3 for k, v in timers.graph_each(sides).items()}
        result["flushed_us"] = {k: v * 1e3 for k, v in timers.flushed_each(sides).items()}
        rows.append(result)
        g = result["graph_us"]
        print(f"M={M} N={N} K={K}: cuBLAS {g['cublas']:.1f} tuned {g['tuned']:.1f} persistent "
              f"{g.get('persistent', float('nan')):.1f} tail split {g.get('tail split', float('nan')):.1f} us "
              f"({result.get('best_tail_split', {}).get('config')})", flush=True)
    env = environment()
    write("gemm_tail_split", {"env": env, "sms": sms, "rows": rows}, report(rows, env, sms), args.out)


def _ratio(base: float, t: float | None) -> str:
    return f"{base / t:.2f}x" if t else "-"


def report(rows: list[dict], env: dict, sms: int) -> str:
    """Per shape: the fastest tail split and persistent tile, and cuBLAS / each in both timing modes (> 1: ours
    faster); then every tile's variants, with the rounds the schedule model predicts."""
    lines = ["# GEMM with the last round of tiles cut into K ranges at mid M", "", env_line(env), "",
             f"{sms} SMs. Ratio = cuBLAS time / ours, side by side (> 1: ours faster). tuned = what "
             "flytune_nb.tuned() serves today; persistent = the fastest TMA=2 tile of this run; tail split = the "
             "fastest tail split of this run.", "",
             "| M | N | K | fastest tail split | cuBLAS graph | tuned graph | persistent graph | tail split graph | "
             "vs cuBLAS graph: tuned, persistent, tail split | vs cuBLAS flushed: tuned, persistent, tail split |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        s, g, f, b = r["shape"], r["graph_us"], r["flushed_us"], r.get("best_tail_split")
        tile = f"`{b['config']}` ({b['tiles']} tiles)" if b else "none ran"
        lines.append(
            f"| {s['M']} | {s['N']} | {s['K']} | {tile} | {g['cublas']:.1f} | {g['tuned']:.1f} | "
            f"{g.get('persistent', float('nan')):.1f} | {g.get('tail split', float('nan')):.1f} | "
            + ", ".join(_ratio(g["cublas"], g.get(k)) for k in ("tuned", "persistent", "tail split")) + " | "
            + ", ".join(_ratio(f["cublas"], f.get(k)) for k in ("tuned", "persistent", "tail split")) + " |")
    lines += ["", "## Every variant (graph replay, us; model = tile-times the schedule takes, one program an SM)", "",
              "| M | N | K | tile (BM x BN x BK, warps, stages) | tiles | persistent | one per tile | tail splits "
              "(S: us, model) |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        s = r["shape"]
        by_tile: dict = {}
        for c in r["tried"]:
            by_tile.setdefault(tuple(c["tile"]), []).append(c)
        for tile, cs in by_tile.items():
            def us(c):
                return f"{c['graph_us']:.1f}" if "graph_us" in c else "failed"

            pers = [us(c) for c in cs if c["kind"] == "persistent"]
            one = [f"{us(c)} ({c['model_rounds']:.2f})" for c in cs if c["kind"] == "one per tile"]
            cut = [f"{c['split']}: {us(c)} ({c['model_rounds']:.2f})" for c in cs if c["kind"] == "tail split"]
            lines.append(f"| {s['M']} | {s['N']} | {s['K']} | {tile[0]}x{tile[1]}x{tile[2]} w{tile[3]} s{tile[4]} | "
                         f"{cs[0]['tiles']} | {', '.join(pers)} | {', '.join(one)} | {'; '.join(cut) or '-'} |")
    wrong = sum(len(r["wrong"]) for r in rows)
    failed = sum(1 for r in rows for c in r["tried"] if "error" in c)
    lines += ["", f"Configs timed: {sum(len(r['tried']) for r in rows)}; wrong or non-repeatable outputs: {wrong}; "
              f"did not compile or launch: {failed}."]
    return "\n".join(lines)


