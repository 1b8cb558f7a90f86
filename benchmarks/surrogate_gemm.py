"""Does the surrogate find a config within 2% of the best at 10% of a GEMM space's evaluations? (--replay: no GPU)

Compares Optuna's TPE (flytune's surrogate strategy) with random search at the same budget, on matmul spaces of
>= 500 configs: best found / exhaustive best, geomean over seeds, then over shapes. Target: surrogate <= 1.02.

On a GPU: exhaustive sweeps of --kernel (bf16, precompiled, sweep-grade timing, torch.matmul timed beside) over
--shapes into a store, then the replay. Anywhere, no GPU: `--replay SOURCE` replays stored exhaustive sweeps (a
results store, or a fixture such as tests/fixtures/h200_gemm_sweeps.json): every config's measured full-fidelity
p50 stands in for timing it. The result is filed under the device that measured the sweeps.
"""
from __future__ import annotations

import json
from pathlib import Path

from benchmarks.common import environment, need_gpu, parser, results_dir, write
from flytune_nb.analysis.scores import geomean
from flytune_nb.core.config import Config
from flytune_nb.engine.store import Store
from flytune_nb.errors import UsageError
from flytune_nb.measure.trial import Trial
from flytune_nb.strategies import random_search, surrogate

SHAPES = "M=256,1024,4096 N=4096 K=4096"  # 618, 932 and 1126 configs on the H200 when swept
BUDGET_FRACTION, SEEDS = 0.10, 5


class Replay:
    def __init__(self, p50: dict):
        self.p50 = p50

    def __call__(self, config, fidelity="full"):
        p = self.p50[config]
        if p is None:
            return Trial("k", {}, "bf16", config, "compile_error", "replayed failure")
        return Trial("k", {}, "bf16", config, "ok", p20=p, p50=p, p80=p)


def _space_size(kernel: str):
    """The size of each shape's space on this GPU, so a sweep of this run cut short is not mistaken for an
    exhaustive one."""
    from flytune_nb.core.device import current_device
    from flytune_nb.core.registry import get_kernel

    dev, spec = current_device(), get_kernel(kernel)
    return lambda shape, dtype: len(spec.configs(shape, dtype, dev))


def _baseline(df, shape: str, dtype: str) -> float | None:
    """torch eager's p50 stored beside the sweep (torch.matmul for matmul), or None."""
    if df is None or df.empty:
        return None
    hit = df[(df["shape"] == shape) & (df["dtype"] == dtype) & (df["name"] == "torch_eager") & (df["status"] == "ok")]
    return float(hit["p50"].min()) if len(hit) else None


def load(source: str, kernel: str) -> tuple[list, str, str]:
    """Stored sweeps of ``kernel``: ([(shape JSON, dtype, {Config: p50 or None}, torch p50 or None)], the device that
    measured them, where and when). ``source``: a results store, or a JSON fixture of exhaustive sweeps."""
    path = Path(source)
    if path.suffix == ".json":
        try:
            data = json.loads(path.read_text())
            sweeps = [s for s in data["sweeps"] if s["kernel"] == kernel]
            out = [(json.dumps(s["shape"], separators=(",", ":")), s["dtype"],
                    {Config.from_json(c): p for c, p in s["p50_ms"].items()}, None) for s in sweeps]
            device = data["device"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise UsageError(f"{path} is not a fixture of exhaustive sweeps ({type(e).__name__}: {e})") from None
        tool = data.get("toolchain", {})
        return out, device, f"sweeps measured on {device}, {data.get('date', '?')}, triton {tool.get('triton', '?')}"
    store = Store(path, readonly=True)
    try:  # one read of each table
        every, baselines = store.frame(kernel), store.frame(kernel, table="baselines")
    finally:
        store.close()
    if every.empty:
        raise UsageError(f"{path} holds no {kernel} sweeps")
    df = every[every["fidelity"] == "full"]
    out = []
    for (shape, dtype), g in df.groupby(["shape", "dtype"]):
        p50 = {Config.from_json(c): (float(p) if status == "ok" else None)
               for c, status, p in zip(g["config"], g["status"], g["p50"])}
        out.append((shape, dtype, p50, _baseline(baselines, shape, dtype)))
    tool = json.loads(every["toolchain"].iloc[0])
    devices = sorted(set(every["device"]))
    return out, devices[0], (f"sweeps measured on {', '.join(devices)}, {min(every['created'])} to "
                             f"{max(every['created'])}, triton {tool.get('triton', '?')}")


def replay(sweeps: list, seeds: int, fraction: float, size=None) -> dict:
    out, partial = [], []
    for shape, dtype, p50, torch_ms in sweeps:
        ok = [v for v in p50.values() if v is not None]
        if len(p50) < 50 or not ok:
            continue
        if size is not None and len(p50) < size(json.loads(shape), dtype):
            partial.append(f"{shape}: {len(p50)} of {size(json.loads(shape), dtype)} configs")
            continue
        best, budget = min(ok), max(1, round(fraction * len(p50)))
        space = list(p50)
        found = {}
        for name, strat in (("surrogate", surrogate), ("random", random_search)):
            ratios = []
            for seed in range(seeds):
                trials = strat(space, Replay(p50), budget=budget, seed=seed)
                ratios.append(min(t.p50 for t in trials if t.ok) / best)
            found[name] = geomean(ratios)
        out.append({"shape": json.loads(shape), "dtype": dtype, "configs": len(p50), "budget": budget,
                    "best_ms": best, "torch_ms": torch_ms, **found})
    return {"shapes": out, "incomplete_shapes": partial, "geomean_surrogate": geomean(r["surrogate"] for r in out),
            "geomean_random": geomean(r["random"] for r in out), "budget_fraction": fraction, "seeds": seeds}


def main(argv=None):
    ap = parser(__doc__, __file__)
    ap.add_argument("--replay", default=None, metavar="SOURCE",
                    help="a store or JSON fixture holding exhaustive sweeps; skips the GPU sweep")
    ap.add_argument("--kernel", default="matmul", help="the kernel (default: %(default)s)")
    ap.add_argument("--shapes", default=SHAPES, help="the grid swept on the GPU (default: %(default)r)")
    ap.add_argument("--store", default=None, metavar="DB",
                    help="where the GPU sweep goes (default: stores/gemm_sweeps.db in the result folder)")
    ap.add_argument("--gpus", default=None, metavar="0,1",
                    help="spread the GPU sweep's shapes over these GPUs (default: one)")
    ap.add_argument("--seeds", type=int, default=SEEDS, help="seeds per strategy and shape (default %(default)s)")
    ap.add_argument("--budget-fraction", type=float, default=BUDGET_FRACTION,
                    help="evaluations per shape, as a share of its space (default %(default)s)")
    ap.add_argument("--name", default="surrogate_gemm", help="result file name (default: %(default)s)")
    args = ap.parse_args(argv)
    if args.seeds < 1 or not 0 < args.budget_fraction <= 1:
        ap.error("--seeds must be >= 1 and --budget-fraction in (0, 1]")
    source, size = args.replay, None
    if source is None:
        need_gpu("surrogate_gemm (without --replay)")
        from flytune_nb.engine.sweep import Sweep

        source = args.store or str(results_dir(args.out) / "stores" / "gemm_sweeps.db")
        gpus = [int(g) for g in args.gpus.split(",")] if args.gpus else None
        Sweep(args.kernel, args.shapes, ["bf16"], db=source, baselines=("torch_eager",), gpus=gpus,
              timer={"rep_ms": 10.0, "warmup_ms": 2.0}).run()
        size = _space_size(args.kernel)
    sweeps, device, measured_on = load(source, args.kernel)
    r = {"source": Path(source).name, "kernel": args.kernel, "measured_on": measured_on,
         **replay(sweeps, args.seeds, args.budget_fraction, size)}
    if not r["shapes"]:
        raise UsageError(f"{source} holds no complete {args.kernel} sweep of >= 50 configs to replay")
    r["env"] = environment()
    write(args.name, r, markdown(r), out=args.out, device=device)


def markdown(r: dict) -> str:
    env, torch = r["env"], any(s.get("torch_ms") is not None for s in r["shapes"])  # a fixture stores no baseline
    rows = [f"| {' '.join(f'{k}={v}' for k, v in s['shape'].items())} | {s['configs']} | {s['budget']} | "
            f"{s['surrogate']:.3f} | {s['random']:.3f} | {s['best_ms'] * 1e3:.1f} |"
            + (f" {s['torch_ms'] / s['best_ms']:.2f}x |" if s.get("torch_ms") else " |" if torch else "")
            for s in r["shapes"]]
    return "\n".join([
        f"# Surrogate (Optuna TPE) vs random at {r['budget_fraction']:.0%} of the evaluations: {r['kernel']}, "
        f"replayed from `{r['source']}`",
        f"{r['measured_on']}; replayed {env['date']} on {env['device']}, {r['seeds']} seeds"
        + (f", commit {env['commit']}" if env.get("commit") else ""), "",
        "best found / exhaustive best, geomean over seeds (target: surrogate <= 1.02)", "",
        "| shape | configs | budget | surrogate | random | exhaustive best (us) |" + (" torch / best |" if torch else ""),
        "|---|---|---|---|---|---|" + ("---|" if torch else ""), *rows, "",
        f"Geomean over shapes: surrogate {r['geomean_surrogate']:.3f}, random {r['geomean_random']:.3f}.",
        *([f"Left out, their sweep cut short: {'; '.join(r['incomplete_shapes'])}."]
          if r["incomplete_shapes"] else [])])


if __name__ == "__main__":
    main()
