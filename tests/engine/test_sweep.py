"""The sweep engine: results store, resume, kill -9, fault isolation, scale-out lanes."""
import dataclasses
import math
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from flytune_nb.core.device import current_device
from flytune_nb.core.registry import get_kernel
from flytune_nb.core.events import TrialStarted
from flytune_nb.engine.store import Store, StoreError
from flytune_nb.engine.sweep import Sweep, SweepError
from tests.conftest import PLUGINS, as_unprivileged_user, count_rows


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
    # the run records the device it measured on, raw name included (FlyDSL's offline configs are keyed by it)
    devices = Store(db).run_devices()
    assert list(devices.values()) == [dataclasses.asdict(current_device())]


def test_a_store_from_before_runs_recorded_their_device_still_opens(tmp_path):
    db = tmp_path / "old.db"
    with sqlite3.connect(db) as c:
        c.executescript("CREATE TABLE runs (run_id TEXT PRIMARY KEY, kernel TEXT, grid TEXT, dtypes TEXT, "
                        "strategy TEXT, budget INTEGER, device TEXT, started TEXT, finished TEXT);"
                        "CREATE TABLE trials (id INTEGER PRIMARY KEY, run_id TEXT, kernel TEXT, shape TEXT, "
                        "dtype TEXT, config TEXT, fidelity TEXT, status TEXT, reason TEXT, p20 REAL, p50 REAL, "
                        "p80 REAL, rel_error REAL, compile_s REAL, reps INTEGER, method TEXT, device TEXT, arch TEXT, "
                        "toolchain TEXT, key TEXT, created TEXT, UNIQUE(key, config, fidelity));"
                        "INSERT INTO runs VALUES ('r0', 'toy', '[]', '[]', 'exhaustive', NULL, 'X', 't', NULL);")
    assert Store(db, readonly=True).run_devices() == {}  # read-only: not migrated, and no device to report
    store = Store(db)  # writable: migrated, the old run kept without a device
    assert store.run_devices() == {}
    run = store.start_run("toy", [], [], "exhaustive", None, "X", device_info={"name": "X", "raw_name": "X x"})
    assert store.run_devices() == {run: {"name": "X", "raw_name": "X x"}}


def test_rerun_resumes_without_measuring_again(tmp_path):
    db = tmp_path / "r.db"
    Sweep("toy", "N=64", ["fp32"], db=db, paths=[PLUGINS], isolate=False).run()
    events = []
    r = Sweep("toy", "N=64", ["fp32"], db=db, paths=[PLUGINS], isolate=False, listeners=[events.append]).run()
    assert not [e for e in events if isinstance(e, TrialStarted)]  # nothing measured
    assert len(r[0].trials) == 8 and r[0].best.config["MODE"] == 0
    assert count_rows(db) == 8
    # A larger grid measures only the new shape.
    events.clear()
    Sweep("toy", "N=64,80", ["fp32"], db=db, paths=[PLUGINS], isolate=False, listeners=[events.append]).run()
    assert len([e for e in events if isinstance(e, TrialStarted)]) == 8 and count_rows(db) == 16


def test_kill_9_loses_nothing_measured(tmp_path):
    db = tmp_path / "k.db"
    env = {**os.environ, "FLYTUNE_EVIL_MODES": "0", "FLYTUNE_EVIL_SLEEPS": ",".join(str(i) for i in range(30, 42)),
           "PYTHONPATH": os.pathsep.join(sys.path)}
    cmd = [sys.executable, "-m", "flytune_nb.ui.cli", "sweep", "evil", "--path", PLUGINS, "--grid", "N=32",
           "--dtype", "fp32", "--db", str(db), "--quiet", "--no-isolate"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            if db.exists() and count_rows(db) >= 4:
                break
        except sqlite3.OperationalError:  # the file exists before its schema does
            pass
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    at_kill = count_rows(db)
    assert 4 <= at_kill < 13, at_kill
    events = []
    os.environ.update(FLYTUNE_EVIL_MODES="0", FLYTUNE_EVIL_SLEEPS=env["FLYTUNE_EVIL_SLEEPS"])
    try:
        r = Sweep("evil", "N=32", ["fp32"], db=db, paths=[PLUGINS], isolate=False, listeners=[events.append]).run()
    finally:
        os.environ.pop("FLYTUNE_EVIL_MODES")
        os.environ.pop("FLYTUNE_EVIL_SLEEPS")
    measured = len([e for e in events if isinstance(e, TrialStarted)])
    assert count_rows(db) == 13 == len(r[0].trials)  # default + 12 sleeps, each exactly once
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
    assert count_rows(db) == 6  # every trial stored, the fatal ones included
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
    assert all(r.best is not None for r in results) and count_rows(db) == 8  # 2 configs x 4 shapes


def test_stop_keeps_what_was_measured_and_run_again_resumes(tmp_path):
    db = tmp_path / "s.db"
    holder = {}

    def stop_after_three(event):
        if isinstance(event, TrialStarted) and event.index == 3:
            holder["sweep"].stop()

    sw = Sweep("toy", "N=64,80", ["fp32"], db=db, paths=[PLUGINS], isolate=False, listeners=[stop_after_three])
    holder["sweep"] = sw
    results = sw.run()
    assert results[0].stopped and len(results) == 1 and count_rows(db) == 4
    r = Sweep("toy", "N=64,80", ["fp32"], db=db, paths=[PLUGINS], isolate=False).run()
    assert len(r) == 2 and count_rows(db) == 16


def test_plugin_bugs_and_bad_stores_are_one_clear_error(tmp_path):
    import dataclasses

    from flytune_nb.core.registry import get_kernel

    toy = get_kernel("toy", [PLUGINS])
    broken = dataclasses.replace(toy, make_inputs=lambda *a: 1 / 0)
    with pytest.raises(SweepError, match="cannot prepare the shape: ZeroDivisionError"):
        Sweep(broken, "N=8", ["fp32"], isolate=False).run()
    bad = tmp_path / "bad.db"
    bad.write_text("this is not sqlite" * 100)
    with pytest.raises(StoreError, match="not a flytune results database"):
        Store(bad)


def test_a_store_path_through_a_file_or_at_a_folder_names_what_is_in_the_way(tmp_path):
    """mkdir says only "File exists" and SQLite "unable to open database file": the message names the file in the
    way, or the folder given for a file, and nothing is created."""
    (tmp_path / "runs.db").write_text("")
    for db in (tmp_path / "runs.db" / "x.db", tmp_path / "runs.db" / "sub" / "x.db"):
        with pytest.raises(StoreError, match=f"cannot make a results store at {db}: {tmp_path / 'runs.db'} exists "
                                             f"and is not a folder$"):
            Store(db)
    for readonly in (False, True):
        with pytest.raises(StoreError, match=f"^{tmp_path} is a folder, not a results store; name a file in it"):
            Store(tmp_path, readonly=readonly)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.db"]


def test_store_round_trips_inf_and_nan(tmp_path):
    from flytune_nb.core.config import Config
    from flytune_nb.measure.trial import Trial

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


def test_timeouts_are_validated_and_failed_trials_can_be_retried(tmp_path, monkeypatch, capsys):
    from flytune_nb.ui.cli import main

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
    with pytest.raises(StoreError, match=f"cannot make a results store at {other}/nested.db: {other} exists and is "
                                         f"not a folder"):
        Store(other / "nested.db")


def _store_with_trials(path, n):
    from flytune_nb.core.config import Config
    from flytune_nb.measure.trial import Trial

    s = Store(path)
    for i in range(n):
        s.add(Trial("toy", {"N": 4}, "fp32", Config({"BLOCK": i}), "ok", "", 1.0, 1.0, 1.0, 0.0, 0.1, 10),
              key="k", run_id="r")
    return s


def test_a_damaged_store_is_one_store_error_on_read_and_write(tmp_path):
    db = tmp_path / "d.db"
    s = _store_with_trials(db, 300)
    s._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    s.close()
    pages = db.read_bytes()
    assert len(pages) > 8 * 4096  # the trials span pages past the schema's: damage them, keep page 1
    db.write_bytes(pages[:4096] + b"\xff" * (len(pages) - 4096))
    with pytest.raises(StoreError, match=r"d\.db is damaged \(.*malformed.*\.recover"):
        Store(db, readonly=True).frame()
    with pytest.raises(StoreError, match="is (damaged|not a flytune results database)"):
        Store(db).trials_for("k")


def test_a_truncated_or_broken_store_is_called_damaged_at_open_and_left_as_it_was(tmp_path, capsys):
    """A copy cut short (a full disk, an interrupted copy) fails as SQLite opens it: it is a damaged store, with the
    way to save its rows, never "not a flytune results database"; the file keeps every byte, and the -wal and -shm
    SQLite made while trying are gone."""
    import random

    from flytune_nb.ui.cli import main

    rng = random.Random()
    n = rng.randrange(16, 512)
    sw = Sweep("toy", f"N={n}", ["fp32"], db=tmp_path / "whole.db", paths=[PLUGINS], isolate=False, baselines=())
    sw.run()
    sw.store.close()  # the last connection folds the -wal into the file
    whole = (tmp_path / "whole.db").read_bytes()
    assert len(whole) > 8 * 4096
    cut = whole[:rng.randrange(100, len(whole) - 4096)]
    header = bytearray(whole)
    header[16:18] = b"\x00\x03"  # a page size SQLite cannot have: the header is broken, the pages are there
    for name, data, said in (("cut.db", cut, "database disk image is malformed"),
                             ("header.db", bytes(header), "file is not a database")):
        db = tmp_path / name
        db.write_bytes(data)
        for readonly in (True, False):
            with pytest.raises(StoreError, match=rf"^{db} is damaged \({said}\); `sqlite3 {db} \.recover` can save "
                                                 rf"its readable rows into a new file$"):
                Store(db, readonly=readonly)
            assert db.read_bytes() == data, (name, readonly)
            assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(name)) == [name], (name, readonly)
    assert main(["sweep", "toy", "--path", PLUGINS, "--grid", f"N={n}", "--dtype", "fp32", "--no-isolate",
                 "--quiet", "--db", str(tmp_path / "cut.db")]) == 2
    assert f"cut.db is damaged (database disk image is malformed); `sqlite3 {tmp_path / 'cut.db'} .recover`" in \
        capsys.readouterr().err
    assert (tmp_path / "cut.db").read_bytes() == cut
    # a file that was never a database is still called that
    text = tmp_path / "notes.db"
    text.write_text("".join(rng.choice("abc \n") for _ in range(8192)))
    with pytest.raises(StoreError, match=rf"^{text} is not a flytune results database \(file is not a database\)$"):
        Store(text, readonly=True)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("notes")) == ["notes.db"]


def test_a_full_disk_mid_run_is_one_run_error_and_keeps_what_was_stored(tmp_path):
    from flytune_nb.core.config import Config
    from flytune_nb.engine.store import StoreWriteFailed
    from flytune_nb.errors import RunError
    from flytune_nb.measure.trial import Trial

    db = tmp_path / "f.db"
    s = _store_with_trials(db, 5)
    s._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    # SQLite's own size cap: past it a write fails with SQLITE_FULL, the error a full disk gives
    s._db.execute(f"PRAGMA max_page_count={s._db.execute('PRAGMA page_count').fetchone()[0]}")
    stored = 5
    with pytest.raises(StoreWriteFailed, match=r"f\.db: database or disk is full; every trial stored before"):
        for i in range(5, 5000):
            s.add(Trial("toy", {"N": 4}, "fp32", Config({"BLOCK": i}), "ok", "x" * 200, 1.0, 1.0, 1.0, 0.0, 0.1,
                        10), key="k", run_id="r")
            stored += 1
    assert isinstance(StoreWriteFailed("x"), RunError)
    s.close()
    assert stored >= 5 and count_rows(db) == stored


def test_a_store_in_a_read_only_folder_is_read_and_refused_for_writing(shared_folder):
    import shutil

    folder = shared_folder
    s = _store_with_trials(os.path.join(folder, "s.db"), 7)
    s.close()  # the last connection to close removes the -shm and -wal files: reading needs them re-made
    assert not os.path.exists(os.path.join(folder, "s.db-shm"))
    os.chmod(os.path.join(folder, "s.db"), 0o444)
    os.chmod(folder, 0o555)

    def use():
        seen = [Store(os.path.join(folder, "s.db"), readonly=True).count()]
        for name in ("s.db", "new.db"):
            try:
                Store(os.path.join(folder, name))
                seen.append("opened for writing")
            except StoreError as e:
                seen.append(str(e))
        return seen

    seen = as_unprivileged_user(use)
    assert seen[0] == 7, seen
    for line, name in zip(seen[1:], ("s.db", "new.db")):
        assert line == f"cannot write a results store at {folder}/{name}: its folder {folder} is read-only " \
                       "(SQLite writes its journal beside the file)"
    assert sorted(os.listdir(folder)) == ["s.db"]

    # a store whose rows are still in its -wal (a killed sweep's): read as immutable they would be missing
    os.chmod(folder, 0o755)
    live = _store_with_trials(os.path.join(folder, "w.db"), 3)
    for suffix in ("", "-wal"):
        shutil.copy(os.path.join(folder, "w.db" + suffix), os.path.join(folder, "copy.db" + suffix))
    live.close()
    os.chmod(folder, 0o555)

    def use_copy():
        try:
            return Store(os.path.join(folder, "copy.db"), readonly=True).count()
        except StoreError as e:
            return str(e)

    assert as_unprivileged_user(use_copy) == (
        f"{folder}/copy.db is in a read-only folder beside a write-ahead log (copy.db-wal) that holds rows SQLite "
        "can only read where it may write: copy both files to a folder of yours")


def test_a_store_gets_its_own_folder_made_but_no_chain_of_missing_ones(tmp_path, shared_folder):
    """``--db results/run.db`` makes results/ (as the batch notebook's store is made with its folder); a path two or
    more folders from anything that exists is refused naming the first missing one, and nothing is made. In a
    read-only folder, the message names that folder, not the store's own one that is not there."""
    import random
    import string

    word = lambda: "".join(random.choices(string.ascii_lowercase, k=8))  # noqa: E731
    own = tmp_path / word() / "runs.db"
    Store(own).close()
    assert own.exists()
    top = tmp_path / word()
    far = top / word() / word() / "runs.db"
    for readonly in (False, True):
        with pytest.raises(StoreError, match=f"^cannot make a results store at {far}: folder {top} does not exist "
                                             f"\\(only the store's own folder, {far.parent}, is made for it\\)$"
                           if not readonly else f"^no results store at {far}$"):
            Store(far, readonly=readonly)
    assert not top.exists()
    from flytune_nb.ui.cli import main

    assert main(["sweep", "toy", "--path", PLUGINS, "--grid", "N=64", "--dtype", "fp32", "--no-isolate", "--quiet",
                 "--db", str(far)]) == 2
    assert not top.exists()

    folder = shared_folder
    os.chmod(folder, 0o555)
    sub = os.path.join(folder, word())

    def use():
        try:
            Store(os.path.join(sub, "x.db"))
            return "opened"
        except StoreError as e:
            return str(e)

    assert as_unprivileged_user(use) == f"cannot write a results store at {sub}/x.db: its folder {sub} cannot be " \
                                        f"made: {folder} is read-only"
    assert os.listdir(folder) == []


def test_compile_baseline_starts_from_a_fresh_dynamo_per_shape(monkeypatch, dev):
    """Without a reset, one worker's 9th shape would hit dynamo's recompile limit and time eager code as
    'torch_compile'. Each baseline compile must follow a reset."""
    import torch

    from flytune_nb.engine import tasks

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
    cmd = [sys.executable, "-m", "flytune_nb.ui.cli", "sweep", "evil", "--path", PLUGINS, "--grid", "N=32",
           "--dtype", "fp32", "--db", str(db), "--quiet"]
    # As from an interactive shell: SIGINT at its default, whatever this test process inherited.
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 180
    while time.time() < deadline:
        try:
            if db.exists() and count_rows(db) >= 3:
                break
        except sqlite3.OperationalError:
            pass
        time.sleep(0.05)
    at_interrupt = count_rows(db)
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

    from flytune_nb.core.registry import get_kernel
    from flytune_nb.core.events import TrialDone

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


def test_a_dtype_string_is_names_not_characters():
    """papermill and the CLI hand dtypes over as text: `Sweep(..., "bf16")` is the dtype bf16 (and "bf16, fp16" two
    of them), never a loop over "b", "f", "1", "6"."""
    assert Sweep("rmsnorm", "M=2 N=64", "bf16").dtypes == ["bf16"]
    assert Sweep("rmsnorm", "M=2 N=64", "bf16, fp16").dtypes == ["bf16", "fp16"]
    with pytest.raises(ValueError, match="no dtype"):
        Sweep("rmsnorm", "M=2 N=64", "")




def test_an_unknown_baseline_is_refused_before_anything_is_measured(tmp_path):
    """A typo in the baselines (the API, papermill's text, a form field) is bad input: refused when the sweep is made,
    nothing stored, not a sweep that runs and records every shape's baseline as an error."""
    from flytune_nb.errors import UsageError

    db = tmp_path / "b.db"
    with pytest.raises(UsageError, match="unknown baseline 'torch_jit'"):
        Sweep("rmsnorm", "M=1 N=256", ["fp32"], db=db, isolate=False, baselines=["torch_eager", "torch_jit"])
    assert not db.exists()
    named = Sweep("rmsnorm", "M=1 N=256", ["fp32"], isolate=False, baselines="torch_eager,torch_compile")
    assert named.baseline_names == ("torch_eager", "torch_compile")
    assert Sweep("rmsnorm", "M=1 N=256", ["fp32"], isolate=False, baselines=" None ").baseline_names == ()
    with pytest.raises(UsageError, match="unknown table 'trails'"):
        Store(tmp_path / "s.db").frame(table="trails")


def test_a_dtype_named_twice_is_swept_once():
    sw = Sweep("rmsnorm", "M=1 N=256", ["fp16", "float16", "fp32", "fp16"], isolate=False)
    assert sw.dtypes == ["fp16", "fp32"]
    assert Sweep("rmsnorm", "M=1 N=256", "bf16 torch.bfloat16", isolate=False).dtypes == ["bf16"]


def test_a_default_naming_other_knobs_or_an_empty_space_is_refused_before_any_trial(tmp_path):
    from flytune_nb.core.config import Config
    from flytune_nb.core.spec import SpecError

    toy = get_kernel("toy", [PLUGINS])
    renamed = dataclasses.replace(toy, default=lambda s, d, dev: Config({"BLOCK_SIZE": 64, "MODE": 0}))
    with pytest.raises(SpecError, match=r"toy: the heuristic's default for N=64 fp32, BLOCK_SIZE=64,MODE=0,.* lacks "
                                        r"BLOCK and has BLOCK_SIZE, which the space's configs do not"):
        Sweep(renamed, "N=64", ["fp32"], db=tmp_path / "a.db", isolate=False, baselines=()).run()
    empty = dataclasses.replace(toy, configs=lambda s, d, dev: [])
    with pytest.raises(SpecError, match="toy: configs.shape, dtype, device. returned no config for N=64 fp32"):
        Sweep(empty, "N=64", ["fp32"], db=tmp_path / "b.db", isolate=False, baselines=()).run()
    # the space's knobs with values of its own: measured beside the space, as a heuristic may
    own = dataclasses.replace(toy, default=lambda s, d, dev: Config({"BLOCK": 32, "MODE": 0}, num_warps=2))
    (result,) = Sweep(own, "N=64", ["fp32"], db=tmp_path / "c.db", isolate=False, baselines=()).run()
    assert result.default_trial is not None and result.default_trial.ok


def test_a_shape_the_kernel_refuses_fails_the_sweep_after_the_others_are_measured(tmp_path, capsys):
    toy = get_kernel("toy", [PLUGINS])

    def picky(shape, dtype, device):
        if shape["N"] == 128:
            raise RuntimeError("my wrapper does not support N=128")
        return toy.make_inputs(shape, dtype, device)

    sw = Sweep(dataclasses.replace(toy, make_inputs=picky), "N=64,128,256", ["fp32"], db=tmp_path / "r.db",
               isolate=False, baselines=())
    with pytest.raises(SweepError, match=r"toy \{'N': 128\} fp32: cannot prepare the shape: RuntimeError: my wrapper "
                                         r"does not support N=128; the other 2 shapes were measured and stored"):
        sw.run()
    assert [r.shape["N"] for r in sw.results] == [64, 256] and all(r.best is not None for r in sw.results)
    assert set(Store(tmp_path / "r.db").frame("toy")["N"]) == {64, 256}
    # every shape refused: nothing measured, nothing written
    with pytest.raises(SweepError, match="cannot prepare the shape"):
        Sweep(dataclasses.replace(toy, make_inputs=picky), "N=128", ["fp32"], db=tmp_path / "none.db",
              isolate=False, baselines=()).run()
    assert not (tmp_path / "none.db").exists()


def _flaky_kernel(root):
    """Configs that sleep SLEEP_MS; the default (20 ms) hangs while the file $FLAKY_HANG exists, as a trial cut off by
    a too short --timeout on a loaded machine does."""
    import textwrap

    folder = root / "flaky"
    folder.mkdir(parents=True)
    files = {
        "__init__.py": """
            import torch

            from flytune_nb.core.spec import KernelSpec

            from .configs import configs
            from .heuristic import default
            from .kernel import launch
            from .reference import ref


            def make_inputs(shape, dtype, device):
                return {"x": torch.randn(shape["N"]), "out": torch.empty(shape["N"])}


            SPEC = KernelSpec(name="flaky", axes=("N",), batch_axis="N", dtypes=("fp32",), make_inputs=make_inputs,
                              run=lambda i, c: launch(i["x"], i["out"], c), reference=lambda i: ref(i["x"]),
                              configs=configs, default=default, shape_of=lambda i: {"N": i["x"].numel()},
                              outputs=("out",))
        """,
        "configs.py": """
            from flytune_nb.core.config import Config


            def configs(shape, dtype, device):
                return [Config({"SLEEP_MS": s}, num_warps=1) for s in (5, 20)]
        """,
        "heuristic.py": """
            from flytune_nb.core.config import Config


            def default(shape, dtype, device):
                return Config({"SLEEP_MS": 20}, num_warps=1)
        """,
        "kernel.py": """
            import os
            import time


            def launch(x, out, config):
                if config["SLEEP_MS"] == 20 and os.path.exists(os.environ.get("FLAKY_HANG", "/nonexistent")):
                    time.sleep(3600)
                time.sleep(config["SLEEP_MS"] / 1000)
                out.copy_(x * 2)
                return out
        """,
        "reference.py": """
            def ref(x):
                return x.double() * 2
        """,
    }
    for name, text in files.items():
        (folder / name).write_text(textwrap.dedent(text))
    return root


def test_retry_failed_decides_a_shape_again_whose_selection_a_timeout_cut(tmp_path, monkeypatch):
    """The default timed out in the selection's rounds (a --timeout too short for a loaded machine), so the shape
    was won by the fastest candidate without a comparison. --retry-failed measures stored failures again: the
    selection's too, so the decision is made against the default, not reused from the cut-off rounds."""
    from flytune_nb.engine.events import TrialDone, TrialFailed

    plugins = _flaky_kernel(tmp_path / "plugins")
    hang = tmp_path / "hang"
    monkeypatch.setenv("FLAKY_HANG", str(hang))

    def hang_after_the_search(event):  # the search's trials are done: the selection's rounds come next
        if isinstance(event, (TrialDone, TrialFailed)) and event.index == event.total - 1:
            hang.touch()

    db = tmp_path / "r.db"
    cut = Sweep("flaky", "N=8", ["fp32"], db=db, paths=[plugins], timeout=2, baselines=(),
                listeners=[hang_after_the_search]).run()[0]
    assert result_ok(cut) and cut.selection.failed and cut.default in cut.selection.failed
    hang.unlink()
    again = Sweep("flaky", "N=8", ["fp32"], db=db, paths=[plugins], timeout=2, baselines=(),
                  retry_failed=True).run()[0]
    assert not again.selection.failed, again.selection.reason
    assert "failed" not in again.selection.reason, again.selection.reason


def result_ok(result) -> bool:
    return all(t.ok for t in result.trials)
