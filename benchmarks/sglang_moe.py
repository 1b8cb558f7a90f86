"""Does flytune's search on SGLang's own fused-MoE kernel match SGLang's shipped configs with a tenth of the evaluations?

Three configs side by side per batch size, all launched on SGLang's kernel (kernels/sglang_fused_moe) and timed by
one timer, interleaved: flytune's searched config, the config SGLang ships for this GPU (its own folder, resolved as
SGLang resolves it) and SGLang's get_default_config.

Per model (Mixtral-8x7B: E=8 N=14336 K=4096 top-2; Qwen3-30B-A3B: E=128 N=768 K=2048 top-8; tp=1) and SGLang's tuning
batch sizes, one sweep (the default and the shipped entry first, then the strategy over SGLang's pruned space, at most
--budget evaluations per batch size; SGLang's own script makes 1920), exported in SGLang's layout under
<out>/sglang_exports/ (SGLANG_MOE_CONFIG_DIR=<out>/sglang_exports/sglang_fused_moe reads them). Then each batch
size's three configs re-timed --rounds times, alternating, fastest median of each kept. "flytune" is the best the
search found *without* the shipped entry (the search's own result); "export" is what `flytune export` writes, the
best of everything timed, shipped entry included.

Reported: per M the three latencies, shipped / flytune and default / flytune, the evaluations; per model the geomean
of shipped / flytune, the batch sizes where flytune is slower than shipped beyond the tie band, and the evaluations
against SGLang's 1920. Targets: geomean >= 1.0, none beyond the band, <= 192 evaluations per batch size. Needs the
sglang package (docs/sglang.md). --smoke: tiny shapes through the interpreter (fp16), the CPU check of this script.
"""
from __future__ import annotations

import importlib.metadata
import math
import time
from pathlib import Path

from benchmarks.common import environment, int_list, need_gpu, parser, results_dir, write

MODELS = {"Mixtral-8x7B": {"E": 8, "N": 14336, "K": 4096, "topk": 2},
          "Qwen3-30B-A3B": {"E": 128, "N": 768, "K": 2048, "topk": 8}}
SMOKE = {"tiny-a": {"E": 4, "N": 64, "K": 32, "topk": 2}, "tiny-b": {"E": 8, "N": 32, "K": 64, "topk": 2}}
BATCH_SIZES = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096)
SGLANG_EVALS = 1920  # SGLang's tuning script times its whole NVIDIA space per batch size
TIE = 0.03  # flytune within 3% of shipped is a tie (one config re-timed on the H200 moved up to ~2%)
SHIPPED = "SGLang shipped"
TIMED = {"graph": "as SGLang's tuner times (10 calls captured in one CUDA graph, per call)",
         "events": "one launch per sample with the L2 flushed"}


def _args(argv=None):
    p = parser(__doc__, __file__)
    p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    p.add_argument("--m", type=int_list, default=None, metavar="M,...",
                   help="batch sizes (default: SGLang's 18, 1..4096)")
    p.add_argument("--budget", type=int, default=20,
                   help="evaluations per batch size, default and shipped entry included (default 20)")
    p.add_argument("--strategy", default="auto", help="auto (surrogate when optuna imports, else random) | "
                                                      "random | surrogate | halving | exhaustive")
    p.add_argument("--rep-ms", type=float, default=25.0, help="timing budget per config in ms (default 25)")
    p.add_argument("--rounds", type=int, default=2, help="side-by-side re-timings per config (default 2)")
    p.add_argument("--timing", choices=("graph", "events"), default="graph",
                   help="graph (default): 10 calls in one CUDA graph, as SGLang's tuner times its configs; events: "
                        "one launch per sample, L2 flushed, where small batch sizes time the host's launch gaps")
    p.add_argument("--dtype", default=None, help="default bf16 (fp16 with --smoke)")
    p.add_argument("--smoke", action="store_true", help="tiny shapes, 2 batch sizes: the CPU check of this script")
    p.add_argument("--name", default="sglang_moe", help="result file name (default: %(default)s)")
    p.add_argument("--from-store", default=None, metavar="DB",
                   help="no timing: report a finished sweep from its store (any machine with sglang installed): the "
                        "sweep's own timings of the default, the shipped entry and the search's best, and the "
                        "selection stage's interleaved re-timings where the shipped entry was one of its contenders")
    return p.parse_args(argv)


def _strategy(name: str) -> str:
    if name != "auto":
        return name
    try:
        import optuna  # noqa: F401
        return "surrogate"
    except ImportError:
        return "random"


def _fastest(trials):
    bad = [t for t in trials if not t.ok]
    return bad[0] if bad else min(trials, key=lambda t: t.p50)


def _spread(trials):
    """(slowest - fastest) / fastest median over the rounds: how far one config's re-timings moved."""
    ok = [t.p50 for t in trials if t.ok]
    return (max(ok) - min(ok)) / min(ok) if len(ok) > 1 else None


def _which(config, named: dict) -> str:
    """The name of the first of ``named`` that is ``config``: "another" for a config none of them is, "-" for none."""
    if config is None:
        return "-"
    return next((k for k, c in named.items() if c == config), "another")


def _geomean(xs):
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def _report_from_store(args) -> int:
    """The per-M comparison from a finished sweep's store, without a GPU: the sweep timed every config under one
    timer (``timing``), and the selection stage re-timed its contenders (the three fastest and the default) in
    interleaved rounds; where the shipped entry was among them those re-timings decide, else the sweep's."""
    import json
    import statistics

    from flytune_nb.core.config import Config
    from flytune_nb.artifacts.sglang import config_dtype, shipped_entry
    from flytune_nb.engine.store import Store

    from flytune_nb.errors import UsageError

    if not Path(args.from_store).is_file():
        raise UsageError(f"--from-store {args.from_store}: no such file")
    store = Store(args.from_store, readonly=True)
    runs = store.records("runs")
    ran = [t for t in store.records("trials", "sglang_fused_moe") if t["status"] == "ok"]
    retimes = store.records("retimes", "sglang_fused_moe")
    selections = store.records("selections", "sglang_fused_moe")
    store.close()
    # the earliest run names the sweep's device and start (a sweep resumed into the store adds runs)
    first_run = min((r for r in runs if r["started"] is not None), key=lambda r: r["started"], default=None)
    if first_run is None or first_run["device"] is None or not ran:
        raise UsageError(f"--from-store {args.from_store}: no sglang_fused_moe trial that ran")
    device, started, info = first_run["device"], first_run["started"], first_run["device_info"]
    toolchain = json.loads(ran[0]["toolchain"])
    sglang_version = importlib.metadata.version("sglang")
    dtype = args.dtype or ("fp16" if args.smoke else "bf16")
    models = SMOKE if args.smoke else {k: MODELS[k] for k in args.models.split(",")}
    payload = {"from_store": Path(args.from_store).name, "device": device, "device_info": json.loads(info),
               "swept": started, "toolchain": toolchain, "shipped_from": f"sglang {sglang_version}", "timing": args.timing, "dtype": dtype, "models": {}}
    md = [f"# SGLang's fused-MoE kernel: flytune's search vs SGLang's shipped configs vs its default ({dtype}, "
          f"{args.timing} timing)", "",
          f"{device}, swept {started} UTC (Triton {toolchain.get('triton')}, torch {toolchain.get('torch')}); "
          f"report built from the store `{Path(args.from_store).name}` (`--from-store`), no timing of its own; the "
          f"shipped entries are those of the installed SGLang {sglang_version} for that Triton. "
          f"Timed {TIMED[args.timing]}. Per batch size: the sweep's p50 of SGLang's default, SGLang's shipped entry "
          f"and flytune's best (the search without the shipped entry), us; \"interleaved\": the selection stage's "
          f"5 alternating re-timings (median) of its contenders, the sweep's three fastest and the default, when the "
          f"shipped entry was one of them, else \"-\" (three of flytune's configs timed faster than it). Verdict: "
          f"interleaved where there, else the sweep's. Export: the config `flytune export` writes (the selection stage's "
          f"pick against the default). Tie band {TIE:.0%}.", ""]
    summary = []
    for model, dims in models.items():
        rows, verdicts, beyond = [], [], []
        for M in args.m or ([1, 5] if args.smoke else BATCH_SIZES):
            shape = {"M": M, **dims}
            key = json.dumps(shape, separators=(",", ":"))
            trials = [(t["config"], t["p50"], t["is_default"]) for t in ran if t["shape"] == key and
                      t["dtype"] == dtype and t["fidelity"] == "full" and t["timing"] == args.timing]
            found = shipped_entry(shape, device, triton_version=toolchain.get("triton"), dtype=config_dtype(dtype))
            shipped = found[0] if found else None
            timed = {Config.from_json(c): p for c, p, _ in trials}
            default = next((Config.from_json(c) for c, _, d in trials if d), None)
            own = {c: p for c, p in timed.items() if c != shipped}
            if default is None or not own:  # nothing to compare at this M (a sweep stopped early, or all failed)
                continue
            best = min(own, key=own.get)
            rounds: dict = {}
            for r in retimes:
                if r["shape"] == key and r["status"] == "ok" and r["timing"] == args.timing and r["round"] >= 0:
                    rounds.setdefault(Config.from_json(r["config"]), []).append(r["p50"])
            med = {c: statistics.median(v) for c, v in rounds.items()}
            winner = next((s["winner"] for s in selections if s["shape"] == key and s["timing"] == args.timing),
                          None)
            export = Config.from_json(winner) if winner else None
            sweep_ratio = timed[shipped] / own[best] if shipped in timed else None
            inter = None
            if shipped in med and any(c != shipped for c in med):
                inter = med[shipped] / min(v for c, v in med.items() if c != shipped)
            verdict = inter if inter is not None else sweep_ratio
            if verdict is not None:
                verdicts.append(verdict)
                if verdict < 1 - TIE:
                    beyond.append(M)
            rows.append({"M": M, "default_us": timed[default] * 1e3, "shipped_us": timed[shipped] * 1e3 if shipped in timed else None,
                         "flytune_us": own[best] * 1e3, "shipped_over_flytune_sweep": sweep_ratio,
                         "shipped_over_flytune_interleaved": inter, "verdict": verdict,
                         "default_over_flytune": timed[default] / own[best], "evaluations": len(timed),
                         "flytune_config": str(best), "shipped_config": str(shipped) if shipped else None,
                         "export_config": str(export) if export else None,
                         "export_is": _which(export, {"shipped": shipped, "flytune": best, "default": default})})
        if not rows:
            line = f"{model}: no {dtype} {args.timing}-timed trials of it in {Path(args.from_store).name}"
            summary.append(line)
            print(line, flush=True)
            continue
        geo = _geomean(verdicts)
        payload["models"][model] = {"shape": dims, "rows": rows, "geomean_shipped_over_flytune": geo,
                                    "beyond_tie": beyond, "max_evaluations": max(r["evaluations"] for r in rows)}
        md += [f"## {model}: E={dims['E']} N={dims['N']} K={dims['K']} top-{dims['topk']}", "",
               "| M | default | SGLang shipped | flytune | shipped / flytune (sweep) | interleaved | default / "
               "flytune | export | flytune config | shipped config |", "|---|---|---|---|---|---|---|---|---|---|"]
        ratio = lambda v: "-" if v is None else f"{v:.3f}x"  # noqa: E731
        for r in rows:
            shipped_cell = "-" if r["shipped_us"] is None else f"{r['shipped_us']:.1f}"
            md.append(f"| {r['M']} | {r['default_us']:.1f} | {shipped_cell} | {r['flytune_us']:.1f} | "
                      f"{ratio(r['shipped_over_flytune_sweep'])} | {ratio(r['shipped_over_flytune_interleaved'])} | "
                      f"{r['default_over_flytune']:.2f}x | {r['export_is'] if r['export_is'] != 'another' else '`' + r['export_config'] + '`'} | "
                      f"`{r['flytune_config']}` | `{r['shipped_config'] or '-'}` |")
        line = (f"{model}: geomean shipped / flytune {geo:.3f}x over {len(verdicts)} batch sizes; " if geo else
                f"{model}: no shipped file for {device} (nothing to compare against); ")
        if geo:
            line += (f"slower than shipped beyond {TIE:.0%} at M={beyond}; " if beyond else
                     "none slower than shipped beyond the tie band; ")
        line += (f"at most {payload['models'][model]['max_evaluations']} evaluations per batch size "
                  f"({payload['models'][model]['max_evaluations'] / SGLANG_EVALS:.1%} of SGLang's {SGLANG_EVALS})")
        summary.append(line)
        md += ["", line, ""]
        print(line, flush=True)
    md += ["## Summary", ""] + [f"- {x}" for x in summary] + [""]
    write(args.name, payload, "\n".join(md), results_dir(args.out, device=device))
    return 0


def main(argv=None) -> int:
    args = _args(argv)
    if args.from_store:
        return _report_from_store(args)
    if not args.smoke:
        need_gpu("sglang_moe")
    from flytune_nb.artifacts.export import export
    from flytune_nb.core.device import current_device
    from flytune_nb.core.registry import get_kernel
    from flytune_nb.engine.store import Store
    from flytune_nb.engine.sweep import Sweep
    from flytune_nb.measure.timer import make_timer
    from flytune_nb.measure.trial import evaluate

    t_start = time.perf_counter()
    dev = current_device()
    models = SMOKE if args.smoke else {k: MODELS[k] for k in args.models.split(",")}
    ms = args.m or ([1, 5] if args.smoke else list(BATCH_SIZES))
    dtype = args.dtype or ("fp16" if args.smoke else "bf16")
    strategy = _strategy(args.strategy)
    spec = get_kernel("sglang_fused_moe")
    out = results_dir(args.out)
    store = Store(out / f"{args.name}.db")
    graph = args.timing == "graph"
    # on the interpreter (the smoke) only the machinery is checked: 2 samples of 2 calls, 5 launches a timing instead
    # of 31 at the CPU timer's defaults; an interpreted fused-MoE launch of the smoke's shapes costs ~0.3 s
    cpu_timer = {"reps": 2, "inner": 2}
    timer = make_timer(dev, graph=graph, **cpu_timer) if not dev.is_gpu else make_timer(
        dev, rep_ms=args.rep_ms, warmup_ms=5.0, graph=graph)
    payload = {"env": environment(), "sglang": spec.extra["sglang_version"], "path": spec.extra["path"],
               "strategy": strategy, "budget": args.budget, "dtype": dtype, "timing": args.timing, "models": {}}
    md = [f"# SGLang's fused-MoE kernel: flytune's search vs SGLang's shipped configs vs its default ({dtype})", "",
          f"{dev.name}, SGLang {spec.extra['sglang_version']} (its kernel via the `{spec.extra['path']}` path), "
          f"Triton {payload['env']['triton']}, torch {payload['env']['torch']}, {payload['env']['date']}. Search: "
          f"{strategy}, at most {args.budget} evaluations per batch size (SGLang's script: {SGLANG_EVALS}), "
          f"default and shipped entry first. Side by side: each config re-timed {args.rounds}x alternating, "
          f"fastest median kept (us), timed {TIMED[args.timing]}. flytune = the search's best without the shipped "
          f"entry; export = what `flytune export` writes (the selection stage's pick: the default unless a contender, "
          f"the shipped entry included, beat it beyond the tie band); "
          f"tie band {TIE:.0%}.",
          ""]
    summary = []
    for model, dims in models.items():
        t0 = time.perf_counter()
        grid = f"M={','.join(map(str, ms))} " + " ".join(f"{k}={v}" for k, v in dims.items())
        results = Sweep("sglang_fused_moe", grid, [dtype], db=store, strategy=strategy, budget=args.budget,
                        baselines=(), timer={"rep_ms": args.rep_ms} if dev.is_gpu else cpu_timer,
                        timing=args.timing, isolate=not args.smoke).run()
        sweep_s = time.perf_counter() - t0
        rows, ratios, beyond, evals, ex_ratios, ex_beyond = [], [], [], [], [], []
        for r in results:
            shape, shipped = r.shape, r.named.get(SHIPPED)
            if shipped is None:  # a shipped entry equal to SGLang's default is not a named config of its own
                found = spec.extra["shipped_entry"](shape, dev, dtype=dtype)
                shipped = r.default if found and spec.canonical(found[0]) == r.default else None
            own = [t for t in r.trials if t.ok and t.fidelity == "full" and t.config != shipped]
            best = min(own, key=lambda t: t.p50).config if own else r.default
            exported = r.pick.config if r.pick else None  # what `flytune export` writes: the selection's winner
            picks = {"default": r.default, "shipped": shipped, "flytune": best}
            if exported is not None and exported not in picks.values():
                picks["export"] = exported
            timed = {k: [] for k, c in picks.items() if c is not None}
            for _ in range(max(1, args.rounds)):  # interleaved, so a slow spell hits all of them alike
                for k in timed:
                    timed[k].append(evaluate(spec, shape, dtype, picks[k], dev, timer))
            t = {k: _fastest(v) for k, v in timed.items()}
            f, s, d = t["flytune"], t.get("shipped"), t["default"]
            # the export is one of the configs timed above (the shipped entry where nothing beat it in the sweep)
            e = t.get("export") or next((t[k] for k, c in picks.items() if c == exported and k in t), None)
            vs_shipped = s.p50 / f.p50 if s is not None and s.ok and f.ok else None
            vs_default = d.p50 / f.p50 if d.ok and f.ok else None
            ex_vs_shipped = s.p50 / e.p50 if s is not None and s.ok and e is not None and e.ok else None
            n_evals = len({x.config for x in r.trials})
            evals.append(n_evals)
            if vs_shipped is not None:
                ratios.append(vs_shipped)
                if vs_shipped < 1 - TIE:
                    beyond.append(shape["M"])
            if ex_vs_shipped is not None:
                ex_ratios.append(ex_vs_shipped)
                if ex_vs_shipped < 1 - TIE:
                    ex_beyond.append(shape["M"])
            spread = {k: _spread(v) for k, v in timed.items()}
            rows.append({"M": shape["M"], "default_us": d.p50 * 1e3 if d.ok else None,
                         "shipped_us": s.p50 * 1e3 if s is not None and s.ok else None,
                         "flytune_us": f.p50 * 1e3 if f.ok else None, "shipped_over_flytune": vs_shipped,
                         "default_over_flytune": vs_default, "export_us": e.p50 * 1e3 if e is not None and e.ok
                         else None, "shipped_over_export": ex_vs_shipped, "round_spread": spread,
                         "evaluations": n_evals, "flytune_config": str(best),
                         "shipped_config": str(shipped) if shipped else None, "default_config": str(r.default),
                         "export_config": str(exported) if exported else None,
                         "export_is": next((k for k, c in picks.items() if c == exported), None),
                         "wrong": [k for k, x in t.items() if x.status == "wrong"]})
        geo = _geomean(ratios)
        ex_geo = _geomean(ex_ratios)
        payload["models"][model] = {"shape": dims, "rows": rows, "geomean_shipped_over_flytune": geo,
                                    "beyond_tie": beyond, "geomean_shipped_over_export": ex_geo,
                                    "export_beyond_tie": ex_beyond, "sweep_s": sweep_s,
                                    "max_evaluations": max(evals), "total_evaluations": sum(evals)}
        md += [f"## {model}: E={dims['E']} N={dims['N']} K={dims['K']} top-{dims['topk']}", "",
               "| M | default | SGLang shipped | flytune | export | shipped / flytune | shipped / export | "
               "default / flytune | spread of rounds (max) | evaluations | flytune config | shipped config |",
               "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for row in rows:
            cell = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
            ratio = lambda v: "-" if v is None else f"{v:.2f}x"  # noqa: E731
            worst = max((v for v in row["round_spread"].values() if v is not None), default=None)
            md.append(f"| {row['M']} | {cell(row['default_us'])} | {cell(row['shipped_us'])} | "
                      f"{cell(row['flytune_us'])} | {cell(row['export_us'])} ({row['export_is'] or '-'}) | "
                      f"{ratio(row['shipped_over_flytune'])} | {ratio(row['shipped_over_export'])} | "
                      f"{ratio(row['default_over_flytune'])} | {'-' if worst is None else f'{worst:.1%}'} | "
                      f"{row['evaluations']} | `{row['flytune_config']}` | `{row['shipped_config'] or '-'}` |")
        line = (f"{model}: geomean shipped / flytune {geo:.3f}x over {len(ratios)} batch sizes" if geo else
                f"{model}: no shipped file for {dev.name} (nothing to compare against)")
        line += (f"; slower than shipped beyond {TIE:.0%} at M={beyond}" if beyond else "; none slower beyond the "
                 "tie band")
        if ex_geo:
            line += (f"; export: geomean shipped / export {ex_geo:.3f}x, " +
                     (f"slower beyond {TIE:.0%} at M={ex_beyond}" if ex_beyond else "none slower beyond the band"))
        line += (f"; at most {max(evals)} evaluations per batch size ({max(evals) / SGLANG_EVALS:.1%} of SGLang's "
                 f"{SGLANG_EVALS}); sweep {sweep_s:.0f} s")
        summary.append(line)
        md += ["", line, ""]
        print(line, flush=True)
        write(args.name, payload, "\n".join(md + ["(partial: written after each model)"]), out)  # kept on a timeout
    written = export(store, out / "sglang_exports", kernel="sglang_fused_moe")
    store.close()
    payload["exports"] = [str(p) for p in written]
    payload["wall_s"] = time.perf_counter() - t_start
    md += ["## Summary", ""] + [f"- {s}" for s in summary] + [
        f"- exported in SGLang's layout: {', '.join(p.name for p in written)} (under sglang_exports/"
        f"sglang_fused_moe/configs/); wall time {payload['wall_s']:.0f} s", ""]
    if dev.backend == "interpreter":
        md.append("(interpreter wall-clock times: they exercise the script, they say nothing about GPU speed)")
    write(args.name, payload, "\n".join(md), out)
    return 0
