"""A store whose file is deleted, moved or replaced while it is open: SQLite goes on writing to the file it opened,
which no one opening the path sees again. Every write is refused instead, with what happened, and closing the store
puts a moved file's last rows into it."""
import json
import os
import sqlite3

import pytest

from flytune_nb.core.config import Config
from flytune_nb.engine.store import Store, StoreGone
from flytune_nb.engine.sweep import Sweep
from flytune_nb.errors import FlytuneError, RunError, UsageError
from flytune_nb.measure.trial import Trial
from tests.conftest import PLUGINS, REPO, DeleteAfterFirstTrial


def _trial(n):
    return Trial("toy", {"N": n}, "fp32", Config({"BLOCK": 128, "MODE": 0}, num_warps=1), "ok", p20=1.0, p50=1.0,
                 p80=1.0)


def _write(store, n: int, first: int = 32) -> None:
    """``n`` trials into ``store`` (keys k0, k1, ...), then closed."""
    for i in range(n):
        store.add(_trial(first + i), key=f"k{i}", run_id="r")
    store.close()


def _count(db):
    c = sqlite3.connect(db)
    try:
        return c.execute("SELECT COUNT(*) FROM trials").fetchone()[0]
    finally:
        c.close()


def test_a_sweep_whose_store_is_deleted_mid_run_stops_at_its_next_write(tmp_path):
    db = tmp_path / "runs.db"
    delete_after_the_first = DeleteAfterFirstTrial(db)
    sweep = Sweep("toy", "N=64", ["fp32"], db=db, paths=[PLUGINS], isolate=False, baselines=(),
                  listeners=[delete_after_the_first])
    with pytest.raises(StoreGone) as e:
        sweep.run()
    # what went wrong mid-run after trials were stored, not bad input: the CLI exits 1, as for a full disk
    assert isinstance(e.value, RunError) and not isinstance(e.value, UsageError) and isinstance(e.value, FlytuneError)
    rescued = tmp_path / "runs.rescued.db"
    assert str(e.value) == (f"results store {db} was deleted or moved after it was opened: nothing more is written "
                            f"to it, since rows written now would go into a file no one can open; the 1 trial(s) "
                            f"it held are saved in {rescued} (delete that file if you meant to throw them away)")
    assert len(delete_after_the_first.done) == 1  # the next trial was measured but refused, not stored
    # the row stored before the deletion, which closing the store would have lost with the file
    kept = Store(rescued).frame()
    assert len(kept) == 1 and json.loads(kept["config"][0]) == delete_after_the_first.done[0].trial.config.to_dict()


def test_a_deleted_store_is_saved_once_beside_where_it_was_and_a_moved_one_is_not_copied(tmp_path):
    db = tmp_path / "runs.db"
    (tmp_path / "runs.rescued.db").write_text("someone's file")  # taken: the copy goes to the next free name
    store = Store(db)
    for n in range(16, 24):
        store.add(_trial(n), key=f"k{n}", run_id="r")
    db.unlink()
    for _ in range(2):  # every write is refused; the rows are copied at the first
        with pytest.raises(StoreGone, match=r"the 8 trial\(s\) it held are saved in .*runs\.rescued-2\.db"):
            store.add(_trial(99), key="k99", run_id="r")
    store.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.rescued-2.db", "runs.rescued.db"]
    assert _count(tmp_path / "runs.rescued-2.db") == 8
    assert (tmp_path / "runs.rescued.db").read_text() == "someone's file"

    store = Store(db)
    store.add(_trial(16), key="k16", run_id="r")
    db.rename(tmp_path / "kept.db")  # moved: its rows are in the file where it went
    with pytest.raises(StoreGone) as e:
        store.add(_trial(99), key="k99", run_id="r")
    assert "are saved in" not in str(e.value)
    store.close()
    assert _count(tmp_path / "kept.db") == 1 and not list(tmp_path.glob("runs.rescued-3*"))


def test_a_store_replaced_by_another_file_refuses_writes(tmp_path):
    db, other = tmp_path / "runs.db", tmp_path / "other.db"
    store = Store(db)
    store.add(_trial(64), key="k", run_id="r")
    Store(other).close()
    os.replace(other, db)  # moved over it: the path is another file now
    with pytest.raises(StoreGone, match=f"results store {db} was replaced by another file after it was opened"):
        store.add(_trial(128), key="k", run_id="r")
    with pytest.raises(StoreGone):
        store.start_run("toy", [{"N": 64}], ["fp32"], "exhaustive", None, "cpu")
    assert store.count() == 1 and store.count("runs") == 0  # neither write was made


def test_closing_a_moved_store_puts_its_last_rows_into_the_file_where_it_went(tmp_path):
    """SQLite leaves the rows committed since its last checkpoint in the -wal at the old path when it closes a file
    that moved: the moved file alone would miss them."""
    db, moved = tmp_path / "runs.db", tmp_path / "kept.db"
    store = Store(db)
    for n in range(16, 48):
        store.add(_trial(n), key=f"k{n}", run_id="r")
    db.rename(moved)
    assert store.count() == 32  # reads still answer from the file it opened
    store.close()
    assert _count(moved) == 32
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.db"]  # no -wal, -shm left at the old path


def test_a_store_opened_by_a_relative_path_keeps_its_file_when_the_process_changes_folder(tmp_path, monkeypatch):
    """The workbench's default store is "workbench.db", relative: a notebook's %cd must not make the file it opened
    read as deleted (every write refused) or as replaced by a file of that name in the new folder."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    store = Store("runs.db")
    store.add(_trial(64), key="k64", run_id="r")
    monkeypatch.chdir(tmp_path / "b")
    store.add(_trial(128), key="k128", run_id="r")  # no file at b/runs.db: not "deleted or moved"
    Store("runs.db").close()  # another store of that name in the new folder: not "replaced"
    store.add(_trial(256), key="k256", run_id="r")
    store.close()
    assert _count(tmp_path / "a" / "runs.db") == 3 and _count(tmp_path / "b" / "runs.db") == 0


def test_threads_meeting_a_deleted_store_at_once_save_it_once_and_say_the_same_path(tmp_path, monkeypatch):
    import threading
    import time

    db = tmp_path / "runs.db"
    store = Store(db)
    store.add(_trial(16), key="k16", run_id="r")
    real = Store._rescue

    def slow(self):  # widens the window between the check and the copy, as a big store's copy does
        time.sleep(0.3)
        return real(self)

    monkeypatch.setattr(Store, "_rescue", slow)
    db.unlink()
    said = []

    def write(n):
        try:
            store.add(_trial(n), key=f"k{n}", run_id="r")
        except StoreGone as e:
            said.append(str(e))

    threads = [threading.Thread(target=write, args=(n,)) for n in (32, 64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(said) == 2 and said[0] == said[1] and f"saved in {tmp_path / 'runs.rescued.db'}" in said[0]
    assert sorted(p.name for p in tmp_path.iterdir() if "rescued" in p.name) == ["runs.rescued.db"]


def test_a_rescue_copy_never_writes_over_or_removes_a_file_made_at_its_name_meanwhile(tmp_path, monkeypatch):
    """Another process with the store open (a census beside a notebook) may make runs.rescued.db between this one's
    look at the name and its copy: that file is another name's business, never written over, nor removed when this
    copy fails."""
    from pathlib import Path

    db = tmp_path / "runs.db"
    store = Store(db)
    store.add(_trial(16), key="k16", run_id="r")
    taken = tmp_path / "runs.rescued.db"
    real_exists = Path.exists

    def exists(self):  # the other process makes its file just after this one saw the name free
        if self == taken and not real_exists(self):
            taken.write_text("the other process's file")
            return False
        return real_exists(self)

    monkeypatch.setattr(Path, "exists", exists)
    db.unlink()
    with pytest.raises(StoreGone, match=r"the 1 trial\(s\) it held are saved in .*runs\.rescued-2\.db"):
        store.add(_trial(99), key="k99", run_id="r")
    monkeypatch.undo()
    store.close()
    assert taken.read_text() == "the other process's file"
    assert _count(tmp_path / "runs.rescued-2.db") == 1


def test_reading_a_store_leaves_no_wal_or_shm_beside_it_and_keeps_a_writers(tmp_path):
    """A read-only open of a WAL store makes its -wal and -shm (SQLite needs the -shm even to read), and a read-only
    connection cannot remove them as it closes: every `flytune export --db runs.db` or Store(..., readonly=True)
    left two stray files beside the store. Closing removes what the reader made, through SQLite, which removes them
    only as the database's last connection: a writer that opened the store meanwhile keeps both, and its rows."""
    import random

    db = tmp_path / "runs.db"
    n = random.randint(1, 20)
    _write(Store(db), n, first=64)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.db"]
    r = Store(db, readonly=True)
    assert len(r.frame()) == n
    r.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.db"]
    r = Store(db, readonly=True)
    w = Store(db)  # a sweep starts while the reader is open: the sidecars are the writer's now too
    w.add(_trial(999), key="late", run_id="r")
    r.close()
    assert {"runs.db-wal", "runs.db-shm"} <= {p.name for p in tmp_path.iterdir()}
    assert len(Store(db, readonly=True).frame()) == n + 1  # the writer's row, read back beside its open connection
    w.add(_trial(1000), key="later", run_id="r")
    w.close()
    assert _count(db) == n + 2


@pytest.mark.parametrize("name", ["a?b.db", "run#2.db", "100%.db", "x%3F.db"])
def test_a_store_whose_name_holds_uri_characters_is_read_back_read_only(tmp_path, name):
    """SQLite opens read-only stores through a URI, where ?, # and % end or change the file name: unquoted, a store
    named a?b.db was read as "a", a file that holds no results, and closing one could make that file."""
    import random

    db = tmp_path / name
    n = random.randint(1, 9)
    _write(Store(db), n, first=32)
    r = Store(db, readonly=True)
    assert len(r.frame()) == n
    r.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_a_store_named_by_a_path_with_two_leading_slashes_is_read_back_read_only(tmp_path):
    """POSIX keeps a path's two leading slashes (//tmp/runs.db names /tmp/runs.db), and so does pathlib: in SQLite's
    URI they must not read as a host, which SQLite refuses and the store reported as 'not a flytune results
    database'."""
    import random

    db = tmp_path / "runs.db"
    n = random.randint(1, 9)
    _write(Store(db), n, first=32)
    r = Store("/" + str(db), readonly=True)
    try:
        assert len(r.frame()) == n
    finally:
        r.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.db"]


def test_closing_a_store_read_by_a_relative_name_after_a_chdir_removes_its_own_sidecars(tmp_path, monkeypatch):
    """A notebook's %cd between opening runs.db read-only and closing it: the -wal and -shm that open made are
    beside the file it opened, not beside a runs.db of the folder it is in now (whose store is not touched)."""
    here, there = tmp_path / "here", tmp_path / "there"
    for folder in (here, there):
        folder.mkdir()
        w = Store(folder / "runs.db")
        w.add(_trial(64), key="k", run_id="r")
        w.close()
    monkeypatch.chdir(here)
    r = Store("runs.db", readonly=True)
    assert len(r.frame()) == 1
    assert {"runs.db-wal", "runs.db-shm"} <= {p.name for p in here.iterdir()}
    monkeypatch.chdir(there)
    r.close()
    assert sorted(p.name for p in here.iterdir()) == ["runs.db"]
    assert sorted(p.name for p in there.iterdir()) == ["runs.db"]


def test_a_store_whose_name_is_not_utf8_is_read_back_read_only(tmp_path):
    """A file name from a Latin-1 system (bytes that are not UTF-8) opens for writing; read-only it must open too,
    not end in a UnicodeEncodeError from building SQLite's URI."""
    import os
    import random

    n = random.randint(1, 9)
    w = Store(tmp_path / "made.db")
    for i in range(n):
        w.add(_trial(32 + i), key=f"k{i}", run_id="r")
    w.close()
    name = os.fsdecode(b"caf\xe9-" + bytes([random.randint(0xC0, 0xFF)]) + b".db")
    os.rename(tmp_path / "made.db", tmp_path / name)
    r = Store(tmp_path / name, readonly=True)
    try:
        assert len(r.frame()) == n
    finally:
        r.close()
    assert sorted(os.listdir(tmp_path)) == [name]


def test_reading_a_store_through_a_symlink_leaves_no_wal_or_shm_beside_the_file(tmp_path):
    """SQLite opens the file a symlink points to and makes its -wal and -shm there: closing a read-only store opened
    through the link removes those, as it does for one opened by the file's own name."""
    import random

    real, link = tmp_path / "real", tmp_path / "link"
    real.mkdir()
    link.mkdir()
    n = random.randint(1, 9)
    w = Store(real / "runs.db")
    for i in range(n):
        w.add(_trial(32 + i), key=f"k{i}", run_id="r")
    w.close()
    (link / "runs.db").symlink_to(real / "runs.db")
    r = Store(link / "runs.db", readonly=True)
    assert len(r.frame()) == n
    r.close()
    assert sorted(p.name for p in real.iterdir()) == ["runs.db"]
    assert sorted(p.name for p in link.iterdir()) == ["runs.db"]


def test_a_read_only_store_left_unclosed_leaves_no_wal_or_shm(tmp_path):
    """`Store("runs.db", readonly=True).frame()`, as the README reads a store, never calls close: the store it drops
    removes the -wal and -shm its open made all the same, as does one used as a context manager, and one still bound
    to a name when the interpreter exits."""
    import subprocess
    import sys

    db = tmp_path / "runs.db"
    w = Store(db)
    w.add(_trial(64), key="k", run_id="r")
    w.close()
    assert len(Store(db, readonly=True).frame()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.db"]
    with Store(db, readonly=True) as r:
        assert len(r.frame()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.db"]
    r.close()  # closing again does nothing
    code = f"from flytune_nb import Store\ns = Store({str(db)!r}, readonly=True)\nprint(len(s.frame()))"
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.stdout.strip() == "1" and out.returncode == 0, out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.db"]
