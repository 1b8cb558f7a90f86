"""Does flytune's pick for fla-core's @triton.autotune kernels beat the decorator's, then serve with zero benchmarks?

fla-core's kernels are adopted as they are (examples/fla_kernels.py); flytune's pick and the decorator's own pick are
measured side by side in one run, then served back to fla's unmodified functions.
Per kernel and shape:
- ours: an exhaustive sweep of the decorator's configs (isolated worker, precompile pool, every config checked
  against torch), the fastest correct config;
- the decorator's: fla's own Python function called once on a fresh autotuner cache (Triton's do_bench over every
  config it keeps), what its cache then holds, and Triton's own timings of every config;
- both configs re-timed alternately with flytune's timer on the same inputs (the fastest median of each), and both
  read from Triton's own timings;
- served: the sweep exported, ``flytune_nb.prime`` from it, fla's function called again: benchmark calls (0 expected)
  and the config launched.

    python -m benchmarks adopt_fla              # the H200 grid (bf16), about 2 minutes
    python -m benchmarks adopt_fla --smoke      # CPU check: tiny shapes through Triton's interpreter

fla's own disk cache of autotune results (FLA_CACHE_RESULTS, on by default) is turned off here so that the
decorator really picks in this run instead of reading an earlier run's pick from ~/.triton/cache, and so is its
backend dispatch (FLA_DISABLE_BACKEND_DISPATCH=1), so that fla's functions reach these Triton kernels. A kernel that
fails is reported in the results and the others still run.
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

os.environ["FLA_CACHE_RESULTS"] = "0"  # before fla is imported (read at import); see the module doc
# fla's @dispatch may route a call to another installed backend; the Triton kernels are what is measured here
os.environ.setdefault("FLA_DISABLE_BACKEND_DISPATCH", "1")
REPO = Path(__file__).resolve().parent.parent

# kernel -> (attribute in examples/fla_kernels.py, shapes on the GPU, shapes for --smoke). l2norm and rmsnorm: D=128
# (a head) and 512 (their largest fused D), T from a decode batch to a long prefill (l2norm's key buckets T by 65536,
# rmsnorm's by 2048); the conv update: a decode step (N sequences, one token each) at D=4096, W=4.
KERNELS = {
    "l2norm": ("L2NORM", [{"T": 1024, "D": 128}, {"T": 65536, "D": 128}, {"T": 16384, "D": 512}],
               [{"T": 40, "D": 32}]),
    "rmsnorm": ("RMSNORM", [{"T": 1024, "D": 512}, {"T": 32768, "D": 512}, {"T": 16384, "D": 128}],
                [{"T": 40, "D": 32}]),
    "conv_update": ("CONV_UPDATE", [{"N": 1, "D": 4096, "W": 4}, {"N": 64, "D": 4096, "W": 4},
                                    {"N": 256, "D": 4096, "W": 4}], [{"N": 2, "D": 48, "W": 4}]),
}


def fla_call(kernel: str, inputs: dict):
    """fla's own Python entry point for the kernel, on the adopted spec's inputs (it allocates its own outputs)."""
    if kernel == "l2norm":
        from fla.modules.norm.l2norm import l2norm_fwd

        return lambda: l2norm_fwd(inputs["x"])
    if kernel == "rmsnorm":
        from fla.modules.norm.layernorm import layer_norm_fwd

        return lambda: layer_norm_fwd(inputs["x"], inputs["weight"], None, eps=1e-5, is_rms_norm=True)
    from fla.modules.causal_conv1d.ops import causal_conv1d_update

    cache = inputs["cache"].clone()
    return lambda: causal_conv1d_update(inputs["x"], cache, weight=inputs["weight"], activation="silu")


def wall_clock(kernel_call, quantiles=None, **_):
    """The interpreter's stand-in for Triton's benchmarker (which asks the GPU driver): one call, wall time."""
    t = time.perf_counter()
    kernel_call()
    ms = (time.perf_counter() - t) * 1e3
    return [ms] * len(quantiles) if quantiles else ms


def decorator_pick(spec, kernel: str, shape: dict, dtype: str, dev, tc) -> dict:
    """What the decorator picks on its own for this shape, first call on a fresh cache."""
    ad = spec.extra["adopted"]
    at = ad.autotuner
    at.cache.clear()
    inputs = spec.make_inputs(shape, dtype, dev)
    key = ad.key(inputs)
    call = fla_call(kernel, inputs)
    t0 = time.perf_counter()
    with tc.count_benchmarks(at, None if dev.is_gpu else wall_clock) as count:
        call()
    if dev.is_gpu:
        import torch

        torch.cuda.synchronize()
    tuned_s = time.perf_counter() - t0
    timings = {ad.to_ours(c): list(t) for c, t in getattr(at, "configs_timings", {}).items()}
    return {"key": key, "config": ad.to_ours(at.cache[key]), "bench_calls": count.calls, "tune_s": tuned_s,
            "triton_ms": timings}


def side_by_side(spec, shape, dtype, dev, ours, theirs, rep_ms: float, rounds: int) -> dict:
    """Both configs timed alternately by flytune's timer on one set of inputs: the fastest median of each."""
    from flytune_nb.measure.timer import make_timer

    timer = make_timer(dev, rep_ms=rep_ms) if dev.is_gpu else make_timer(dev, reps=3)
    inputs = spec.make_inputs(shape, dtype, dev)
    snap = spec.snapshot(inputs)
    best = {"ours": float("inf"), "theirs": float("inf")}
    for _ in range(rounds):
        for who, cfg in (("ours", ours), ("theirs", theirs)):
            p50 = timer.measure(lambda cfg=cfg: spec.run(inputs, cfg), spec.rep_setup(inputs, snap)).p50
            best[who] = min(best[who], p50)
    return best


def main(argv=None) -> int:
    from benchmarks.common import environment, parser, results_dir, write

    p = parser(__doc__, __file__)
    p.add_argument("--kernels", default=",".join(KERNELS), help=f"comma-separated, of {', '.join(KERNELS)}")
    p.add_argument("--dtype", default=None, help="bf16 | fp16 | fp32 (default bf16; fp32 with --smoke)")
    p.add_argument("--smoke", action="store_true", help="tiny shapes through the interpreter: the CPU check")
    p.add_argument("--rep-ms", type=float, default=25.0, help="GPU timing budget per config in ms (default 25)")
    p.add_argument("--rounds", type=int, default=3, help="alternating re-timings of the two picks (default 3)")
    p.add_argument("--no-isolate", action="store_true", help="sweep in this process (no worker processes)")
    p.add_argument("--name", default="adopt_fla", help="result file name (default: %(default)s)")
    args = p.parse_args(argv)

    import flytune_nb
    from flytune_nb import Sweep
    from flytune_nb._compat import triton as tc
    from flytune_nb.artifacts.export import export
    from flytune_nb.core.device import current_device
    from flytune_nb.core.registry import get_kernel
    from flytune_nb.engine.store import Store

    dev = current_device()
    dtype = args.dtype or ("fp32" if args.smoke else "bf16")
    work = Path(tempfile.mkdtemp(prefix="adopt-fla-"))
    t_start = time.perf_counter()
    rows, served, errors = [], [], []
    for kernel in [k.strip() for k in args.kernels.split(",") if k.strip()]:
        try:
            attr, gpu_shapes, tiny_shapes = KERNELS[kernel]
            shapes = tiny_shapes if args.smoke else gpu_shapes
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # fla's warnings about the device
                spec = get_kernel(f"{REPO / 'examples' / 'fla_kernels.py'}:{attr}")
            ad = spec.extra["adopted"]
            store = Store(work / f"{kernel}.db")
            t0 = time.perf_counter()
            results = Sweep(spec, shapes, [dtype], db=store, isolate=not args.no_isolate, baselines=(),
                            timer={"rep_ms": args.rep_ms} if dev.is_gpu else None).run()
            sweep_s = time.perf_counter() - t0
            for r in results:
                shape = r.shape
                theirs = decorator_pick(spec, kernel, shape, dtype, dev, tc)
                ours = r.best.config
                ours_trial = next(t for t in r.trials if t.config == ours)
                their_trial = next((t for t in r.trials if t.config == theirs["config"]), None)
                sbs = side_by_side(spec, shape, dtype, dev, ours, theirs["config"], args.rep_ms, args.rounds)
                rows.append({
                    "kernel": kernel, "shape": shape, "dtype": dtype, "key": list(map(str, theirs["key"])),
                    "ours": str(ours), "theirs": str(theirs["config"]), "same": ours == theirs["config"],
                    "ours_ms": sbs["ours"], "theirs_ms": sbs["theirs"], "speedup": sbs["theirs"] / sbs["ours"],
                    "triton_ours_ms": (theirs["triton_ms"].get(ours) or [None])[0],
                    "triton_theirs_ms": (theirs["triton_ms"].get(theirs["config"]) or [None])[0],
                    "theirs_checked": their_trial.status if their_trial else "not in our space",
                    "ours_rel_error": ours_trial.rel_error, "configs": len(r.trials),
                    "decorator_bench_calls": theirs["bench_calls"], "decorator_tune_s": theirs["tune_s"],
                    "sweep_s_per_shape": sweep_s / len(results)})
            # served: export, prime, fla's own function once per shape
            export(store, work / "exports")
            ad.autotuner.cache.clear()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # shapes sharing a coarser key: reported below
                report = flytune_nb.prime(spec, work / "exports")
            for r in results:
                inputs = spec.make_inputs(r.shape, dtype, dev)
                with tc.count_benchmarks(ad.autotuner, None if dev.is_gpu else wall_clock) as count:
                    fla_call(kernel, inputs)()
                key = ad.key(inputs)
                primed = next((k for k in report.keys if k.key == key), None)
                served.append({"kernel": kernel, "shape": r.shape, "bench_calls": count.calls,
                               "launched": str(ad.to_ours(ad.autotuner.best_config)),
                               "primed": str(primed.config) if primed else None,
                               "key_shared_by": len(primed.shapes) if primed else 0,
                               "coarse_key_winners": len(primed.winners) if primed else 0})
        except Exception as e:  # noqa: BLE001 - one kernel's failure must not lose the others' results
            import traceback

            traceback.print_exc()
            errors.append({"kernel": kernel, "error": f"{type(e).__name__}: {e}"[:500]})
    total_s = time.perf_counter() - t_start
    if (work / "exports").is_dir():  # the exported winners come back with the results
        import shutil

        shutil.copytree(work / "exports", results_dir(args.out) / f"{args.name}_exports", dirs_exist_ok=True)

    def us(ms):
        return "-" if ms is None else f"{ms * 1e3:.2f}"

    md = [f"# fla-core's autotuned kernels: flytune's pick vs the decorator's own ({dev.name}, {dtype})", "",
          f"One run, {total_s:.0f} s. Timings in us: flytune's timer (fastest median of {args.rounds} alternating "
          f"re-timings on the same inputs) and Triton's own do_bench from the decorator's tuning.", "",
          "| kernel | shape | ours | decorator's | ours us | decorator's us | speed-up | Triton: ours | "
          "Triton: decorator's | decorator's check |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        md.append(f"| {row['kernel']} | {' '.join(f'{k}={v}' for k, v in row['shape'].items())} | `{row['ours']}` | "
                  f"`{row['theirs']}`{' (same)' if row['same'] else ''} | {us(row['ours_ms'])} | "
                  f"{us(row['theirs_ms'])} | {row['speedup']:.2f}x | {us(row['triton_ours_ms'])} | "
                  f"{us(row['triton_theirs_ms'])} | {row['theirs_checked']} |")
    md += ["", "Served back to fla's unmodified functions after `flytune_nb.prime` (benchmark calls; 0 expected):", "",
           "| kernel | shape | benchmark calls | launched | primed | shapes sharing the key (winners) |",
           "|---|---|---|---|---|---|"]
    for s in served:
        md.append(f"| {s['kernel']} | {' '.join(f'{k}={v}' for k, v in s['shape'].items())} | {s['bench_calls']} | "
                  f"`{s['launched']}` | `{s['primed']}` | {s['key_shared_by']} ({s['coarse_key_winners']}) |")
    ok = bool(served) and not errors and all(s["bench_calls"] == 0 and s["launched"] == s["primed"] for s in served)
    md += ["", f"served with zero benchmarks: {'yes' if ok else 'NO'}"]
    md += [f"FAILED {e['kernel']}: {e['error']}" for e in errors]
    write(args.name, {"environment": environment(), "rows": rows, "served": served, "errors": errors,
                      "total_s": total_s, "args": {k: str(v) for k, v in vars(args).items()}},
          "\n".join(md), out=args.out)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
