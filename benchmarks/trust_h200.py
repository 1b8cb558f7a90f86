"""Do tuned winners survive a re-run, and does `flytune check` pass on the exports and catch a planted regression?

Re-sweep the committed exports with the selection stage and re-export them with
current source fingerprints; `flytune check` on the result and on a planted 1.3x-slower entry; the same exhaustive
sweep twice in fresh processes (same winner, or one within the tie band); how often events and graph-replay timing
pick different winners (row kernels, GEMM at M <= 256). The stores, the check reports and exports/ (a copy of the
re-swept files, which are also written into flytune_nb/exports/ to be committed) go to --out (default: a temporary
folder); trust_h200.json/.md go to --out too, else to benchmarks/results/<device>/.

GPU (one H200, ~8 min with the default phase budgets; --resweep-s 120 makes it ~6.5 with 3 files re-swept):
    python -m benchmarks trust_h200 --out $OUT
A second check, at least an hour later, on the committed (re-swept) exports (~1-1.5 min):
    python -m benchmarks trust_h200 --phase recheck --out $OUT
CPU smoke test (the interpreter, tiny shapes, ~4-8 min on a loaded 2-core machine; nothing committed is touched):
    python -m benchmarks trust_h200 --tiny --out /tmp/trust_smoke

Phases (--phase, repeatable; default all but recheck) and their default budgets (--resweep-s etc.): resweep (210 s:
files in priority order, each whole -- 18 SGLang batch sizes -- or not at all; the rest stays stale and is listed),
check (90 s with --rep-ms 25), planted (~10 s), repeat (~60 s: rmsnorm and fused_add_rmsnorm, 12 shapes each, a
fresh sweep compared with the resweep's picks), modes (~80 s: row kernels at M=1,16,64,256 N=4096 under graph
replay vs events; matmul M=16,64,256 N=K=4096 on the same 40 sampled configs in both modes).
"""
from __future__ import annotations

import json
import math
import os
import random
import shutil
import statistics
import subprocess
import tempfile
import sys
import time
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

SGLANG_M = "1,2,4,8,16,24,32,48,64,96,128,256,512,1024,1536,2048,3072,4096"
# Files re-swept first: those with FAIL/WARN rows in the last H200 check (fused_add_rmsnorm N=8192 M=1 and N=5120
# M=24, rmsnorm N=5120 M=512), then the ones the repeat and modes phases compare against, then the rest.
PRIORITY = [("fused_add_rmsnorm", 8192, "bf16"), ("fused_add_rmsnorm", 4096, "bf16"), ("rmsnorm", 4096, "bf16"),
            ("rmsnorm", 8192, "bf16"), ("fused_add_rmsnorm", 5120, "bf16"), ("rmsnorm", 5120, "bf16"),
            ("softmax", 4096, "bf16"), ("softmax", 8192, "bf16"), ("rmsnorm", 2048, "bf16"),
            ("fused_add_rmsnorm", 2048, "bf16")]
REPEAT_GRID = "M=1,16,64,256,1024,4096 N=4096,8192"
MODES_M = (1, 16, 64, 256)
GEMM_M = (16, 64, 256)
GEMM_SAMPLE = 40
TIMED_OUT = 124


class Plan:
    """What runs where: the H200 defaults, or tiny interpreter shapes (--tiny)."""

    def __init__(self, tiny: bool, out: Path) -> None:
        self.tiny, self.out = tiny, out
        self.rep = [] if tiny else ["--rep-ms", "25"]
        # the kernels each phase covers (--tiny: one or two, so that every piece runs in minutes on 2 cores)
        self.seed = ("rmsnorm", "fused_add_rmsnorm")
        self.repeat_kernels = ("rmsnorm", "fused_add_rmsnorm")
        self.modes_kernels = ("rmsnorm", "fused_add_rmsnorm", "softmax")
        if tiny:
            self.m, self.repeat_grid, self.modes_m, self.gemm_m, self.gemm_nk = "1,4", "M=1,4 N=256", (1, 4), (4,), 64
            self.dtype_gemm, self.gemm_sample = "fp16", 3  # the interpreter computes bf16 tl.dot wrongly
            self.exports = out / "tiny_exports"
            self.repeat_kernels, self.modes_kernels = ("rmsnorm",), ("fused_add_rmsnorm",)
        else:
            self.m, self.repeat_grid, self.modes_m, self.gemm_m, self.gemm_nk = (
                SGLANG_M, REPEAT_GRID, MODES_M, GEMM_M, 4096)
            self.dtype_gemm, self.gemm_sample = "bf16", GEMM_SAMPLE
            from flytune_nb.core.resources import EXPORTS

            self.exports = Path(EXPORTS)


def cli(args: list[str], timeout: float, log: list) -> subprocess.CompletedProcess:
    """One `flytune` command in a fresh process (what a user runs); its rc, time and output tail are logged."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    t0 = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-m", "flytune_nb.ui.cli", *map(str, args)], env=env, cwd=REPO,
                           capture_output=True, text=True, timeout=max(1.0, timeout))
    except subprocess.TimeoutExpired as e:
        p = subprocess.CompletedProcess(e.cmd, TIMED_OUT, e.stdout or "", e.stderr or "")
        p.stdout = p.stdout.decode() if isinstance(p.stdout, bytes) else p.stdout
        p.stderr = p.stderr.decode() if isinstance(p.stderr, bytes) else p.stderr
    log.append({"cmd": "flytune " + " ".join(map(str, args)), "rc": p.returncode, "s": time.perf_counter() - t0,
                "tail": (p.stdout or "")[-1500:] + (p.stderr or "")[-1500:]})
    return p


@contextmanager
def reading(db: Path):
    """The results store at ``db``, opened read-only (None where a phase wrote none), closed after."""
    from flytune_nb.engine.store import Store

    if not Path(db).exists():
        yield None
        return
    store = Store(db, readonly=True)
    try:
        yield store
    finally:
        store.close()


def records(db: Path, table: str) -> list[dict]:
    """``table``'s rows as stored (Store.records: NULL as None); [] where there is no store."""
    with reading(db) as store:
        return store.records(table) if store is not None else []


def passed(store, key: str, twins: bool = True) -> list[dict]:
    """{"config": its JSON, "p50"} of each full-fidelity trial of ``key`` that passed, in the store's order of them
    (by config); ``twins=False`` leaves out those that share an earlier config's binary and so its numbers."""
    if store is None:
        return []
    twin_of = {} if twins else store.binaries_for(key)
    return [{"config": c.to_json(), "p50": t.p50} for (c, fidelity), t in store.trials_for(key).items()
            if fidelity == "full" and t.ok and (twins or twin_of.get(c, (None, None))[1] is None)]


def fresh(*dbs: Path) -> None:
    """No resuming: a run that found a store of an earlier run in --out would measure nothing."""
    for db in dbs:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)


def seed_tiny_exports(plan: Plan, log: list) -> None:
    """--tiny: something to play the committed exports: interpreter sweeps of the tiny grid, exported, their
    provenance then naming an older source (as the committed H200 files do)."""
    db = plan.out / "seed.db"
    for kernel in plan.seed:
        cli(["sweep", kernel, "--grid", f"M={plan.m} N=256", "--dtype", "bf16", "--db", db, "--quiet",
             "--baselines", "none", "--select-top", "0"], 600, log)
    cli(["export", "--db", db, "--out", plan.exports], 300, log)
    for prov in plan.exports.rglob("provenance.json"):
        data = json.loads(prov.read_text())
        for entries in data.values():
            for e in entries.values():
                e["source"] = "0000000000000000"
        prov.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


# GEMM spaces are 100-2200 configs a shape on the H200 (matmul 4096^3: 2210): these files are re-swept as the
# workbench's GEMM sweeps run, by the surrogate with a budget, not exhaustively.
SEARCH = {"matmul": ["--strategy", "surrogate", "--budget", "24"],
          "fused_moe": ["--strategy", "surrogate", "--budget", "16"]}


def targets(plan: Plan, kernels=None) -> list[dict]:
    """The stale files to re-sweep, in priority order, grouped into one sweep each where they share a kernel, dtype,
    batch sizes and every axis but N (one process per group: its start, imports and pools are paid once)."""
    from flytune_nb.artifacts.gate import gather
    from flytune_nb.core.device import current_device

    files = [f for f in gather(plan.exports, current_device().name) if not f.error and f.stale
             and (not kernels or f.kernel in kernels)]
    order = []
    for kernel, n, dtype in PRIORITY:
        order += [f for f in files if f.kernel == kernel and f.dtype == dtype and f.rest.get("N") == n
                  and f not in order]
    order += [f for f in files if f not in order]  # the rest: fp16, matmul, fused_moe
    groups: dict = {}
    for f in order:
        ms = tuple(sorted(int(m) for m in f.prov if m.isdigit()))
        others = tuple((a, v) for a, v in f.rest.items() if a != "N")
        g = groups.setdefault((f.kernel, f.dtype, ms, others), {"kernel": f.kernel, "dtype": f.dtype, "M": ms,
                                                                 "others": dict(others), "N": [], "names": []})
        g["N"].append(f.rest.get("N"))
        g["names"].append(f"{f.kernel} {' '.join(f'{a}={v}' for a, v in f.rest.items())} {f.dtype}")
    return list(groups.values())


def phase_resweep(plan: Plan, budget: float, log: list, kernels=None) -> dict:
    db, done, skipped, per_file = plan.out / "resweep.db", [], [], []
    fresh(db)
    t0 = time.perf_counter()
    for g in targets(plan, kernels):
        left = budget - (time.perf_counter() - t0)
        est = len(g["names"]) * (statistics.median(per_file) if per_file else 30.0)
        if left < est * 0.9:
            skipped += g["names"]
            continue
        axes = [f"N={','.join(map(str, g['N']))}"] if g["N"][0] is not None else []
        grid = " ".join([f"M={','.join(map(str, g['M']))}", *axes, *(f"{a}={v}" for a, v in g["others"].items())])
        t1 = time.perf_counter()
        p = cli(["sweep", g["kernel"], "--grid", grid, "--dtype", g["dtype"], "--db", db, "--baselines", "none",
                 "--quiet", *SEARCH.get(g["kernel"], []), *plan.rep], left + 60, log)
        per_file.append((time.perf_counter() - t1) / len(g["names"]))
        if p.returncode != 0:
            skipped += [f"{n} (sweep rc {p.returncode})" for n in g["names"]]
            continue
        e = cli(["export", "--db", db, "--out", plan.exports, "--kernel", g["kernel"]], 120, log)
        (done if e.returncode == 0 else skipped).extend(
            g["names"] if e.returncode == 0 else [f"{n} (export failed)" for n in g["names"]])
    # the re-swept files, to commit: copied out of the device's checkout
    copied = []
    for f in plan.exports.rglob("*.json"):
        rel = f.relative_to(plan.exports)
        dest = plan.out / "exports" / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, dest)
        copied.append(str(rel))
    sels = records(db, "selections")
    trials = records(db, "trials")
    # twins: None for a store with no trials (an SQL SUM over no rows), as the report prints it
    counts = {"n": len(trials), "twins": sum(t.get("twin_of") is not None for t in trials) if trials else None} \
        if db.exists() else {}
    return {"files_reswept": done, "still_stale": skipped, "seconds": time.perf_counter() - t0,
            "per_file_s": per_file, "selections": len(sels),
            "default_kept": sum(s["chose_default"] for s in sels),
            "median_band": statistics.median([s["band"] for s in sels if s["band"] is not None] or [math.nan]),
            "extended": sum((s["repeats"] or 0) > 5 for s in sels), "trials": counts,
            "copied_exports": len(copied)}


def phase_check(plan: Plan, budget: float, log: list, name: str = "check1") -> dict:
    js, md = plan.out / f"{name}.json", plan.out / f"{name}.md"
    p = cli(["check", plan.exports, "--json", js, "--md", md, "--budget-s", budget, "--quiet", *plan.rep],
            budget + 120, log)
    out = {"rc": p.returncode, "summary": [l for l in p.stdout.splitlines() if "configs checked" in l]}
    if js.exists():
        rs = json.loads(js.read_text())
        timed = [r for r in rs if r["status"] != "SKIP"]
        vs_then = sorted(r["vs_then"] for r in timed if r["vs_then"])
        vs_default = sorted(r["vs_default"] for r in timed if r["vs_default"])
        q = lambda xs, p: xs[min(len(xs) - 1, int(p * len(xs)))] if xs else None  # noqa: E731
        out.update({
            "rows": len(rs), "fail": sum(r["status"] == "FAIL" for r in rs),
            "warn": sum(r["status"] == "WARN" for r in rs), "skip": len(rs) - len(timed),
            "stale": sum(r["stale"] for r in rs),
            "now_over_exported": {p: q(vs_then, p) for p in (0.05, 0.5, 0.95, 1.0)},
            "exported_over_default": {p: q(vs_default, p) for p in (0.05, 0.5, 0.95, 1.0)},
            # the target: not slower than the heuristic default beyond the entry's own tie band (the band its
            # selection measured, recorded in provenance; 2% where it has none) when re-timed
            "within_band_of_default": _within_band(timed),
            "worst": sorted(timed, key=lambda r: -(r["vs_default"] or 0))[:5]})
    return out


def _within_band(rows: list) -> float | None:
    """Share of re-timed rows whose config is not slower than the heuristic default beyond its entry's tie band
    (check re-times, interleaved, every row beyond it before reporting)."""
    judged = [r for r in rows if r.get("vs_default")]
    ok = sum(r["vs_default"] <= 1 + max(0.02, r.get("band") or 0.0) for r in judged)
    return ok / len(judged) if judged else None


def phase_planted(plan: Plan, log: list) -> dict:
    """A committed entry swapped for a config >= 1.3x slower (from the resweep's own timings): check must exit 1."""
    db = plan.out / "resweep.db"
    planted = plan.out / "planted"
    shutil.rmtree(planted, ignore_errors=True)
    best = None
    with reading(db) as store:
        for prov_path in sorted(plan.exports.rglob("provenance.json")):
            for fname, entries in json.loads(prov_path.read_text()).items():
                for m, e in entries.items():
                    if e.get("selection") is None or not e.get("best_p50_ms"):
                        continue  # only a re-swept entry has its alternatives in the store
                    slower = [r for r in passed(store, e["key"], twins=False) if r["p50"] >= 1.3 * e["best_p50_ms"]]
                    if slower and (best is None or e["best_p50_ms"] > best[3]["best_p50_ms"]):  # the longest kernel:
                        pick = min(slower, key=lambda r: r["p50"])  # clearest of the 1 us noise floor
                        best = (prov_path.parent, fname, m, e, pick)
    if best is None:
        return {"rc": None, "error": "no re-swept entry with a config >= 1.3x slower in the store"}
    folder, fname, m, e, pick = best
    dest = planted / folder.relative_to(plan.exports)
    shutil.copytree(folder, dest)
    table = json.loads((dest / fname).read_text())
    table[m] = json.loads(pick["config"])
    (dest / fname).write_text(json.dumps(table, indent=4) + "\n")
    js = plan.out / "planted_check.json"
    p = cli(["check", planted, "--file", fname, "--json", js, "--quiet", *plan.rep], 300, log)
    rs = json.loads(js.read_text()) if js.exists() else []
    row = next((r for r in rs if str(r.get("batch")) == m), None)
    return {"rc": p.returncode, "file": fname, "M": m, "exported": e["best_p50_ms"], "planted_p50": pick["p50"],
            "planted_over_exported": pick["p50"] / e["best_p50_ms"], "row": row, "passed": p.returncode == 1}


def _arbitrate(kernel: str, shape: dict, dtype: str, a, b, rounds: int = 5) -> float:
    """median over interleaved rounds of t(a) / t(b), each a fresh trial (this process, the same timer as sweeps)."""
    from flytune_nb.core.device import current_device
    from flytune_nb.core.registry import get_kernel
    from flytune_nb.measure.timer import make_timer
    from flytune_nb.measure.trial import evaluate

    spec, dev = get_kernel(kernel), current_device()
    timer = make_timer(dev, rep_ms=25)
    ratios = []
    for i in range(rounds):
        pair = (a, b) if i % 2 == 0 else (b, a)
        t = {c: evaluate(spec, shape, dtype, c, dev, timer) for c in pair}
        if t[a].ok and t[b].ok:
            ratios.append(t[a].p50 / t[b].p50)
    return statistics.median(ratios) if ratios else math.nan


def _picks(db: Path) -> dict:
    """(kernel, shape json, dtype) -> {"key", "winner", "band", "best"} from a store: the selection's pick and the
    search's fastest median (what the winner was before the selection stage)."""
    out = {}
    with reading(db) as store:
        for s in store.records("selections") if store is not None else []:
            best = min(passed(store, s["key"]), key=lambda r: r["p50"], default=None)
            out[(s["kernel"], s["shape"], s["dtype"])] = {
                **{c: s[c] for c in ("key", "kernel", "shape", "dtype", "winner", "band")},
                "best": best["config"] if best else None}
    return out


def phase_repeat(plan: Plan, budget: float, log: list) -> dict:
    """The same exhaustive sweep in fresh processes: run A is the resweep's (same keys), or a fresh sweep where it
    has none; run B a fresh sweep into its own store. Same winner, or the two within the larger of their bands when
    timed against each other (a third, interleaved measurement). The search's plain fastest median is scored the
    same way, as the before."""
    from flytune_nb.core.config import Config

    t0 = time.perf_counter()
    a_db, b_db = plan.out / "resweep.db", plan.out / "repeat_b.db"
    fresh(b_db, *(plan.out / f"repeat_a_{k}.db" for k in plan.repeat_kernels))
    report = {}
    for kernel in plan.repeat_kernels:
        left = budget - (time.perf_counter() - t0)
        if left < 10:
            report[kernel] = {"skipped": "time budget"}
            continue
        cli(["sweep", kernel, "--grid", plan.repeat_grid, "--dtype", "bf16", "--db", b_db, "--baselines", "none",
             "--quiet", *plan.rep], left + 60, log)
        b = {k: v for k, v in _picks(b_db).items() if k[0] == kernel}
        a = {k: v for k, v in _picks(a_db).items() if k[0] == kernel and k in b and v["key"] == b[k]["key"]}
        if len(a) < len(b):  # the resweep did not cover these shapes (or its key differs): a fresh run A
            a_db2 = plan.out / f"repeat_a_{kernel}.db"
            cli(["sweep", kernel, "--grid", plan.repeat_grid, "--dtype", "bf16", "--db", a_db2, "--baselines",
                 "none", "--quiet", *plan.rep], max(10, budget - (time.perf_counter() - t0)) + 60, log)
            a = {k: v for k, v in _picks(a_db2).items() if k[0] == kernel}
        shapes = []
        for k in sorted(set(a) & set(b)):
            _, shape, dtype = k
            row = {"shape": json.loads(shape), "same": a[k]["winner"] == b[k]["winner"],
                   "naive_same": a[k]["best"] == b[k]["best"]}
            band = max(a[k]["band"] or 0.02, b[k]["band"] or 0.02)
            for tag, ca, cb in (("", a[k]["winner"], b[k]["winner"]), ("naive_", a[k]["best"], b[k]["best"])):
                if ca != cb and ca and cb:
                    r = _arbitrate(kernel, json.loads(shape), dtype, Config.from_json(ca), Config.from_json(cb))
                    row[f"{tag}ratio"] = r
                    row[f"{tag}within"] = abs(r - 1) <= band
                else:
                    row[f"{tag}within"] = True
            row["band"] = band
            shapes.append(row)
        n = max(1, len(shapes))
        report[kernel] = {"shapes": len(shapes), "same": sum(r["same"] for r in shapes),
                          "same_or_within_band": sum(r["within"] for r in shapes) / n,
                          "naive_same": sum(r["naive_same"] for r in shapes),
                          "naive_same_or_within_band": sum(r["naive_within"] for r in shapes) / n, "rows": shapes}
    report["seconds"] = time.perf_counter() - t0
    return report


def phase_modes(plan: Plan, budget: float, log: list) -> dict:
    """Events vs graph-replay winners: row kernels (graph sweeps against the resweep's events picks of the same
    shapes, or a fresh events sweep where it has none), and matmul on one sampled config list in both modes."""
    from flytune_nb.core.device import current_device
    from flytune_nb.core.registry import get_kernel
    from flytune_nb.engine.sweep import Sweep

    t0 = time.perf_counter()
    g_db, e_db = plan.out / "modes_graph.db", plan.out / "modes_events.db"
    fresh(g_db, e_db, plan.out / "modes_gemm.db")
    grid = f"M={','.join(map(str, plan.modes_m))} N={256 if plan.tiny else 4096}"
    out = {"row": [], "gemm": []}
    for kernel in plan.modes_kernels:
        left = budget - (time.perf_counter() - t0)
        if left < 10:
            out.setdefault("skipped", []).append(kernel)
            continue
        cli(["sweep", kernel, "--grid", grid, "--dtype", "bf16", "--db", g_db, "--timing", "graph", "--baselines",
             "none", "--quiet", *plan.rep], left + 60, log)
        ev = {**_picks(plan.out / "resweep.db"), **_picks(e_db)}
        graph = {k: v for k, v in _picks(g_db).items() if k[0] == kernel}
        if any(k not in ev for k in graph):
            cli(["sweep", kernel, "--grid", grid, "--dtype", "bf16", "--db", e_db, "--baselines", "none", "--quiet",
                 *plan.rep], max(10, budget - (time.perf_counter() - t0)) + 60, log)
            ev = {**_picks(plan.out / "resweep.db"), **_picks(e_db)}
        for k, g in graph.items():
            e = ev.get(k)
            if e is None:
                continue
            # what picking under events costs when serving under graphs: both configs' graph-mode search medians
            with reading(g_db) as store:
                times = {r["config"]: r["p50"] for r in passed(store, g["key"])}
            loss = times.get(e["winner"], math.nan) / times.get(g["winner"], math.nan)
            out["row"].append({"kernel": kernel, "shape": json.loads(k[1]), "differ": e["winner"] != g["winner"],
                               "events_pick_graph_time_over_graph_pick": loss})
    dev = current_device()
    spec = get_kernel("matmul")
    for m in plan.gemm_m:
        if budget - (time.perf_counter() - t0) < 15:
            out.setdefault("skipped", []).append(f"matmul M={m}")
            continue
        shape = {"M": m, "N": plan.gemm_nk, "K": plan.gemm_nk}
        space = spec.configs(shape, plan.dtype_gemm, dev)
        sample = random.Random(0).sample(space, min(plan.gemm_sample, len(space)))
        picks = {}
        for mode in ("events", "graph"):
            [r] = Sweep("matmul", [shape], [plan.dtype_gemm], db=plan.out / "modes_gemm.db", configs=sample,
                        timing=mode, baselines=(), timer={} if plan.tiny else {"rep_ms": 25}).run()
            picks[mode] = r
        e, g = picks["events"].pick, picks["graph"].pick
        gt = {t.config: t.p50 for t in picks["graph"].trials if t.ok}
        out["gemm"].append({"shape": shape, "differ": e.config != g.config, "configs": len(sample) + 1,
                            "events_pick_graph_time_over_graph_pick": gt.get(e.config, math.nan) / gt[g.config]})
    for part in ("row", "gemm"):
        xs = out[part]
        out[f"{part}_differ"] = f"{sum(x['differ'] for x in xs)}/{len(xs)}"
    out["seconds"] = time.perf_counter() - t0
    return out


def markdown(res: dict) -> str:
    env = res["env"]
    lines = [f"# Results you can trust ({'tiny, interpreter' if res['tiny'] else 'H200'})",
             f"{env['device']} ({env['arch']}), {env['date']}, torch {env['torch']}, triton {env['triton']}", ""]
    if "resweep" in res:
        r = res["resweep"]
        lines += ["## Re-sweep with the selection stage",
                  f"{len(r['files_reswept'])} files re-swept and exported in {r['seconds']:.0f} s "
                  f"(per file {', '.join(f'{x:.0f}' for x in r['per_file_s'])} s); still stale: "
                  f"{', '.join(r['still_stale']) or 'none'}.",
                  f"{r['selections']} shapes decided: default kept in {r['default_kept']}, median band "
                  f"{r['median_band']:.1%}, {r['extended']} needed the extra rounds; trials "
                  f"{r['trials'].get('n')} of which {r['trials'].get('twins')} identical binaries (not timed).", ""]
    for name in ("check1", "recheck"):
        if name in res:
            c = res[name]
            lines += [f"## flytune check ({name})", f"exit {c['rc']}; {' '.join(c['summary'])}",
                      f"now/exported quantiles {c.get('now_over_exported')}; exported/default quantiles "
                      f"{c.get('exported_over_default')}; within the tie band of the default: "
                      f"{math.nan if c.get('within_band_of_default') is None else c['within_band_of_default']:.1%}", ""]
    if "planted" in res:
        p = res["planted"]
        lines += ["## Planted regression", f"exit {p.get('rc')} (must be 1): {p.get('file')} M={p.get('M')} swapped "
                  f"for a config {p.get('planted_over_exported', math.nan):.2f}x the exported latency; row: "
                  f"{(p.get('row') or {}).get('status')} {(p.get('row') or {}).get('reason')}", ""]
    if "repeat" in res:
        lines += ["## The same sweep twice, fresh processes", "| kernel | shapes | same winner | same or within band "
                  "| before (fastest median): same | within band |", "|---|---|---|---|---|---|"]
        for k, v in res["repeat"].items():
            if isinstance(v, dict) and "shapes" in v:
                lines.append(f"| {k} | {v['shapes']} | {v['same']} | {v['same_or_within_band']:.0%} | "
                             f"{v['naive_same']} | {v['naive_same_or_within_band']:.0%} |")
        lines.append("")
    if "modes" in res:
        m = res["modes"]
        loss = [x["events_pick_graph_time_over_graph_pick"] for x in m["row"] + m["gemm"]
                if math.isfinite(x["events_pick_graph_time_over_graph_pick"])]
        lines += ["## Events vs graph replay", f"different winners: row kernels {m['row_differ']}, GEMM (M <= 256) "
                  f"{m['gemm_differ']}; the events pick under graph replay, median "
                  f"{statistics.median(loss) if loss else math.nan:.3f}x / worst {max(loss, default=math.nan):.3f}x "
                  f"the graph pick", ""]
    lines += ["## Commands", *[f"- `{c['cmd']}`: rc {c['rc']}, {c['s']:.0f} s" for c in res["log"]]]
    return "\n".join(lines)


def main(argv=None) -> int:
    from benchmarks.common import environment, parser, write

    ap = parser(__doc__, __file__)
    ap.add_argument("--tiny", action="store_true", help="CPU smoke test: interpreter, tiny shapes")
    ap.add_argument("--phase", action="append", default=None,
                    choices=("resweep", "check", "planted", "repeat", "modes", "recheck"))
    ap.add_argument("--resweep-s", type=float, default=210.0)
    ap.add_argument("--resweep-kernels", default="", help="comma-separated: re-sweep only these kernels' stale files")
    ap.add_argument("--check-s", type=float, default=90.0)
    ap.add_argument("--repeat-s", type=float, default=70.0)
    ap.add_argument("--modes-s", type=float, default=80.0)
    ap.add_argument("--modes-kernels", default=None,
                    help="comma-separated row kernels the modes phase compares (none: only its GEMM part)")
    args = ap.parse_args(argv)
    out = Path(args.out).resolve() if args.out else Path(tempfile.mkdtemp(prefix="trust-"))
    out.mkdir(parents=True, exist_ok=True)
    from flytune_nb.core.device import current_device

    plan = Plan(args.tiny, out)
    if args.modes_kernels is not None:
        plan.modes_kernels = tuple(k for k in args.modes_kernels.split(",") if k and k != "none")
    if args.tiny:  # the interpreter is ~1000x slower: budgets would skip what the smoke test is for
        args.resweep_s = args.check_s = args.repeat_s = args.modes_s = 3600.0
    if not args.tiny and not current_device().is_gpu:
        print("no GPU here: run with --tiny for the CPU smoke test", file=sys.stderr)
        return 2
    phases = args.phase or ["resweep", "check", "planted", "repeat", "modes"]
    log: list = []
    res = {"env": environment(), "tiny": args.tiny, "phases": phases, "log": log}
    t0 = time.perf_counter()
    if args.tiny and not plan.exports.exists() and set(phases) & {"resweep", "check", "planted", "recheck"}:
        seed_tiny_exports(plan, log)
    if "resweep" in phases:
        res["resweep"] = phase_resweep(plan, args.resweep_s, log,
                                       [k for k in args.resweep_kernels.split(",") if k] or None)
    if "check" in phases:
        res["check1"] = phase_check(plan, args.check_s, log)
    if "planted" in phases:
        res["planted"] = phase_planted(plan, log)
    if "repeat" in phases:
        res["repeat"] = phase_repeat(plan, args.repeat_s, log)
    if "modes" in phases:
        res["modes"] = phase_modes(plan, args.modes_s, log)
    if "recheck" in phases:
        res["recheck"] = phase_check(plan, max(args.check_s, 150.0), log, name="recheck")
    res["seconds"] = time.perf_counter() - t0
    name = "trust_recheck" if phases == ["recheck"] else "trust_h200"
    write(name + ("_tiny" if args.tiny else ""), res, markdown(res), out=args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
