"""The surrogate target of issue #3: on a GEMM-sized space (>= 500 configs), Optuna's TPE finds a config within 2% of
the exhaustive best using <= 10% of the evaluations, geomean over shapes.

On a GPU: exhaustive sweeps of matmul (bf16, precompiled, sweep-grade timing) over SHAPES into a store, then the
replay. Anywhere: `python surrogate_gemm.py --replay DB [--kernel matmul]` replays a stored exhaustive sweep — every
config's measured full-fidelity p50 stands in for timing it — for surrogate and random search at the same budget,
5 seeds each, and writes JSON + markdown."""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from common import environment, out_dir, write
from flytune_nb.analysis.scores import geomean
from flytune_nb.core.config import Config
from flytune_nb.engine.store import Store
from flytune_nb.strategies import random_search, surrogate
from flytune_nb.measure.trial import Trial

SHAPES = os.environ.get("SHAPES", "M=256,1024,4096 N=4096 K=4096")  # 618, 932 and 1126 configs on the H200
BUDGET_FRACTION, SEEDS = 0.10, int(os.environ.get("SEEDS", 5))


class Replay:
    def __init__(self, p50: dict):
        self.p50 = p50

    def __call__(self, config, fidelity="full"):
        p = self.p50[config]
        if p is None:
            return Trial("k", {}, "bf16", config, "compile_error", "replayed failure")
        return Trial("k", {}, "bf16", config, "ok", p20=p, p50=p, p80=p)


def _space_size(kernel: str):
    """On a GPU, the size of each shape's space there, so a sweep cut short by its time limit is not mistaken for an
    exhaustive one; None elsewhere (a replay of a finished store)."""
    from flytune_nb.core.device import current_device
    from flytune_nb.core.registry import get_kernel

    dev = current_device()
    if not dev.is_gpu:
        return None
    spec = get_kernel(kernel)
    return lambda shape, dtype: len(spec.configs(shape, dtype, dev))


def replay(db: str, kernel: str) -> dict:
    store = Store(db, readonly=True)
    try:  # one read of each table
        every, baselines = store.frame(kernel), store.frame(kernel, table="baselines")
    finally:
        store.close()
    df = every[every["fidelity"] == "full"]
    size = _space_size(kernel)
    out, partial = [], []
    for (shape, dtype), g in df.groupby(["shape", "dtype"]):
        p50 = {}
        for cfg, status, p in zip(g["config"], g["status"], g["p50"]):
            p50[Config.from_json(cfg)] = float(p) if status == "ok" else None
        ok = [v for v in p50.values() if v is not None]
        if len(p50) < 50 or not ok:
            continue
        if size is not None and len(p50) < size(json.loads(shape), dtype):
            partial.append(f"{shape}: {len(p50)} of {size(json.loads(shape), dtype)} configs")
            continue
        best, budget = min(ok), max(1, round(BUDGET_FRACTION * len(p50)))
        space = list(p50)
        found = {}
        for name, strat in (("surrogate", surrogate), ("random", random_search)):
            ratios = []
            for seed in range(SEEDS):
                trials = strat(space, Replay(p50), budget=budget, seed=seed)
                ratios.append(min(t.p50 for t in trials if t.ok) / best)
            found[name] = geomean(ratios)
        torch_ms = _baseline(baselines, shape, dtype)
        out.append({"shape": json.loads(shape), "dtype": dtype, "configs": len(p50), "budget": budget,
                    "best_ms": best, "torch_ms": torch_ms, **found})
    return {"db": str(db), "kernel": kernel, "shapes": out, "incomplete_shapes": partial,
            "measured_on": measured_on(every),
            "geomean_surrogate": geomean(r["surrogate"] for r in out),
            "geomean_random": geomean(r["random"] for r in out), "budget_fraction": BUDGET_FRACTION, "seeds": SEEDS}


def _baseline(df, shape: str, dtype: str) -> float | None:
    """torch eager's p50 stored beside the sweep (torch.matmul for matmul), or None."""
    if df.empty:
        return None
    hit = df[(df["shape"] == shape) & (df["dtype"] == dtype) & (df["name"] == "torch_eager") & (df["status"] == "ok")]
    return float(hit["p50"].min()) if len(hit) else None


def measured_on(df) -> str:
    """For a replay: where and when the stored sweeps were measured (the replay itself runs anywhere)."""
    tool = json.loads(df["toolchain"].iloc[0]) if len(df) else {}
    return (f"sweeps measured on {', '.join(sorted(set(df['device'])))}, {min(df['created'])} to {max(df['created'])}, "
            f"triton {tool.get('triton', '?')}; replayed on the CPU, {SEEDS} seeds") if len(df) else ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--replay", default=None, help="a store holding exhaustive sweeps; skips the GPU sweep")
    ap.add_argument("--kernel", default="matmul")
    args = ap.parse_args()
    db = args.replay
    env = None
    if db is None:
        from flytune_nb.engine.sweep import Sweep

        db = str(out_dir() / "gemm_sweeps.db")
        # GPUS=0,1 spreads the shapes over two GPUs; torch.matmul (cuBLAS) is timed beside, with the same timer
        gpus = [int(g) for g in os.environ["GPUS"].split(",")] if os.environ.get("GPUS") else None
        Sweep(args.kernel, SHAPES, ["bf16"], db=db, baselines=("torch_eager",), gpus=gpus,
              timer={"rep_ms": 10.0, "warmup_ms": 2.0}).run()
        env = environment()
    r = replay(db, args.kernel)
    r["env"] = env
    def vs_torch(s):
        return "" if s.get("torch_ms") is None else f"{s['torch_ms'] / s['best_ms']:.2f}x"

    rows = [f"| {' '.join(f'{k}={v}' for k, v in s['shape'].items())} | {s['configs']} | {s['budget']} | "
            f"{s['surrogate']:.3f} | {s['random']:.3f} | {s['best_ms'] * 1e3:.1f} | {vs_torch(s)} |"
            for s in r["shapes"]]
    md = "\n".join([
        f"# Surrogate (Optuna TPE) vs random at {BUDGET_FRACTION:.0%} of the evaluations: {args.kernel}, replayed "
        f"from `{Path(db).name}`", r["measured_on"] if env is None else
        f"{env['device']}, {env['date']}, triton {env['triton']}", "",
        "best found / exhaustive best, geomean over seeds (target: surrogate <= 1.02)", "",
        "| shape | configs | budget | surrogate | random | exhaustive best (us) | torch / best |",
        "|---|---|---|---|---|---|---|", *rows, "",
        f"Geomean over shapes: surrogate {r['geomean_surrogate']:.3f}, random {r['geomean_random']:.3f}.",
        *([f"Left out, their sweep cut short: {'; '.join(r['incomplete_shapes'])}."] if r["incomplete_shapes"] else [])])
    write(f"surrogate_{args.kernel}", r, md)


if __name__ == "__main__":
    main()
