"""At decode and mid M (1-128), which tile width and K split reach cuBLAS, and does balancing programs over the SMs decide it?

For M <= 128 a GEMM is bound by reading the weight once (and, under graph replay, partly by L2 traffic): what
matters is that every SM streams an equal share. A grid of ``programs`` equal programs (tiles x SPLIT_K) keeps
``wave_use(programs, SMs)`` of the SMs' rounds busy; 172 programs of 16x64 tiles (M=1, N=11008) give 40 of 132 SMs
two tiles and the rest one. This times, per shape, a family of pointer-path configs: one row-tile height (the
heuristic's), every column-tile width, K tiles and SPLIT_K in 1-16 (odd splits only where they balance the
programs), plus the persistent TMA tiles (above M = 64 128 rows, and 64 rows twice; below, one 64-row tile, every
column width 32-256, unsplit; and at M <= 64 the swapped-operand TMA tiles, SWAP_AB: w's rows on the MMA's 64-row
side, 64 or 128 of them, K split 1-4), against cuBLAS (torch.matmul)
and the heuristic default, in one run, under graph replay (as engines serve decode) through the sweep engine into a
store. The report puts each shape's best, the best per (BLOCK_SIZE_N, SPLIT_K) and the default side by side with the
programs' wave use.

Above M = 128 (``mid_family``) the question is which tile shape and path fill the SMs: row and column tiles of
64-256 on both the pointer and the persistent TMA path, and SPLIT_K 2 where the tiles leave SMs idle.

The JSON keeps every timing; the store (``--db``) resumes an interrupted run. bf16.
"""
from __future__ import annotations

import time
from itertools import product

from benchmarks.common import add_shapes, environment, need_gpu, parser, write

SHAPES = [(1, 11008, 4096), (1, 6144, 4096), (1, 5120, 4096), (32, 5120, 4096), (32, 11008, 4096),
          (64, 4096, 4096), (64, 6144, 4096), (64, 11008, 4096), (128, 4096, 4096), (128, 6144, 4096),
          (128, 11008, 4096), (128, 4096, 11008), (128, 28672, 4096)]
SPLITS = (1, 2, 3, 4, 5, 6, 8, 12, 16)
BALANCED = 0.85  # odd splits are timed only where their programs keep this share of the SMs' rounds busy


def mid_family(shape: dict, device) -> list:
    """M > 128: every row tile of 64-256 and column tile of 64-256 on both paths (pointer, persistent TMA), BK 64 and
    128, 4 or 8 warps, 3-5 stages, and on the pointer path SPLIT_K 2 where the tiles leave SMs idle."""
    from flytune_nb.kit import Config
    from flytune_nb.kit.spaces import has_tma, tile_fits, wave_use

    M, N, K = shape["M"], shape["N"], shape["K"]
    sms = max(device.sm_count, 1)
    out = []
    for bm in (64, 128, 256):
        if bm > 2 * M:
            continue
        for bn in (64, 128, 256):
            tiles = -(-M // bm) * -(-N // bn)
            for tma in ((0, 2) if has_tma(device) else (0,)):
                splits = (1, 2) if not tma and wave_use(tiles, sms) < BALANCED else (1,)
                for split, bk, warps, stages in product(splits, (64, 128), (4, 8), (3, 4, 5)):
                    if K % (bk * split) or not tile_fits(bm, bn, bk, warps, stages, "bf16", device,
                                                         store_tile=bool(tma)):
                        continue
                    knobs = {"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": 8}
                    if tma:
                        knobs["TMA"] = 2
                    if split > 1:
                        knobs["SPLIT_K"] = split
                    out.append(Config(knobs, num_warps=warps, num_stages=stages))
    return out


def family(shape: dict, device) -> list:
    """The configs timed for ``shape`` (see the module docstring; M > 128: ``mid_family``)."""
    from flytune_nb.kit import Config
    from flytune_nb.kit.spaces import has_tma, next_pow2, tile_fits, wave_use

    M, N, K = shape["M"], shape["N"], shape["K"]
    if M > 128:
        return mid_family(shape, device)
    sms = max(device.sm_count, 1)
    bm = min(128, max(16, next_pow2(M)))
    out = []
    for bn in (32, 64, 128, 256):
        if bn > max(32, next_pow2(N)):
            continue
        tiles = -(-M // bm) * -(-N // bn)
        for bk in ((128, 256) if bm <= 32 else (64, 128)):
            steps = -(-K // bk)
            if K % bk:
                continue
            for split in SPLITS:
                programs = tiles * split
                if split > 1 and (steps // split < 2 or programs > 6 * sms):
                    continue
                if split not in (1, 2, 4) and wave_use(programs, sms) < BALANCED:
                    continue
                for warps in ((4,) if bm <= 64 else (4, 8)):
                    for stages in ((3, 4) if split > 1 else (4, 5)):
                        if stages > max(2, steps // split) or not tile_fits(bm, bn, bk, warps, stages, "bf16", device):
                            continue
                        knobs = {"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": 1}
                        if split > 1:
                            knobs["SPLIT_K"] = split
                        out.append(Config(knobs, num_warps=warps, num_stages=stages))
    if M > 64 and has_tma(device):  # the persistent TMA tiles, 128 rows over all of M or 64 rows twice
        for bm, bn in product((64, 128), (64, 128, 256)):
            for bk, warps, stages in ((64, 4, 4), (64, 4, 5), (64, 8, 4), (64, 8, 5), (128, 4, 4), (128, 8, 3)):
                if tile_fits(bm, bn, bk, warps, stages, "bf16", device, store_tile=True):
                    out.append(Config({"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk,
                                       "GROUP_SIZE_M": 1 if bm == 128 else 8, "TMA": 2},
                                      num_warps=warps, num_stages=stages))
    elif has_tma(device):  # one 64-row TMA tile over all of M (Hopper's smallest warpgroup MMA), unsplit
        for bn, (bk, stages) in product((32, 64, 128, 256), ((64, 5), (64, 6), (128, 4), (128, 5), (256, 3), (256, 4))):
            if K % bk == 0 and tile_fits(64, bn, bk, 4, stages, "bf16", device, store_tile=True):
                out.append(Config({"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": 1,
                                   "TMA": 2}, num_warps=4, num_stages=stages))
    if M <= 64 and has_tma(device):  # the swapped-operand tiles: one row tile over all of M, K split up to 4
        bm = max(16, next_pow2(M))
        for bn, (bk, stages), split in product((64, 128), ((128, 4), (128, 5), (256, 3), (256, 4)), (1, 2, 3, 4)):
            tiles, steps = -(-N // bn), -(-K // bk)
            if K % bk or (split > 1 and (steps // split < 2 or tiles * split > 4 * sms or stages == 5)):
                continue
            if split == 3 and wave_use(tiles * split, sms) < BALANCED:
                continue
            if tile_fits(bm, bn, bk, 4, stages, "bf16", device):
                out.append(Config({"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": 1,
                                   "TMA": 1, "SWAP_AB": 1, **({"SPLIT_K": split} if split > 1 else {})},
                                  num_warps=4, num_stages=stages))
    return out


def _path(cfg: dict) -> str:
    return "swap" if cfg.get("SWAP_AB") else "TMA" if cfg.get("TMA") == 2 else "pointer"


def _programs(shape: dict, cfg: dict, sms: int) -> int:
    M, N = shape["M"], shape["N"]
    tiles = -(-M // cfg["BLOCK_SIZE_M"]) * -(-N // cfg["BLOCK_SIZE_N"])
    return min(tiles, sms) if cfg.get("TMA") == 2 else tiles * cfg.get("SPLIT_K", 1)


def _short(cfg: dict) -> str:
    tma = {"swap": " swap", "TMA": " TMA", "pointer": ""}[_path(cfg)]
    split = f" split {cfg['SPLIT_K']}" if cfg.get("SPLIT_K", 1) > 1 else ""
    return (f"{cfg['BLOCK_SIZE_M']}x{cfg['BLOCK_SIZE_N']}x{cfg['BLOCK_SIZE_K']}{split}{tma} "
            f"w{cfg['num_warps']} s{cfg['num_stages']}")


def report(rows: list, env: dict, sms: int, seconds: float | None) -> str:
    """Markdown from ``rows``: one dict per shape with cublas_us, default (config, us), trials [(config, us)]."""
    from flytune_nb.analysis.scores import geomean
    from flytune_nb.kit.spaces import wave_use

    lines = ["# Decode and mid-M GEMM: tile width and K split against cuBLAS (graph replay)",
             f"{env['device']} ({env['arch']}, {sms} SMs), {env['date']}, torch {env['torch']}, triton {env['triton']}"
             + (f", commit {env['commit']}" if env.get("commit") else "") + ". bf16, p50 of 10 calls in a CUDA graph "
             "(the sweep engine's graph timing), us; ratio = cuBLAS time / ours. wave use: the share of the SMs' "
             "rounds the programs keep busy." + (f" {seconds:.0f} s." if seconds else ""), "",
             "| M | N | K | cuBLAS | default | (ratio) | default's wave use | best | (ratio) | best config | "
             "programs | wave use | configs timed |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    per_family, best_ratios, default_ratios = [], [], []
    for r in rows:
        s, cub = r["shape"], r["cublas_us"]
        ok = sorted((t for t in r["trials"] if t[1] is not None), key=lambda t: t[1])
        d_cfg, d_us = r["default"]
        best = ok[0] if ok else (None, None)
        dw = wave_use(_programs(s, d_cfg, sms), sms)
        cells = [str(s["M"]), str(s["N"]), str(s["K"]), f"{cub:.1f}" if cub else "-",
                 f"{d_us:.1f}" if d_us else "-", f"{cub / d_us:.2f}x" if cub and d_us else "-", f"{dw:.2f}"]
        if best[0] is not None:
            p = _programs(s, best[0], sms)
            cells += [f"{best[1]:.1f}", f"{cub / best[1]:.2f}x" if cub else "-", f"`{_short(best[0])}`", str(p),
                      f"{wave_use(p, sms):.2f}"]
            if cub:
                best_ratios.append(cub / best[1])
        else:
            cells += ["-"] * 5
        lines.append("| " + " | ".join(cells + [str(len(r["trials"]))]) + " |")
        if cub and d_us:
            default_ratios.append(cub / d_us)
        fam = {}
        for cfg, us in ok:
            k = (cfg["BLOCK_SIZE_N"], cfg.get("SPLIT_K", 1), _path(cfg))
            fam.setdefault(k, (cfg, us))
        per_family.append((s, cub, fam))
    lines += ["", "## Best per (BLOCK_SIZE_N, SPLIT_K) and path", "",
              "| M | N | K | BN | split | path | us | cuBLAS / it | programs | wave use | config |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for s, cub, fam in per_family:
        if not cub:
            continue
        for (bn, split, tma), (cfg, us) in sorted(fam.items(), key=lambda kv: kv[1][1])[:8]:
            p = _programs(s, cfg, sms)
            lines.append(f"| {s['M']} | {s['N']} | {s['K']} | {bn} | {split} | {tma} | "
                         f"{us:.1f} | {cub / us:.2f}x | {p} | {wave_use(p, sms):.2f} | `{_short(cfg)}` |")
    paths = sorted({_path(cfg) for r in rows for cfg, us in r["trials"] if us is not None})
    if len(paths) > 1:
        lines += ["", "## Best per path, and the default's", "",
                  "| M | N | K | cuBLAS | " + " | ".join(f"best {p} (cuBLAS / it)" for p in paths)
                  + " | default (path) |", "|---|---|---|---|" + "---|" * len(paths) + "---|"]
        for r in rows:
            s, cub = r["shape"], r["cublas_us"]
            cells = [str(s["M"]), str(s["N"]), str(s["K"]), f"{cub:.1f}" if cub else "-"]
            for p in paths:
                us = min((u for c, u in r["trials"] if u is not None and _path(c) == p), default=None)
                cells.append(f"{us:.1f} ({cub / us:.2f}x)" if us and cub else "-")
            d_cfg, d_us = r["default"]
            cells.append(f"{d_us:.1f} ({_path(d_cfg)})" if d_us else "-")
            lines.append("| " + " | ".join(cells) + " |")
    if best_ratios:
        lines += ["", f"Geomean cuBLAS / best: {geomean(best_ratios):.3f}x; cuBLAS / default: "
                      f"{geomean(default_ratios):.3f}x over {len(best_ratios)} shapes."]
    return "\n".join(lines)


def main(argv=None):
    ap = parser(__doc__, __file__)
    add_shapes(ap, SHAPES)
    ap.add_argument("--db", default=None, help="the store (default: <out>/stores/gemm_balance.db); re-running resumes")
    ap.add_argument("--rep-ms", type=float, default=10.0, help="timing budget per config in ms (default 10)")
    ap.add_argument("--name", default="gemm_balance", help="result file name (default: %(default)s)")
    args = ap.parse_args(argv)
    need_gpu("gemm_balance")
    from flytune_nb.core.device import current_device
    from flytune_nb.engine.sweep import Sweep

    from benchmarks.common import results_dir

    dev = current_device()
    out = results_dir(args.out)
    (out / "stores").mkdir(exist_ok=True)
    db = args.db or str(out / "stores" / f"{args.name}.db")
    rows, t0 = [], time.perf_counter()
    by_m: dict = {}
    for M, N, K in args.shapes:
        by_m.setdefault(M, []).append({"M": M, "N": N, "K": K})
    for M, shapes in by_m.items():
        # one sweep per M (its workers start once): the union of its shapes' families, timed on each of them
        configs = list(dict.fromkeys(c for s in shapes for c in family(s, dev)))
        results = Sweep("matmul", shapes, ["bf16"], db=db, configs=configs, timing="graph", selection=None,
                        baselines=("torch_eager",), timer={"rep_ms": args.rep_ms}).run()
        for res in results:
            cub = res.baselines.get("torch_eager", {})
            d = next((t for t in res.trials if t.config == res.default and t.ok), None)
            rows.append({"shape": res.shape, "cublas_us": cub["p50"] * 1e3 if cub.get("status") == "ok" else None,
                         "default": (res.default.to_dict(), d.p50 * 1e3 if d else None),
                         "trials": [(t.config.to_dict(), t.p50 * 1e3 if t.ok else None) for t in res.trials]})
            best = res.best
            print(f"{res.shape}: cuBLAS {rows[-1]['cublas_us']}, default {rows[-1]['default'][1]}, best "
                  f"{best.p50 * 1e3 if best else None} {best.config if best else ''} ({len(configs)} configs)",
                  flush=True)
    env = environment()
    md = report(rows, env, dev.sm_count, time.perf_counter() - t0)
    write(args.name, {"env": env, "rows": rows, "store": db}, md, out=args.out)


if __name__ == "__main__":
    main()
