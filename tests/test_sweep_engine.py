"""The sweep engine: results store, resume, kill -9, fault isolation, scale-out lanes."""
import math
import os
import signal
import sqlite3
import subprocess
import sys
import time

from types import SimpleNamespace

import pytest

from flytune_nb.device import current_device
from flytune_nb.registry import get_kernel
from flytune_nb.events import TrialStarted
from flytune_nb.store import Store, StoreError
from flytune_nb.sweep import Sweep, SweepError
from tests.conftest import PLUGINS


def _count(db, table="trials"):
    with sqlite3.connect(db) as c:
        return c.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]


def test_in_process_sweep_fills_the_store_and_reads_as_a_dataframe(tmp_path):
    db = tmp_path / "r.db"
    results = Sweep("toy", "N=64,100", ["fp32"], db=db, paths=[PLUGINS], isolate=False).run()
    assert [r.shape for r in results] == [{"N": 64}, {"N": 100}]
    df = Store(db).frame("toy")
    assert len(df) == 16 == sum(len(r.trials) for r in results)
    assert set(df["status"]) == {"ok", "wrong", "launch_error"}
    assert sorted(df["N"].unique()) == [64, 100]  # shape axes expanded into columns
    ok = df[df.status == "ok"]
    assert (ok["p50"] > 0).all() and (ok["rel_error"] < 1e-6).all() and ok["key"].nunique() == 2
    failed = df[df.status == "launch_error"]
    assert failed["p50"].isna().all() and failed["reason"].str.contains("simulated out of memory").all()
    with sqlite3.connect(db) as c:
        assert c.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    # the baseline (torch eager) is stored beside the trials
    base = Store(db).frame("toy", table="baselines")
    assert list(base["name"]) == ["torch_eager"] * 2 and (base["p50"] > 0).all()
    assert results[0].baselines["torch_eager"]["status"] == "ok"


def test_rerun_resumes_without_measuring_again(tmp_path):
    db = tmp_path / "r.db"
    Sweep("toy", "N=64", ["fp32"], db=db, paths=[PLUGINS], isolate=False).run()
    events = []
    r = Sweep("toy", "N=64", ["fp32"], db=db, paths=[PLUGINS], isolate=False, listeners=[events.append]).run()
    assert not [e for e in events if isinstance(e, TrialStarted)]  # nothing measured
    assert len(r[0].trials) == 8 and r[0].best.config["MODE"] == 0
    assert _count(db) == 8
    # A larger grid measures only the new shape.
    events.clear()
    Sweep("toy", "N=64,80", ["fp32"], db=db, paths=[PLUGINS], isolate=False, listeners=[events.append]).run()
    assert len([e for e in events if isinstance(e, TrialStarted)]) == 8 and _count(db) == 16


def test_kill_9_loses_nothing_measured(tmp_path):
    db = tmp_path / "k.db"
    env = {**os.environ, "FLYTUNE_EVIL_MODES": "0", "FLYTUNE_EVIL_SLEEPS": ",".join(str(i) for i in range(30, 42)),
           "PYTHONPATH": os.pathsep.join(sys.path)}
    cmd = [sys.executable, "-m", "flytune_nb.cli", "sweep", "evil", "--path", PLUGINS, "--grid", "N=32",
           "--dtype", "fp32", "--db", str(db), "--quiet", "--no-isolate"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            if db.exists() and _count(db) >= 4:
                break
        except sqlite3.OperationalError:  # the file exists before its schema does
            pass
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    at_kill = _count(db)
    assert 4 <= at_kill < 13, at_kill
    events = []
    os.environ.update(FLYTUNE_EVIL_MODES="0", FLYTUNE_EVIL_SLEEPS=env["FLYTUNE_EVIL_SLEEPS"])
    try:
        r = Sweep("evil", "N=32", ["fp32"], db=db, paths=[PLUGINS], isolate=False, listeners=[events.append]).run()
    finally:
        os.environ.pop("FLYTUNE_EVIL_MODES")
        os.environ.pop("FLYTUNE_EVIL_SLEEPS")
    measured = len([e for e in events if isinstance(e, TrialStarted)])
    assert _count(db) == 13 == len(r[0].trials)  # default + 12 sleeps, each exactly once
    assert measured == 13 - at_kill  # only what was not committed (the trial in flight at most) is redone


def test_crashes_hangs_and_raises_are_recorded_and_the_sweep_goes_on(tmp_path):
    db = tmp_path / "e.db"
    results = Sweep("evil", "N=16", ["fp32"], db=db, paths=[PLUGINS], timeout=4.0, baselines=()).run()
    by_mode = {}
    for t in results[0].trials:
        by_mode.setdefault(t.config["MODE"], []).append(t)
    assert [t.status for t in by_mode[0]] == ["ok", "ok"]
    assert by_mode[1][0].status == "launch_error" and "simulated launch failure" in by_mode[1][0].reason
    assert by_mode[2][0].status == "crashed" and "SIGABRT" in by_mode[2][0].reason
    assert by_mode[3][0].status == "timeout" and "4 s" in by_mode[3][0].reason
    assert by_mode[4][0].status == "crashed" and "SIGSEGV" in by_mode[4][0].reason
    assert results[0].best.config["MODE"] == 0
    assert _count(db) == 6  # every trial stored, the fatal ones included
    df = Store(db).frame()
    assert set(df["status"]) == {"ok", "launch_error", "crashed", "timeout"}


def test_two_worker_lanes_share_the_shapes(tmp_path):
    db = tmp_path / "g.db"
    os.environ["FLYTUNE_EVIL_MODES"] = "0"
    try:
        sw = Sweep("evil", "N=8,16,24,32", ["fp32"], db=db, paths=[PLUGINS], gpus=[0, 1], baselines=())
        results = sw.run()
    finally:
        os.environ.pop("FLYTUNE_EVIL_MODES")
    assert [r.shape["N"] for r in results] == [8, 16, 24, 32]
    assert all(r.best is not None for r in results) and _count(db) == 8  # 2 configs x 4 shapes


def test_stop_keeps_what_was_measured_and_run_again_resumes(tmp_path):
    db = tmp_path / "s.db"
    holder = {}

    def stop_after_three(event):
        if isinstance(event, TrialStarted) and event.index == 3:
            holder["sweep"].stop()

    sw = Sweep("toy", "N=64,80", ["fp32"], db=db, paths=[PLUGINS], isolate=False, listeners=[stop_after_three])
    holder["sweep"] = sw
    results = sw.run()
    assert results[0].stopped and len(results) == 1 and _count(db) == 4
    r = Sweep("toy", "N=64,80", ["fp32"], db=db, paths=[PLUGINS], isolate=False).run()
    assert len(r) == 2 and _count(db) == 16


def test_plugin_bugs_and_bad_stores_are_one_clear_error(tmp_path):
    import dataclasses

    from flytune_nb.registry import get_kernel

    toy = get_kernel("toy", [PLUGINS])
    broken = dataclasses.replace(toy, make_inputs=lambda *a: 1 / 0)
    with pytest.raises(SweepError, match="cannot prepare the shape: ZeroDivisionError"):
        Sweep(broken, "N=8", ["fp32"], isolate=False).run()
    bad = tmp_path / "bad.db"
    bad.write_text("this is not sqlite" * 100)
    with pytest.raises(StoreError, match="not a flytune results database"):
        Store(bad)


def test_store_round_trips_inf_and_nan(tmp_path):
    from flytune_nb.config import Config
    from flytune_nb.trial import Trial

    s = Store(tmp_path / "x.db")
    t = Trial("toy", {"N": 4}, "fp32", Config({"BLOCK": 64}), "crashed", "boom")
    s.add(t, key="k1", run_id="r")
    back = s.trials_for("k1")[(t.config, "full")]
    assert back.status == "crashed" and back.p50 == math.inf and math.isnan(back.rel_error)


def test_halving_and_surrogate_through_the_engine_store_and_resume(tmp_path):
    db = tmp_path / "h.db"
    r = Sweep("rmsnorm", "M=2 N=1000", ["fp32"], db=db, strategy="halving", isolate=False, baselines=()).run()[0]
    fid = [t.fidelity for t in r.trials]
    space = get_kernel("rmsnorm").configs({"M": 2, "N": 1000}, "fp32", current_device())
    assert len(space) == 30  # 23 one-row configs + 7 with BLOCK_M=2
    assert fid[0] == "full" and fid.count("quick") == len(space) - 1  # the default, then every other config quickly
    assert fid.count("full") == 1 + math.ceil(fid.count("quick") / 4)  # the default, then the top quarter
    assert r.best.fidelity == "full"
    df = Store(db).frame()
    assert set(df["fidelity"]) == {"quick", "full"} and len(df) == len(r.trials)
    events = []
    again = Sweep("rmsnorm", "M=2 N=1000", ["fp32"], db=db, strategy="halving", isolate=False, baselines=(),
                  listeners=[events.append]).run()[0]
    assert not [e for e in events if isinstance(e, TrialStarted)] and again.best.config == r.best.config
    s = Sweep("rmsnorm", "M=2 N=1000", ["fp32"], db=db, strategy="surrogate", budget=6, isolate=False,
              baselines=()).run()[0]
    assert len(s.trials) == 6 and s.best is not None  # default + 5 proposals, replayed from the store where stored


def test_cli_sweep_writes_the_store_and_resumes(tmp_path, capsys):
    from flytune_nb.cli import main

    db = tmp_path / "cli.db"
    argv = ["sweep", "toy", "--path", PLUGINS, "--grid", "N=64", "--dtype", "fp32", "--db", str(db), "--quiet",
            "--no-isolate"]
    assert main(argv) == 0 and _count(db) == 8
    assert main(argv + ["--strategy", "random", "--budget", "3"]) == 0 and _count(db) == 8  # all stored already
    out = capsys.readouterr().out
    assert "results in" in out and "2/8" in out
    assert main(["sweep", "toy", "--path", PLUGINS, "--grid", "N=64", "--gpus", "0,x"]) == 2
    assert "comma-separated integers" in capsys.readouterr().err
    assert main(["sweep", "toy", "--path", PLUGINS, "--grid", "N=64", "--baselines", "torch_jit"]) == 2


def test_timeouts_are_validated_and_failed_trials_can_be_retried(tmp_path, monkeypatch, capsys):
    from flytune_nb.cli import main

    with pytest.raises(ValueError, match="timeout must be"):
        Sweep("toy", "N=64", ["fp32"], paths=[PLUGINS], timeout=0)
    with pytest.raises(SystemExit) as e:
        main(["sweep", "toy", "--path", PLUGINS, "--grid", "N=64", "--timeout", "nan"])
    assert e.value.code == 2 and "seconds > 0" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["sweep", "toy", "--path", PLUGINS, "--grid", "N=64", "--rep-ms", "-5"])
    assert e.value.code == 2 and "milliseconds > 0" in capsys.readouterr().err
    monkeypatch.setenv("FLYTUNE_EVIL_MODES", "0,3")  # one config that hangs
    db = tmp_path / "r.db"
    r = Sweep("evil", "N=8", ["fp32"], db=db, paths=[PLUGINS], timeout=3, baselines=()).run()[0]
    assert [t.status for t in r.trials if t.config["MODE"] == 3] == ["timeout"]
    events = []
    Sweep("evil", "N=8", ["fp32"], db=db, paths=[PLUGINS], timeout=3, baselines=(),
          listeners=[events.append]).run()
    assert not [e for e in events if isinstance(e, TrialStarted)]  # resume keeps the stored timeout...
    Sweep("evil", "N=8", ["fp32"], db=db, paths=[PLUGINS], timeout=3, baselines=(), retry_failed=True,
          listeners=[events.append]).run()
    retried = [e.config["MODE"] for e in events if isinstance(e, TrialStarted)]
    assert retried == [3]  # ...unless asked to retry: only the failed one runs again


def test_a_foreign_sqlite_file_is_refused_untouched(tmp_path):
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as c:
        c.execute("CREATE TABLE users (name TEXT)")
    before = other.read_bytes()
    with pytest.raises(StoreError, match="not a flytune results store"):
        Store(other)
    assert other.read_bytes() == before
    with pytest.raises(StoreError, match="no results store"):
        Store(tmp_path / "missing.db", readonly=True)
    with pytest.raises(StoreError, match="cannot open"):
        Store(other / "nested.db")


def test_precompile_pool_gets_its_environment_and_a_hang_only_ends_precompilation():
    from flytune_nb.precompile import Precompiler

    ok = {"MODE": 0, "SLEEP_MS": 0, "num_warps": 1, "num_stages": 1}
    hang = {"MODE": 3, "SLEEP_MS": 0, "num_warps": 1, "num_stages": 1}
    plain = Precompiler(workers=1)
    try:
        assert plain.run("evil", (PLUGINS,), {"N": 8}, "fp32", [ok])["ok"] == 1
    finally:
        plain.close()
    marked = Precompiler(workers=1, env={"FLYTUNE_EVIL_POOL_MARK": "fail"})  # the pool's processes see this
    try:
        assert marked.run("evil", (PLUGINS,), {"N": 8}, "fp32", [ok])["failed"] == 1
    finally:
        marked.close()
    stuck = Precompiler(workers=1)
    t0 = time.time()
    with pytest.warns(RuntimeWarning, match="stopped early"):
        res = stuck.run("evil", (PLUGINS,), {"N": 8}, "fp32", [hang], per_config_s=2, startup_s=10)
    stuck.close(kill=True)
    assert res["failed"] == 1 and time.time() - t0 < 30


def test_a_hung_leftover_of_a_finished_shape_costs_the_next_shape_no_precompile():
    """The pool is shared: when a finished shape's hung compile gets the pool killed, the next shape's compile that
    was running in it is started again in a fresh pool, not given up on (and no 'stopped early' warning)."""
    import warnings

    from flytune_nb.precompile import Precompiler

    hang = {"MODE": 3, "SLEEP_MS": 0, "num_warps": 1, "num_stages": 1}
    slow = {"MODE": 0, "SLEEP_MS": 4000, "num_warps": 1, "num_stages": 1}
    pc = Precompiler(workers=3)
    try:
        first = pc.submit("evil", (PLUGINS,), {"N": 8}, "fp32", [hang], per_config_s=3, startup_s=30)
        assert first.futs  # the hang has started
        time.sleep(2)
        first.close()  # the shape is done; its hung compile is past its limit a second later
        second = pc.submit("evil", (PLUGINS,), {"N": 16}, "fp32", [slow], per_config_s=60, startup_s=30)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert second.wait(slow) == "ok"
        assert not second.dead
    finally:
        pc.close(kill=True)


def test_precompile_pool_starts_before_planning_and_closes_if_planning_fails(monkeypatch):
    """The pool's processes (each imports torch: seconds) start while the timing worker plans, not after; a sweep
    whose planning fails leaves no pool behind."""
    from flytune_nb.precompile import Precompiler

    order, closed = [], []
    real_warm, real_close, real_plan = Precompiler.warm, Precompiler.close, Sweep._plan
    monkeypatch.setattr(Precompiler, "warm", lambda self, *a: (order.append("warm"), real_warm(self, *a))[1])
    monkeypatch.setattr(Precompiler, "close", lambda self, kill=False: (closed.append(kill), real_close(self, kill))[1])
    monkeypatch.setattr(Sweep, "_plan", lambda self, lane: (order.append("plan"), real_plan(self, lane))[1])
    r = Sweep("toy", "N=64", ["fp32"], paths=[PLUGINS], precompile=True, baselines=(), isolate=False).run()[0]
    assert order == ["warm", "plan"] and closed == [False]
    plain = Sweep("toy", "N=64", ["fp32"], paths=[PLUGINS], precompile=False, baselines=(), isolate=False).run()[0]
    assert r.best is not None and [(t.config, t.status) for t in r.trials] == [(t.config, t.status) for t in plain.trials]

    def broken_plan(self, lane):
        raise SweepError("toy: cannot prepare the shape")

    monkeypatch.setattr(Sweep, "_plan", broken_plan)
    with pytest.raises(SweepError):
        Sweep("toy", "N=64", ["fp32"], paths=[PLUGINS], precompile=True, baselines=(), isolate=False).run()
    assert closed[-1] is True


def test_compile_baseline_starts_from_a_fresh_dynamo_per_shape(monkeypatch, dev):
    """Without a reset, one worker's 9th shape would hit dynamo's recompile limit and time eager code as
    'torch_compile'. Each baseline compile must follow a reset."""
    import torch

    from flytune_nb import tasks

    calls = []
    monkeypatch.setattr(torch._dynamo, "reset", lambda: calls.append("reset"))
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: (calls.append("compile"), fn)[1])
    for N in (64, 128):
        rows = tasks.baselines("rmsnorm", (), {"M": 2, "N": N}, "fp32", ("torch_compile",), (("reps", 1),))
        assert rows[0]["status"] == "ok"
    assert calls == ["reset", "compile", "reset", "compile"]


def test_ctrl_c_in_a_terminal_stops_cleanly_and_blames_no_config(tmp_path):
    """SIGINT to the whole process group (what Ctrl-C does) reaches the worker too: the sweep must exit 130 with its
    one-line message, and the trial in flight must not be stored as a crash of its config."""
    db = tmp_path / "i.db"
    # 41 configs of ~1.5 s each: a minute of work, so a loaded CI machine cannot finish it before the interrupt.
    env = {**os.environ, "FLYTUNE_EVIL_MODES": "0", "FLYTUNE_EVIL_SLEEPS": ",".join(str(i) for i in range(300, 340)),
           "PYTHONPATH": os.pathsep.join(sys.path)}
    cmd = [sys.executable, "-m", "flytune_nb.cli", "sweep", "evil", "--path", PLUGINS, "--grid", "N=32",
           "--dtype", "fp32", "--db", str(db), "--quiet"]
    # As from an interactive shell: SIGINT at its default, whatever this test process inherited.
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 180
    while time.time() < deadline:
        try:
            if db.exists() and _count(db) >= 3:
                break
        except sqlite3.OperationalError:
            pass
        time.sleep(0.05)
    at_interrupt = _count(db)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert at_interrupt < 41, "the sweep finished before the interrupt: nothing was tested"
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted" in err and "Traceback" not in err
    statuses = [r[0] for r in sqlite3.connect(db).execute("SELECT status FROM trials")]
    assert len(statuses) >= 3 and set(statuses) == {"ok"}, statuses


def test_an_in_process_sweep_runs_the_kernel_as_its_folder_is_now(tmp_path):
    """A heuristic edited on disk (an editor, a git checkout) between two sweeps in one process is what the second
    sweep runs: no per-process cache of the old module."""
    import shutil

    folder = tmp_path / "kern" / "toy"
    shutil.copytree(os.path.join(PLUGINS, "toy"), folder)
    first = Sweep("toy", "N=64", ["fp32"], paths=[folder.parent], isolate=False, baselines=(), strategy="random",
                  budget=1).run()[0]
    assert first.default["BLOCK"] == 128
    heuristic = folder / "heuristic.py"
    heuristic.write_text(heuristic.read_text().replace('"BLOCK": 128', '"BLOCK": 64'))
    second = Sweep("toy", "N=64", ["fp32"], paths=[folder.parent], isolate=False, baselines=(), strategy="random",
                   budget=1).run()[0]
    assert second.default["BLOCK"] == 64


def test_two_in_process_sweeps_of_one_kernel_keep_their_own_spec_objects(tmp_path):
    """A notebook can run an edited spec beside the original. Sweep B runs to completion inside sweep A (from A's
    first TrialDone), which is the worst overlap: every trial must still run the spec object its own sweep was
    given, before B, during B and after B has cleaned up."""
    from dataclasses import replace

    from flytune_nb.events import TrialDone
    from flytune_nb.registry import get_kernel

    base = get_kernel("toy", [PLUGINS])
    ran = {"A": set(), "B": set()}  # (N, config) each spec object was run with

    def counting(tag):
        def run(inputs, config):
            ran[tag].add((inputs["x"].numel(), config))
            return base.run(inputs, config)
        return run

    spec_a, spec_b = replace(base, run=counting("A")), replace(base, run=counting("B"))
    b_results = []

    def start_b(event):
        if isinstance(event, TrialDone) and not b_results:
            b_results.extend(Sweep(spec_b, "N=64", ["fp32"], db=tmp_path / "b.db", isolate=False,
                                   baselines=()).run())

    a_results = Sweep(spec_a, "N=64,100", ["fp32"], db=tmp_path / "a.db", isolate=False, baselines=(),
                      listeners=[start_b]).run()
    assert b_results, "sweep B never ran"
    trials = lambda results: {(r.shape["N"], t.config) for r in results for t in r.trials}  # noqa: E731
    assert len(trials(a_results)) > len(trials(b_results)) > 0
    assert ran["A"] == trials(a_results) and ran["B"] == trials(b_results)


def test_stop_ends_a_precompile_batch_without_waiting_for_it():
    """Stop / Ctrl-C during precompilation: the wait ends within a fraction of a second and the configs not yet
    started are cancelled, instead of sitting through the batch (here: hangs that would hold it for its deadline)."""
    import threading

    from flytune_nb.precompile import Precompiler

    hang = {"MODE": 3, "SLEEP_MS": 0, "num_warps": 1, "num_stages": 1}
    stop = threading.Event()
    pc = Precompiler(workers=1)
    try:
        threading.Timer(1.0, stop.set).start()
        t0 = time.time()
        res = pc.run("evil", (PLUGINS,), {"N": 8}, "fp32", [hang, dict(hang, SLEEP_MS=1)], per_config_s=600,
                     startup_s=600, stop=stop)
        assert res["stopped"] and time.time() - t0 < 10  # not the 1800 s the batch's deadline allows
    finally:
        pc.close(kill=True)


def test_timing_waits_only_for_its_own_config_to_compile():
    """The pool compiles in timing order and each trial waits for its own config: a config whose compile takes 4 s
    does not hold back the one before it (the old barrier did: the H200's first trial waited 3.1 s for all 47)."""
    from flytune_nb.precompile import Precompiler

    fast = {"MODE": 0, "SLEEP_MS": 0, "num_warps": 1, "num_stages": 1}
    slow = dict(fast, SLEEP_MS=4000)  # compile_one runs the config once: 4 s in the pool
    pc = Precompiler(workers=3)  # two compiling ahead, one kept free for what the timing worker asks for
    try:
        batch = pc.submit("evil", (PLUGINS,), {"N": 8}, "fp32", [fast, slow])
        assert batch.wait(fast) == "ok"
        t0 = time.time()
        assert batch.wait(fast) == "ok" and not batch.futs[next(k for k in batch.futs if "4000" in k)].done()
        assert time.time() - t0 < 1
        assert batch.wait(slow) == "ok" and batch.wait({"MODE": 9}) == "absent"
    finally:
        pc.close()


def test_each_trial_waits_for_its_config_before_it_starts(monkeypatch):
    from flytune_nb.precompile import Batch

    order = []
    real_wait = Batch.wait
    def wait(self, c, stop=None):
        r = real_wait(self, c, stop)
        order.append(("wait", c["MODE"], c["SLEEP_MS"], r))
        return r

    monkeypatch.setattr(Batch, "wait", wait)
    listen = lambda e: isinstance(e, TrialStarted) and order.append(("start", e.config["MODE"], e.config["SLEEP_MS"]))  # noqa: E731
    monkeypatch.setenv("FLYTUNE_EVIL_MODES", "0")
    monkeypatch.setenv("FLYTUNE_EVIL_SLEEPS", "0,1,2")
    r = Sweep("evil", "N=8", ["fp32"], paths=[PLUGINS], precompile=True, baselines=(), isolate=False,
              listeners=[listen]).run()[0]
    assert all(t.ok for t in r.trials) and len(r.trials) == 3
    assert order == [e for s in (0, 1, 2) for e in (("wait", 0, s, "ok"), ("start", 0, s))]


def test_a_worker_takes_the_callers_environment_as_it_is_at_each_start(monkeypatch):
    """Workers fork from one forkserver, which keeps the environment it started with; each worker must still see
    the caller's as it is when the worker starts (a benchmark points TRITON_CACHE_DIR at a fresh folder per run),
    variables set since and variables removed since alike. The evil plugin fails while FLYTUNE_EVIL_POOL_MARK is set."""
    from flytune_nb.worker import ProcessLane

    ok = {"MODE": 0, "SLEEP_MS": 0, "num_warps": 1, "num_stages": 1}

    def trial(pin=None):
        lane = ProcessLane(pin)
        try:
            return lane.call("trial", dict(kernel="evil", paths=(PLUGINS,), shape={"N": 8}, dtype="fp32", config=ok,
                                           timer=(("reps", 1),)), timeout=120)
        finally:
            lane.close()

    assert trial()["status"] == "ok"
    monkeypatch.setenv("FLYTUNE_EVIL_POOL_MARK", "fail")
    t = trial()
    assert t["status"] == "launch_error" and "POOL_MARK is set" in t["reason"]
    monkeypatch.delenv("FLYTUNE_EVIL_POOL_MARK")
    assert trial()["status"] == "ok"
    assert trial({"FLYTUNE_EVIL_POOL_MARK": "fail"})["status"] == "launch_error"  # a lane's own pin wins


def test_compiling_on_meta_refuses_real_launches_and_keeps_compile_errors():
    """The pool compiles on meta tensors with a stand-in Triton driver (no CUDA in the pool). A wrapper that launches
    outside flytune_nb.launch would run a kernel on null pointers: Triton's launch-enter hook refuses it, as the
    stand-in refuses anything but device/stream/target, and the caller falls back to real inputs. A config's own
    compile error is not retried. Driver and hook are restored either way."""
    import torch
    from triton import knobs
    from triton.runtime.driver import driver

    from flytune_nb import launch
    from flytune_nb.compiling import compile_on_meta
    from flytune_nb.config import Config

    seen = []

    class CompilationError(Exception):
        pass

    def run_ok(inputs, config):
        t = driver.active.get_current_target()
        seen.append((inputs["x"].device.type, launch._COMPILE_ONLY[0], driver.active.get_current_device(),
                     (t.backend, t.arch, t.warp_size)))

    def run_direct(inputs, config):
        knobs.runtime.launch_enter_hook(None)  # what Triton's launcher calls first on a real launch

    def run_asks_more(inputs, config):
        driver.active.utils  # noqa: B018 - e.g. loading a binary: needs the real driver

    def run_bad(inputs, config):
        raise CompilationError("at 3:4: bad config")

    hook, active = knobs.runtime.launch_enter_hook, driver._active
    spec = lambda run: SimpleNamespace(run=run)  # noqa: E731
    meta = {"x": torch.empty(8, device="meta")}
    cfg, target = Config({"BLOCK": 8}), ("cuda", 90, 32)
    assert compile_on_meta(spec(run_ok), meta, cfg, target) is True
    assert seen == [("meta", "cuda", 0, target)] and launch._COMPILE_ONLY[0] is None
    assert compile_on_meta(spec(run_direct), meta, cfg, target) is False
    assert compile_on_meta(spec(run_asks_more), meta, cfg, target) is False
    with pytest.raises(CompilationError):
        compile_on_meta(spec(run_bad), meta, cfg, target)
    assert knobs.runtime.launch_enter_hook is hook and driver._active is active


def _triton_key_cached() -> int:
    from triton.runtime.cache import triton_key

    return triton_key.cache_info().currsize


def test_forked_processes_start_with_tritons_version_key_computed():
    """Triton hashes its sources and all of libtriton for its version key, once per process: 3.9 s of a pool
    process's first compile on the H200 host. The forkserver computes it once and every forked process inherits it."""
    from flytune_nb.precompile import Precompiler

    pc = Precompiler(workers=1)
    try:
        assert pc._get_pool().submit(_triton_key_cached).result(timeout=120) == 1
    finally:
        pc.close()


def _meta_machinery_loaded() -> list:
    import sys

    return [m for m in ("torch._refs", "torch.fx.experimental.symbolic_shapes", "sympy") if m not in sys.modules]


def test_forked_processes_start_with_torchs_meta_machinery_imported():
    """The first meta-tensor op imports ~800 modules; every pool process and every worker's describe runs one. On
    the H200 host (no bytecode caches) that was 3.3 s per process, 4.3-5.7 s before the first config compiled. The
    forkserver does it once and every forked process inherits it."""
    from flytune_nb.precompile import Precompiler

    pc = Precompiler(workers=1)
    try:
        assert pc._get_pool().submit(_meta_machinery_loaded).result(timeout=120) == []
    finally:
        pc.close()


def test_the_pools_target_follows_tritons_cuda_rule_without_asking_its_driver(monkeypatch):
    """Triton's CudaDriver says GPUTarget("cuda", major*10+minor, 32); reading that from torch spares the timing
    worker building Triton's driver helpers before the pool has work. (test_gpu.py compares with Triton's driver.)"""
    import torch

    from flytune_nb import compiling, device
    from tests.conftest import H200 as gpu
    monkeypatch.setattr(device, "current_device", lambda index=0: gpu)
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    assert compiling.current_target() == ("cuda", 90, 32)
    monkeypatch.setattr(device, "current_device", lambda index=0: device.interpreter_device())
    assert compiling.current_target() is None


def test_a_broken_pool_is_replaced_and_a_stale_batch_leaves_the_new_one_alone():
    """A config that takes a pool process down breaks the whole pool. The next submit (another lane's shape) gets a
    fresh pool instead of an exception, and when the first batch finds its broken future later it kills only the
    pool it ran on, not the one the other lane is compiling in."""
    from flytune_nb.precompile import Precompiler

    ok = {"MODE": 0, "SLEEP_MS": 0, "num_warps": 1, "num_stages": 1}
    crash, slow = dict(ok, MODE=4), dict(ok, SLEEP_MS=1500)
    pc = Precompiler(workers=1)
    try:
        first = pc.submit("evil", (PLUGINS,), {"N": 8}, "fp32", [crash])
        broken = next(iter(first.futs.values()))
        with pytest.raises(Exception, match="abruptly|terminated|Broken"):
            broken.result(timeout=120)
        second = pc.submit("evil", (PLUGINS,), {"N": 8}, "fp32", [slow])
        with pytest.warns(RuntimeWarning, match="stopped early"):
            assert first.wait(crash) == "dead"
        assert second.wait(slow) == "ok"
    finally:
        pc.close(kill=True)


def test_a_config_the_worker_asks_for_jumps_the_queue():
    """The pool keeps one compile per process in flight, from the queue's head; a config the timing worker asks for
    that has not started is started at once. A budgeted search's picks (random, surrogate: a few dozen of a
    1000-config space) so wait behind at most the compiles in flight, not behind the whole space; and a shape's
    leftovers are dropped when it is closed."""
    from flytune_nb.precompile import Precompiler, _key

    ok = {"MODE": 0, "SLEEP_MS": 0, "num_warps": 1, "num_stages": 1}
    slow = [dict(ok, SLEEP_MS=900 + i) for i in range(5)]
    pc = Precompiler(workers=1)
    try:
        first = pc.submit("evil", (PLUGINS,), {"N": 8}, "fp32", slow, per_config_s=30, startup_s=60)
        assert first.wait(slow[0]) == "ok"
        t0 = time.time()
        assert first.wait(slow[4]) == "ok" and time.time() - t0 < 2.7  # behind one in flight, not three queued
        first.close()  # at most one more of its queue (slow[2]) may have started as slow[4] finished
        other = pc.submit("evil", (PLUGINS,), {"N": 16}, "fp32", [ok], per_config_s=30, startup_s=60)
        t0 = time.time()
        assert other.wait(ok) == "ok" and time.time() - t0 < 2.7
        time.sleep(2)
        assert _key(slow[3]) not in first.futs  # the leftovers were not started after the shape was closed
    finally:
        pc.close(kill=True)


def test_a_budgeted_search_gets_its_picks_precompiled(monkeypatch):
    """random / surrogate with a budget used to skip the pool (compiling a whole space for a few picks cost more
    than it saved); every pick now waits for, and gets, its own compile."""
    from flytune_nb.precompile import Batch

    waits = []
    real_wait = Batch.wait
    monkeypatch.setattr(Batch, "wait", lambda self, c, stop=None: (waits.append(r := real_wait(self, c, stop)), r)[1])
    monkeypatch.setenv("FLYTUNE_EVIL_MODES", "0")
    monkeypatch.setenv("FLYTUNE_EVIL_SLEEPS", ",".join(str(i) for i in range(12)))
    r = Sweep("evil", "N=8", ["fp32"], paths=[PLUGINS], precompile=True, baselines=(), isolate=False,
              strategy="random", budget=4).run()[0]
    assert len(r.trials) == 4 and all(t.ok for t in r.trials)
    assert waits == ["ok"] * 4


def test_a_worker_forgets_what_the_caller_removed_after_the_forkserver_started():
    """The forkserver keeps the environment it started with; a variable the caller removed since must not reach a
    worker. Run in a fresh interpreter so that its forkserver starts with FLYTUNE_EVIL_POOL_MARK set."""
    code = (f"""
import os
os.environ["FLYTUNE_EVIL_POOL_MARK"] = "fail"
from flytune_nb.worker import ProcessLane
ok = {{"MODE": 0, "SLEEP_MS": 0, "num_warps": 1, "num_stages": 1}}
def trial():
    lane = ProcessLane()
    try:
        return lane.call("trial", dict(kernel="evil", paths=({PLUGINS!r},), shape={{"N": 8}}, dtype="fp32",
                                       config=ok, timer=(("reps", 1),)), timeout=120)["status"]
    finally:
        lane.close()
first = trial()
del os.environ["FLYTUNE_EVIL_POOL_MARK"]
print(first, trial())
""")
    env = {k: v for k, v in os.environ.items() if k != "FLYTUNE_EVIL_POOL_MARK"}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env, cwd=root)
    assert out.stdout.split() == ["launch_error", "ok"], out.stderr[-2000:]


def test_a_torch_compile_setting_changed_after_the_forkserver_started_reaches_the_processes(tmp_path):
    """Inductor reads TORCHINDUCTOR_* once, at import, and the forkserver imports it: a change made after the server
    started must still reach a worker or pool process (they are spawned then), or the torch.compile baseline would
    run with the old setting. Run in a fresh interpreter so that its forkserver starts without the variable."""
    script = tmp_path / "inductor_env.py"
    script.write_text("""
import concurrent.futures as cf
import os


def max_autotune():
    import torch._inductor.config as c

    return c.max_autotune


def ask():
    from flytune_nb.procs import context

    ctx = context()
    with cf.ProcessPoolExecutor(1, mp_context=ctx) as ex:
        return ctx.get_start_method(), ex.submit(max_autotune).result(timeout=120)


if __name__ == "__main__":
    first = ask()
    os.environ["TORCHINDUCTOR_MAX_AUTOTUNE"] = "1"
    print(*first, *ask())
""")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHINDUCTOR_")}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env, cwd=root)
    assert out.stdout.split() == ["forkserver", "False", "spawn", "True"], out.stderr[-2000:]


def test_prestart_starts_the_forkserver_in_the_background():
    """`flytune sweep` and the workbench start the forkserver before their own imports, so the server's torch import
    overlaps theirs (a CLI sweep on these 2-core machines: 5.5 s -> 3.3 s). It must return at once and leave a
    running server that the first worker then forks from."""
    code = """
import time
from multiprocessing import forkserver
from flytune_nb.procs import prestart
t0 = time.perf_counter()
prestart()
returned = time.perf_counter() - t0
while forkserver._forkserver._forkserver_pid is None and time.perf_counter() - t0 < 60:
    time.sleep(0.05)
from flytune_nb.worker import ProcessLane
lane = ProcessLane()
lane.call("describe", dict(kernel="rmsnorm", paths=(), shape={"M": 2, "N": 64}, dtype="fp32"), timeout=120)
lane.close()
print(returned < 0.5, forkserver._forkserver._forkserver_pid is not None)
"""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env, cwd=root)
    assert out.stdout.split() == ["True", "True"], out.stderr[-2000:]


def test_a_script_without_a_main_guard_gets_told_why_its_worker_did_not_start(tmp_path):
    """Worker processes import the main script (Python's multiprocessing does); a script that sweeps at import time
    makes the worker exit at start-up. The error must say what to change, not only "exited with code 1"."""
    script = tmp_path / "unguarded.py"
    script.write_text("from flytune_nb.sweep import Sweep\n"
                      f"Sweep('toy', 'N=64', ['fp32'], paths=[{PLUGINS!r}], baselines=()).run()\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env,
                         cwd=tmp_path)
    assert out.returncode != 0
    assert 'if __name__ == "__main__":' in out.stderr and "unguarded.py" in out.stderr, out.stderr[-1500:]


def test_a_hung_compile_of_a_finished_shape_does_not_hold_the_pool():
    """The pool compiles ahead; a config nobody waits for (its shape is done) that hangs would hold a process for
    good, and with all of them held the next shape would wait out the stall limit. Past its shape's per-config
    limit such a compile's pool is killed and the next start gets a fresh one."""
    from flytune_nb.precompile import Precompiler

    ok = {"MODE": 0, "SLEEP_MS": 0, "num_warps": 1, "num_stages": 1}
    hang = dict(ok, MODE=3)
    pc = Precompiler(workers=2)
    try:
        done = pc.submit("evil", (PLUGINS,), {"N": 8}, "fp32", [hang], per_config_s=1.0, startup_s=60)
        t0 = time.time()
        while not done.futs and time.time() - t0 < 60:
            time.sleep(0.05)
        hung = next(iter(done.futs.values()))
        done.close()
        t0 = time.time()
        while not hung.done() and time.time() - t0 < 30:
            time.sleep(0.1)
        assert hung.done()  # killed with its pool, not left running
        nxt = pc.submit("evil", (PLUGINS,), {"N": 16}, "fp32", [ok], per_config_s=30, startup_s=60)
        assert nxt.wait(ok) == "ok"
    finally:
        pc.close(kill=True)


def test_a_dtype_string_is_names_not_characters():
    """papermill and the CLI hand dtypes over as text; `Sweep(..., "bf16")` once looped over "b", "f", "1", "6"."""
    assert Sweep("rmsnorm", "M=2 N=64", "bf16").dtypes == ["bf16"]
    assert Sweep("rmsnorm", "M=2 N=64", "bf16, fp16").dtypes == ["bf16", "fp16"]
    with pytest.raises(ValueError, match="no dtype"):
        Sweep("rmsnorm", "M=2 N=64", "")


def test_a_profiled_worker_writes_snapshots_and_an_unwritable_folder_costs_no_trial(tmp_path, monkeypatch):
    """FLYTUNE_PROFILE_DIR makes the timing worker write cumulative cProfile snapshots (relative paths are the
    caller's); a folder it cannot write to only stops the profiling, and every trial is still measured."""
    import pstats

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FLYTUNE_PROFILE_DIR", "prof")  # relative to the caller, not to the worker's cwd
    r = Sweep("rmsnorm", "M=2 N=64", ["fp32"], strategy="random", budget=2, baselines=()).run()[0]
    assert all(t.ok for t in r.trials)
    snaps = sorted((tmp_path / "prof").glob("worker-*.prof"))
    assert len(snaps) == 3  # describe, then one per trial
    assert any("trial" in f[2] for f in pstats.Stats(str(snaps[-1])).stats)
    (tmp_path / "blocker").write_text("x")
    monkeypatch.setenv("FLYTUNE_PROFILE_DIR", str(tmp_path / "blocker" / "prof"))
    r = Sweep("rmsnorm", "M=2 N=64", ["fp32"], strategy="random", budget=2, baselines=()).run()[0]
    assert len(r.trials) == 2 and all(t.ok for t in r.trials)
