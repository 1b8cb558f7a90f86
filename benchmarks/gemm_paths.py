"""Which of matmul's three load paths is fastest against cuBLAS, per shape?

Compares, in one run on one GPU with the same GpuTimer (L2 flushed per rep), torch.matmul (cuBLAS) against:

- TMA=0: pointer loads (cp.async pipelined by Triton), one program per tile;
- TMA=1: the same tiles loaded through Hopper's tensor memory accelerator (host-side descriptors);
- TMA=2: TMA, persistent (one program per SM walking the tiles).

For each shape: the heuristic default, the committed export's config (flytune_nb/exports/matmul), and every
candidate tile config below on each path, with its correctness against the fp64 reference. It is the evidence for
which path the matmul space and heuristic use on sm_90. TMA needs sm_90 or newer: elsewhere those rows record the
error. bf16; the default 8 shapes take about 40 s on an H200.
"""
from __future__ import annotations

import time

from benchmarks.common import add_shapes, environment, need_gpu, parser, write
from flytune_nb.core.config import Config
from flytune_nb.core.device import current_device
from flytune_nb.serve.lookup import artifact_hook
from flytune_nb.core.registry import get_kernel

SHAPES = [(16, 4096, 4096), (64, 14336, 4096), (256, 4096, 4096), (256, 14336, 4096), (1024, 4096, 4096),
          (1024, 14336, 4096), (4096, 4096, 4096), (4096, 14336, 4096)]
# (BM, BN, BK, warps, stages): Hopper's usual tiles; the big ones only pay at large M
TILES = [(128, 128, 64, 4, 3), (128, 128, 64, 4, 4), (128, 128, 64, 8, 3), (128, 128, 64, 8, 4),
         (128, 256, 64, 8, 3), (128, 256, 64, 8, 4), (128, 128, 128, 8, 3), (64, 128, 64, 4, 4),
         (64, 256, 64, 8, 4), (128, 64, 64, 4, 4), (64, 64, 128, 4, 4), (16, 64, 256, 4, 4), (32, 64, 128, 4, 4)]


def main(argv=None):
    ap = parser(__doc__, __file__)
    add_shapes(ap, SHAPES)
    ap.add_argument("--name", default="gemm_paths", help="result file name (default: %(default)s)")
    args = ap.parse_args(argv)
    need_gpu("gemm_paths")
    dev = current_device()
    spec = get_kernel("matmul")
    from flytune_nb.measure.timer import GpuTimer

    timer = GpuTimer(dev, warmup_ms=5, rep_ms=20)
    rows, data = [], []
    t0 = time.perf_counter()
    for M, N, K in args.shapes:
        shape = {"M": M, "N": N, "K": K}
        inputs = spec.make_inputs(shape, "bf16", dev)
        ref = spec.reference(inputs)

        def time_cfg(cfg):
            try:
                out = spec.run(inputs, cfg).double()
                err = float((out - ref).norm() / ref.norm())
                ms = timer.measure(lambda: spec.run(inputs, cfg)).p50
                return ms, err, None
            except Exception as e:  # noqa: BLE001 - a config that fails to compile is a data point
                return None, None, f"{type(e).__name__}: {str(e)[:120]}"

        cublas = timer.measure(lambda: spec.baseline(inputs)).p50
        entries = [("default", spec.default(shape, "bf16", dev))]
        exported = artifact_hook(spec, shape, "bf16", dev)
        if exported is not None:
            entries.append(("export", exported))
        for bm, bn, bk, w, s in TILES:
            if bm > max(16, 2 * M):
                continue
            for tma in (0, 1, 2):
                params = {"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": 8}
                params.update({"TMA": tma} if tma else {})  # TMA=0 is the space's unnamed pointer path
                entries.append((f"tma{tma}", Config(params, num_warps=w, num_stages=s)))
        best = {}
        for label, cfg in entries:
            ms, err, fail = time_cfg(cfg)
            data.append({"shape": shape, "label": label, "config": str(cfg), "ms": ms, "rel_err": err,
                         "error": fail, "cublas_ms": cublas})
            if ms is not None and err is not None and err < 1e-2:
                path = label if label in ("default", "export") else f"TMA={cfg.get('TMA', 0)}"
                if path not in best or ms < best[path][0]:
                    best[path] = (ms, cfg)
        print(f"{M}x{N}x{K}: cublas {cublas * 1e3:.1f} us; " + ", ".join(
            f"{k} {v[0] * 1e3:.1f} ({cublas / v[0]:.2f}x)" for k, v in best.items()), flush=True)
        cells = []
        for path in ("default", "export", "TMA=0", "TMA=1", "TMA=2"):
            v = best.get(path)
            cells.append(f"{v[0] * 1e3:.1f} ({cublas / v[0]:.2f}x)" if v else "-")
        top = min(best.values(), key=lambda v: v[0]) if best else None
        rows.append(f"| {M} | {N} | {K} | {cublas * 1e3:.1f} | " + " | ".join(cells) +
                    f" | `{top[1] if top else '-'}` |")
        del inputs, ref
    env = environment()
    md = "\n".join([
        "# matmul code paths vs cuBLAS",
        f"{env['device']} ({env['arch']}), {env['date']}, torch {env['torch']}, triton {env['triton']}. bf16, p50 of "
        "flytune's GpuTimer (L2 flushed), us; (x) = cuBLAS time / ours. TMA=k columns: the best of the tile list "
        "in benchmarks/gemm_paths.py on that path (correct to 1e-2 relative). "
        f"{time.perf_counter() - t0:.0f} s.", "",
        "| M | N | K | cuBLAS | heuristic default | committed export | TMA=0 (pointers) | TMA=1 | TMA=2 (persistent) "
        "| fastest |", "|---|---|---|---|---|---|---|---|---|---|", *rows])
    write(args.name, {"env": env, "tiles": TILES, "trials": data}, md, out=args.out)


if __name__ == "__main__":
    main()
