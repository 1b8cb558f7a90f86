"""The results store: one embedded SQLite database (stdlib sqlite3, WAL), one row per trial, committed per row.

Resume identity is (tuning-key digest, config JSON, fidelity): the key already folds in kernel, shape, dtype, stride
classes, device, arch, kernel-source fingerprint, toolchain, codegen env and timing mode, so a stored trial is reused
exactly when re-measuring it would measure the same thing. ``kill -9`` loses at most the trial in flight: every
finished trial is its own committed transaction.

Beside the trials: ``retimes`` holds every timing of the selection stage (strategies/selection.py: one row per
contender per round, never replaced; round -1: a stored config timed again beside listed ones, Sweep's ``beside``:
the trials that run stores were timed beside it, not beside the stored one), ``selections`` the decision per key
with its evidence. A trial whose config compiled to the same binary as one measured before it records that config
in ``twin_of`` and shares its numbers.
"""
from __future__ import annotations

import atexit
import errno
import json
import math
import os
import sqlite3
import threading
import time
import uuid
import weakref
from pathlib import Path

from flytune_nb.core.paths import file_in_the_way
from flytune_nb.errors import RunError, UsageError
from flytune_nb.core.config import Config
from flytune_nb.measure.trial import Trial

try:
    import fcntl
except ImportError:  # Windows (not a target): no flock, so sweeps there do not keep each other off a store
    fcntl = None

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
  run_id TEXT PRIMARY KEY, kernel TEXT, grid TEXT, dtypes TEXT, strategy TEXT, budget INTEGER,
  device TEXT, started TEXT, finished TEXT, device_info TEXT, selection TEXT);
CREATE TABLE IF NOT EXISTS trials (
  id INTEGER PRIMARY KEY, run_id TEXT, kernel TEXT, shape TEXT, dtype TEXT, config TEXT, fidelity TEXT,
  status TEXT, reason TEXT, p20 REAL, p50 REAL, p80 REAL, rel_error REAL, compile_s REAL, reps INTEGER,
  method TEXT, device TEXT, arch TEXT, toolchain TEXT, key TEXT, created TEXT, is_default INTEGER DEFAULT 0,
  source TEXT, binary TEXT, twin_of TEXT, timing TEXT, UNIQUE(key, config, fidelity));
CREATE INDEX IF NOT EXISTS trials_kernel ON trials(kernel, dtype);
CREATE TABLE IF NOT EXISTS baselines (
  id INTEGER PRIMARY KEY, run_id TEXT, kernel TEXT, shape TEXT, dtype TEXT, name TEXT, status TEXT, reason TEXT,
  p20 REAL, p50 REAL, p80 REAL, device TEXT, key TEXT, created TEXT, UNIQUE(key, name));
CREATE TABLE IF NOT EXISTS retimes (
  id INTEGER PRIMARY KEY, run_id TEXT, key TEXT, kernel TEXT, shape TEXT, dtype TEXT, config TEXT, round INTEGER,
  status TEXT, reason TEXT, p20 REAL, p50 REAL, p80 REAL, reps INTEGER, method TEXT, device TEXT, timing TEXT,
  created TEXT);
CREATE INDEX IF NOT EXISTS retimes_key ON retimes(key);
CREATE TABLE IF NOT EXISTS selections (
  id INTEGER PRIMARY KEY, run_id TEXT, key TEXT, kernel TEXT, shape TEXT, dtype TEXT, device TEXT, timing TEXT,
  default_config TEXT, winner TEXT, chose_default INTEGER, reason TEXT, margin REAL, spread REAL, band REAL,
  repeats INTEGER, contenders TEXT, rule TEXT, timings TEXT, failed TEXT, summary TEXT, created TEXT, UNIQUE(key));
CREATE TABLE IF NOT EXISTS census (
  id INTEGER PRIMARY KEY, key TEXT, kernel TEXT, shape TEXT, dtype TEXT, device TEXT, arch TEXT, backend TEXT,
  config TEXT, status TEXT, error TEXT, compile_s REAL, binary TEXT, registers INTEGER, vgprs INTEGER,
  agprs INTEGER, sgprs INTEGER, spilled_registers INTEGER, scratch_bytes INTEGER, spills INTEGER,
  shared_bytes INTEGER, smem_over_limit INTEGER, occupancy INTEGER, occupancy_unit TEXT, occupancy_limiter TEXT,
  mma TEXT, mma_total INTEGER, wide_loads INTEGER, narrow_loads INTEGER, widest_load INTEGER, lds_reads INTEGER,
  lds_writes INTEGER, s_waitcnt INTEGER, is_default INTEGER, kernels TEXT, toolchain TEXT, source TEXT,
  created TEXT, sibling_of TEXT, UNIQUE(key, config));
CREATE INDEX IF NOT EXISTS census_kernel ON census(kernel, device);
"""
# The census table's columns after its id, in order (flytune_nb.measure.census.CensusRow.to_record + the key's).
CENSUS_COLUMNS = ("key", "kernel", "shape", "dtype", "device", "arch", "backend", "config", "status", "error",
                  "compile_s", "binary", "registers", "vgprs", "agprs", "sgprs", "spilled_registers", "scratch_bytes",
                  "spills", "shared_bytes", "smem_over_limit", "occupancy", "occupancy_unit", "occupancy_limiter",
                  "mma", "mma_total", "wide_loads", "narrow_loads", "widest_load", "lds_reads", "lds_writes",
                  "s_waitcnt", "is_default", "kernels", "toolchain", "source", "created", "sibling_of")


# A run's recorded strategy starts with this when it timed a list of configs it was given (Sweep(configs=...): the
# heuristic editor's Measure missing), not the kernel's space: finishing it says nothing of whether a shape's search
# of the space finished, which is what export reads a finished run for (artifacts/unfinished.py).
LISTED_CONFIGS = "listed configs: "


class StoreError(UsageError):
    """The store cannot be used as asked (missing, damaged, someone else's database, a read-only place to write)."""


class StoreBusy(StoreError):
    """Another sweep is writing the store: a second one is refused before it starts (nothing written)."""


class StoreGone(RunError):
    """The store's file was deleted, moved or replaced after it was opened: the connection still writes to the file
    it opened, which no one opening the path will see again, so every write is refused instead. A RunError, not bad
    input: a run meeting it has usually stored trials already (the CLI exits 1, not 2)."""


class StoreWriteFailed(RunError):
    """A write failed part-way through a run (the disk filled, an I/O error): every row committed before it is kept."""


def _store_error(path: Path, e: sqlite3.Error) -> Exception:
    """One message for an SQLite error met while reading or writing ``path`` after it opened."""
    text = str(e)
    if isinstance(e, sqlite3.ProgrammingError) and "closed" in text:  # closed on another thread (Store.close)
        return StoreError(f"results store {path} was closed while this read it; read it again")
    if isinstance(e, sqlite3.OperationalError) and "readonly" in text:
        return StoreError(f"cannot write the results store {path}: {_read_only_why(path)}")
    if isinstance(e, sqlite3.OperationalError):  # full disk, I/O error, a lock held past the 30 s timeout
        fix = ("free the space or move --db" if "full" in text else
               "let the other writer (a sweep, a notebook) finish" if "locked" in text else "fix the cause")
        return StoreWriteFailed(f"results store {path}: {text}; every trial stored before this is kept ({fix}, "
                                "then re-run to resume)")
    return StoreError(f"{path} is damaged ({text}); `sqlite3 {path} .recover` can save its readable rows "
                      "into a new file")


def _read_only_why(path: Path) -> str:
    folder = _nearest_folder(path.parent)
    if folder != path.parent and not os.access(folder, os.W_OK):  # the store's folder is not there to write in
        return f"its folder {path.parent} cannot be made: {folder} is read-only"
    if not os.access(path.parent, os.W_OK):
        return f"its folder {path.parent} is read-only (SQLite writes its journal beside the file)"
    if path.exists() and not os.access(path, os.W_OK):
        return "the file is read-only"
    return "the file system is read-only"


def _nearest_folder(folder: Path) -> Path:
    """``folder``, or the nearest folder above it that exists."""
    while not folder.is_dir() and folder != folder.parent:
        folder = folder.parent
    return folder


def _make_folder(path: Path) -> None:
    """The store's own folder, made where its parent exists (``--db results/run.db``, as ``mkdir results`` would);
    a path further from anything that exists is more likely a typo (``--db /dta/runs/x.db``) than a wish for a chain
    of folders: one StoreError naming the first folder missing, and nothing made."""
    folder = path.parent
    if folder.is_dir():
        return
    if not folder.parent.is_dir() and file_in_the_way(folder) is None:  # a file in the way has its own message
        missing = next(p for p in [*reversed(folder.parents), folder] if not p.is_dir())
        raise StoreError(f"cannot make a results store at {path}: folder {missing} does not exist (only the store's "
                         f"own folder, {folder}, is made for it)")
    folder.mkdir(exist_ok=True)


class _Guarded:
    """The store's lock, which also turns an SQLite error met under it into a StoreError or StoreWriteFailed:
    every read and write of the store goes through ``with self._lock``, so no caller sees a raw sqlite3 error.
    pandas' read_sql_query wraps SQLite's error in its own DatabaseError; its cause is SQLite's."""

    def __init__(self, path: Path) -> None:
        self._lock = threading.Lock()
        self._path = path

    def __enter__(self) -> None:
        self._lock.acquire()

    def __exit__(self, kind, e, tb) -> bool:
        self._lock.release()
        cause = e if isinstance(e, sqlite3.Error) else getattr(e, "__cause__", None)
        if isinstance(cause, sqlite3.Error) and not isinstance(e, (StoreError, StoreWriteFailed)):
            raise _store_error(self._path, cause) from None
        return False


class SweepClaim:
    """One sweep writes a store at a time: ``SweepClaim.take(path)`` holds an exclusive ``flock`` on a lock file
    beside the store (``runs.db`` -> ``runs.db-sweep.lock``, holding the sweep's pid) until ``release()``, which
    removes the file. A second sweep of the same store, in another process or this one, is refused at once with
    StoreBusy: two sweeps at once would each time under the other's load, and each shape's decision
    (``selections``, one row per key, INSERT OR REPLACE) would be the last writer's while the other run prints its
    own. Readers (export, check, the workbench's views) never look at the lock; SQLite's own locks keep them
    consistent.

    Why a file of its own and not a flock on the database file: on Linux a flock is independent of SQLite's POSIX
    (fcntl) record locks on a local file system (checked: with SQLite holding its write lock, a flock on the same
    file was taken beside it, another process's flock was refused and the commit went through), but (1) releasing
    it means closing a descriptor of the database file, and POSIX drops every record lock a process holds on a file
    when any of its descriptors of it is closed: the sweep's connection silently loses its SHARED lock, and another
    connection closing then believes it is the last one, checkpoints and deletes the -wal the sweep still writes
    to (checked; SQLite's "How To Corrupt An SQLite Database File", 2.2); (2) on NFS, Linux emulates flock with a
    whole-file fcntl lock, which would block every reader's SQLite lock for the sweep's whole run. A lock file has
    neither problem, can say who holds it, and is removed on release (a ``kill -9`` leaves it behind, empty of any
    holder's lock: the next sweep takes it over).

    The folder must exist to hold the file: ``take`` returns None where it does not (the store makes its own folder
    when it opens; the sweep takes its claim then), where the lock file cannot be made (a read-only folder: the
    store's own open says why, or, where SQLite can still write the store, the sweep runs unclaimed as before) and
    on Windows."""

    def __init__(self, fd: int, path: Path) -> None:
        self._fd, self.path = fd, path

    @staticmethod
    def lock_path(db: str | Path) -> Path:
        real = Path(os.path.realpath(db))  # ./runs.db, runs.db and a symlink to it are one store: one lock
        return real.with_name(real.name + "-sweep.lock")

    @classmethod
    def take(cls, db: str | Path | None) -> SweepClaim | None:
        if fcntl is None or db is None or str(db) == ":memory:":
            return None
        path = cls.lock_path(db)
        if not path.parent.is_dir():
            return None
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError:
                return None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                holder = _pid_in(fd)
                os.close(fd)
                if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise StoreBusy(f"results store {db} is being written by another sweep "
                                    f"({_holder_text(holder)}); wait for it to finish, or give this sweep another "
                                    f"store (--db)") from None
                return None  # a file system without flock (ENOLCK): unclaimed, as before
            # The holder removes the file before it lets go: a lock won on a file no longer at the path (or on one
            # replaced since) guards nothing, so the claim is made again on what the path holds now.
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(path))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        try:  # the pid is for the refusal's message only: a full disk must not keep the lock taken with no owner
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError:
            pass
        return cls(fd, path)

    def release(self) -> None:
        if self._fd is None:
            return
        try:  # removed while still held, so no one can take a lock on a file about to vanish and keep it
            self.path.unlink()
        except OSError:
            pass
        os.close(self._fd)
        self._fd = None


def _pid_in(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # empty for the instant between the holder's lock and its write


def _holder_text(pid: int | None) -> str:
    if pid is None:
        return "its pid is not written yet"
    return f"in this process, pid {pid}" if pid == os.getpid() else f"pid {pid}"


def _shape_json(shape: dict) -> str:
    return json.dumps(shape, separators=(",", ":"))  # axis order kept: it is the kernel's order


def _num(v):
    """NaN and inf (a failed trial's latency) are stored as NULL: "no measurement", NaN in the DataFrame."""
    return None if v is None or (isinstance(v, float) and not math.isfinite(v)) else v


# read-only stores still open when the interpreter exits: closed first, while the modules close needs are there
_UNCLOSED_READERS: "weakref.WeakSet[Store]" = weakref.WeakSet()


@atexit.register
def _close_readers() -> None:
    for store in list(_UNCLOSED_READERS):
        try:
            store.close()
        except Exception:  # noqa: BLE001 - one store's trouble keeps no other from closing
            pass


class Store:
    def __init__(self, path: str | Path, readonly: bool = False) -> None:
        self.path = Path(path)
        self._db = None
        # SQLite makes a WAL database's -wal and -shm as it opens it, and a read-only connection (or one refused
        # before it could check them in) leaves them behind: a refused open removes the ones it made. SQLite makes
        # them beside the file a symlink points to, not beside the link
        real = None if str(path) == ":memory:" else os.path.realpath(self.path)
        sidecars = [] if real is None else [Path(f"{real}{end}") for end in ("-wal", "-shm")]
        made = [p for p in sidecars if not p.exists()]
        try:
            if str(path) != ":memory:" and self.path.is_dir():  # SQLite would only say "unable to open"
                raise StoreError(f"{self.path} is a folder, not a results store; name a file in it, e.g. "
                                 f"{self.path / 'runs.db'}")
            if readonly:
                if not self.path.exists():
                    raise StoreError(f"no results store at {self.path}")
                self._db = _connect_read_only(self.path)
            else:
                if str(path) != ":memory:":
                    _make_folder(self.path)
                self._db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None, timeout=30)
            tables = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if tables and "trials" not in tables:  # someone else's database: touch nothing
                raise StoreError(f"{self.path} is an SQLite database but not a flytune results store "
                                 f"(tables: {', '.join(sorted(tables))})")
            if readonly:
                if "trials" not in tables:
                    raise StoreError(f"{self.path} holds no flytune results")
            else:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: a committed row survives a kill
                self._db.executescript(SCHEMA)
                self._migrate()
        except (StoreError, sqlite3.DatabaseError, OSError) as e:
            if self._db is not None:  # refused: do not keep someone else's database open
                self._db.close()
            _remove_made(made)
            if isinstance(e, StoreError):
                raise
            if not readonly and str(path) != ":memory:" and _cannot_write(self.path, e):
                raise StoreError(f"cannot write a results store at {self.path}: {_read_only_why(self.path)}") \
                    from None
            if isinstance(e, sqlite3.OperationalError) and "disk is full" in str(e):
                raise StoreError(f"cannot start a results store at {self.path}: the disk is full") from None
            if isinstance(e, sqlite3.DatabaseError) and _damaged(self.path, e):
                # a store whose pages (or header) are broken, not some other file: told so, with the way to save
                # its rows, never "not a flytune database", which invites deleting the only copy
                raise _store_error(self.path, e) from None
            if isinstance(e, sqlite3.DatabaseError):
                raise StoreError(f"{self.path} is not a flytune results database ({e})") from None
            blocking = file_in_the_way(self.path.parent)
            if blocking is not None:  # mkdir's own word for it is "File exists" or "Not a directory"
                raise StoreError(f"cannot make a results store at {self.path}: {blocking} exists and is not a "
                                 f"folder") from None
            raise StoreError(f"cannot open a results store at {self.path}: {e.strerror or e}") from None
        # the -wal and -shm a read-only open made: its connection cannot remove them as it closes (close does).
        # Absolute, as self._file below: a relative name would point into another folder after a chdir.
        self._made = made if readonly else []
        self._lock = _Guarded(self.path)  # one connection shared by the sweep's per-GPU threads
        # which file was opened: SQLite keeps writing to it through its descriptor after it is deleted or moved, and
        # rows written then reach no one who opens the path (a new store there reads none of them). Its absolute
        # path, as SQLite resolved it when it opened: a relative one would name another file once the process
        # changes folder (a notebook's %cd), while the connection still writes the file it opened.
        self._file = None if str(path) == ":memory:" else Path(os.path.abspath(self.path))
        self._file_id = None if self._file is None else _file_id(self._file)
        self._rescued: Path | str | None = None  # where a deleted file's rows were saved ("": nowhere)
        self._rescue_lock = threading.Lock()
        self._rescued_rows = 0
        self._closed = False
        if self._made:
            _UNCLOSED_READERS.add(self)

    def _migrate(self) -> None:
        """Stores written before a column existed get it (NULL/0 for old rows), so old sweeps stay readable."""
        for table, column, decl in (("trials", "is_default", "INTEGER DEFAULT 0"), ("trials", "source", "TEXT"),
                                    ("trials", "binary", "TEXT"), ("trials", "twin_of", "TEXT"),
                                    ("trials", "timing", "TEXT"), ("runs", "device_info", "TEXT"),
                                    ("runs", "selection", "TEXT"),
                                    ("census", "sibling_of", "TEXT")):
            have = {row[1] for row in self._db.execute(f"PRAGMA table_info({table})")}
            if column not in have:
                self._db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        # a store dropped unclosed (`Store(path, readonly=True).frame()`): closing removes the -wal and -shm a
        # read-only open made, which the connection left to itself would not
        if getattr(self, "_made", None) and not getattr(self, "_closed", True):
            try:
                self.close()
            except Exception:  # noqa: BLE001 - interpreter teardown: nothing to report to
                pass

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        gone = self._file is not None and not self._file.exists()
        with self._lock:  # a reader on another thread (a view, the grid's estimate) finishes first
            if gone:
                # SQLite does not checkpoint a file that has moved when it closes it, and leaves its -wal at the old
                # path: the rows committed since the last checkpoint would be missing from the file where it went.
                # Done here only while nothing is at the path: a file there now may share that -wal by name.
                try:
                    self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                except sqlite3.Error:  # read-only: it wrote nothing to move
                    pass
            self._db.close()
        if gone and not self._file.exists():
            # the emptied -wal and the -shm: a new store at the path would take them for its own
            _remove_made([Path(f"{self._file}{end}") for end in ("-wal", "-shm")])
        elif self._made and any(p.exists() for p in self._made):
            _let_sqlite_remove_sidecars(self._file)

    def check_file(self) -> None:
        """StoreGone when the path no longer holds the file this store opened (deleted, moved, replaced); every
        write checks first."""
        if self._file_id is None:
            return
        try:
            now = _file_id(self._file)
        except FileNotFoundError:
            now = None
        except OSError:  # the folder cannot be read now: SQLite's own error says more when it writes
            return
        if now == self._file_id:
            return
        what = "was deleted or moved" if now is None else "was replaced by another file"
        with self._rescue_lock:  # the sweep's per-GPU threads may meet it at once: one copy, one path said
            if self._rescued is None:
                self._rescued = self._rescue() or ""
        saved = (f"; the {self._rescued_rows} trial(s) it held are saved in {self._rescued} (delete that file if "
                 f"you meant to throw them away)" if self._rescued else "")
        raise StoreGone(f"results store {self.path} {what} after it was opened: nothing more is written to it, "
                        f"since rows written now would go into a file no one can open" + saved)

    def _rescue(self) -> Path | None:
        """A copy of a store whose file was deleted while open (unlinked: this process still reads it through
        SQLite's open descriptor, and closing it loses every row), beside where it was: ``runs.db`` ->
        ``runs.rescued.db`` (``runs.rescued-2.db``, ... where that is taken). A file replaced by another
        (``os.replace`` over it) has no name left either, and is copied the same way. None for a file that was moved
        (its rows are in the file where it went; closing checkpoints the last of them there), and where this process
        cannot tell (no /proc) or cannot write the copy: then the message says nothing was saved."""
        if _links(self._file_id) != 0:
            return None
        stem, suffix = self._file.stem, self._file.suffix
        for i in range(1, 100):
            target = self._file.with_name(f"{stem}.rescued{'' if i == 1 else f'-{i}'}{suffix}")
            if target.exists():
                continue
            try:  # made here, exclusively: another process with the store open may take the name meanwhile
                os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            except FileExistsError:
                continue
            except OSError:  # the folder went too, or is read-only: nothing can be saved
                return None
            break
        else:
            return None
        with self._lock:  # another thread's write, already checked, must not land between the pages copied
            try:
                dst = sqlite3.connect(target)
                try:
                    self._db.backup(dst)
                    self._rescued_rows = dst.execute("SELECT COUNT(*) FROM trials").fetchone()[0]
                finally:
                    dst.close()
            except (sqlite3.Error, OSError):  # the folder went too, or is read-only: nothing could be saved
                _remove_made([target])
                return None
        return target

    # -- runs ----------------------------------------------------------------------------------------------------
    def start_run(self, kernel: str, grid, dtypes, strategy: str, budget, device: str,
                  device_info: dict | None = None, selection: dict | None = None) -> str:
        """``device_info``: the sweep's DeviceInfo as a dict (its raw torch name and CU count identify FlyDSL's
        offline configs at export); ``selection``: the run's selection rule as a dict (Rule.to_dict), which tells
        export that a shape of this run without a selection was cut off before it (artifacts/unfinished.py)."""
        run_id = time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
        self.check_file()
        with self._lock:
            self._db.execute(
                "INSERT INTO runs (run_id, kernel, grid, dtypes, strategy, budget, device, started, finished, "
                "device_info, selection) VALUES (?,?,?,?,?,?,?,?,NULL,?,?)",
                (run_id, kernel, json.dumps(grid), json.dumps(list(dtypes)), strategy, budget, device, _now(),
                 json.dumps(device_info, sort_keys=True) if device_info is not None else None,
                 json.dumps(selection, sort_keys=True) if selection is not None else None))
        return run_id

    def run_devices(self) -> dict[str, dict]:
        """run id -> the DeviceInfo dict its sweep recorded (runs from before stores kept it are left out)."""
        with self._lock:
            columns = {row[1] for row in self._db.execute("PRAGMA table_info(runs)")}
            if "device_info" not in columns:  # an older store opened read-only (not migrated)
                return {}
            rows = self._db.execute("SELECT run_id, device_info FROM runs WHERE device_info IS NOT NULL").fetchall()
        return {run_id: json.loads(info) for run_id, info in rows}

    def finish_run(self, run_id: str) -> None:
        """Marks a run that measured all it planned; a killed or stopped run keeps ``finished`` empty, which tells
        export that a shape of it with no selection was cut off mid-search."""
        self.check_file()
        with self._lock:
            self._db.execute("UPDATE runs SET finished=? WHERE run_id=?", (_now(), run_id))

    # -- trials --------------------------------------------------------------------------------------------------
    def add(self, trial: Trial, *, key: str, run_id: str, arch: str = "", toolchain: dict | None = None,
            is_default: bool = False, source: str = "", binary: str | None = None, twin_of: Config | None = None,
            timing: str = "events") -> None:
        """``is_default``: this config is the kernel's heuristic for the shape (exports report speed-up over it);
        ``source``: the kernel-source fingerprint (provenance); ``binary``: a hash of what the config compiled to
        (None: unknown); ``twin_of``: the config measured before it with the same binary, whose numbers it shares;
        ``timing``: the timing mode (events, graph)."""
        row = (run_id, trial.kernel, _shape_json(trial.shape), trial.dtype, trial.config.to_json(), trial.fidelity,
               trial.status, trial.reason, _num(trial.p20), _num(trial.p50), _num(trial.p80), _num(trial.rel_error),
               _num(trial.compile_s), trial.reps, trial.method, trial.device, arch, json.dumps(toolchain or {}), key,
               _now(), int(is_default), source, binary, None if twin_of is None else twin_of.to_json(), timing)
        self.check_file()
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO trials (run_id, kernel, shape, dtype, config, fidelity, status, reason, p20, "
                "p50, p80, rel_error, compile_s, reps, method, device, arch, toolchain, key, created, is_default, "
                "source, binary, twin_of, timing) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", row)

    def binaries_for(self, key: str) -> dict[Config, tuple[str | None, Config | None]]:
        """Stored (binary hash, twin_of) per config of one tuning key (full fidelity)."""
        with self._lock:
            rows = self._db.execute("SELECT config, binary, twin_of FROM trials WHERE key=? AND fidelity='full'",
                                    (key,)).fetchall()
        return {Config.from_json(c): (b, Config.from_json(t) if t else None) for c, b, t in rows}

    def trials_for(self, key: str) -> dict[tuple[Config, str], Trial]:
        """Stored trials of one tuning key, by (config, fidelity)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT kernel, shape, dtype, config, fidelity, status, reason, p20, p50, p80, rel_error, compile_s, "
                "reps, method, device FROM trials WHERE key=?", (key,)).fetchall()
        out = {}
        for (kernel, shape, dtype, config, fidelity, status, reason, p20, p50, p80, rel, comp, reps, method,
             device) in rows:
            t = Trial(kernel, json.loads(shape), dtype, Config.from_json(config), status, reason or "",
                      _inf(p20), _inf(p50), _inf(p80), _nan(rel), _nan(comp), reps or 0, method or "", device or "",
                      fidelity)
            out[(t.config, fidelity)] = t
        return out

    # -- the selection stage ---------------------------------------------------------------------------------------
    def add_retime(self, trial: Trial, *, key: str, run_id: str, round: int, timing: str = "events") -> None:
        """One contender's timing in one round of the selection stage (appended, never replaced)."""
        self.check_file()
        with self._lock:
            self._db.execute(
                "INSERT INTO retimes (run_id, key, kernel, shape, dtype, config, round, status, reason, p20, p50, p80, "
                "reps, method, device, timing, created) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (run_id, key, trial.kernel, _shape_json(trial.shape), trial.dtype, trial.config.to_json(), round,
                 trial.status, trial.reason, _num(trial.p20), _num(trial.p50), _num(trial.p80), trial.reps,
                 trial.method, trial.device, timing, _now()))

    def timed_beside(self, key: str | None = None) -> list[tuple[int, str, Config, str, Config, float]]:
        """The stored trials (of ``key``, where given) that a run timed beside fresh timings of other configs (its
        retimes rows of round -1, Sweep's ``beside``: the heuristic editor's Measure missing times the default again
        beside new picks the search never timed), one row per trial and config timed afresh: (trial id, key, config,
        fidelity, the config timed afresh, that timing's p50, inf where it failed). Every other trial was timed
        beside its shape's stored default."""
        if not self.has_table("retimes"):
            return []
        where, args = ("AND t.key=?", (key,)) if key is not None else ("", ())
        with self._lock:
            rows = self._db.execute(
                "SELECT t.id, t.key, t.config, t.fidelity, r.config, r.status, r.p50 FROM trials t JOIN retimes r "
                f"ON r.run_id = t.run_id AND r.key = t.key WHERE r.round = -1 {where}", args).fetchall()
        return [(i, k, Config.from_json(c), fidelity, Config.from_json(beside),
                 _inf(p50) if status == "ok" else math.inf) for i, k, c, fidelity, beside, status, p50 in rows]

    def on_search_clock(self, df):
        """``df``, a frame of this store's trials, with those a run timed beside a fresh timing of their shape's
        default (``timed_beside``) scaled by the default's stored p50 / that timing, as every view of the sweep shows
        them (engine/sweep.py): taken minutes later under another load (4x on a busy CPU), their raw medians would
        compete with the search's on the load."""
        beside = self.timed_beside() if not df.empty else []
        if not beside:
            return df
        with self._lock:
            rows = self._db.execute("SELECT key, config, p50 FROM trials WHERE is_default = 1 AND fidelity = 'full' "
                                    "AND status = 'ok'").fetchall()
        default_p50 = {(k, Config.from_json(c)): _inf(p50) for k, c, p50 in rows}
        factors = {}
        for i, k, _, _, beside_config, fresh in beside:
            then = default_p50.get((k, beside_config), math.nan)
            if 0 < then < math.inf and 0 < fresh < math.inf:
                factors[i] = then / fresh
        hit = df["id"].isin(list(factors))
        if not hit.any():
            return df
        df = df.copy()
        scale = df.loc[hit, "id"].map(factors)
        for col in ("p20", "p50", "p80"):
            df.loc[hit, col] = df.loc[hit, col] * scale
        return df

    def save_selection(self, sel, *, key: str, run_id: str, kernel: str, shape: dict, dtype: str, device: str,
                       timing: str = "events") -> None:
        """The decision for one key (replacing an earlier one), with what it was decided on."""
        d = sel.deciding
        timings = {c.to_json(): [_num(t) for t in ts] for c, ts in sel.timings.items()}
        self.check_file()
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO selections (run_id, key, kernel, shape, dtype, device, timing, default_config, "
                "winner, chose_default, reason, margin, spread, band, repeats, contenders, rule, timings, failed, "
                "summary, created) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (run_id, key, kernel, _shape_json(shape), dtype, device, timing, sel.default.to_json(),
                 sel.winner.to_json(), int(sel.chose_default), sel.reason, _num(d.margin) if d else None,
                 _num(d.spread) if d else None, _num(d.band) if d else None, sel.repeats,
                 json.dumps([c.to_json() for c in sel.contenders]), json.dumps(sel.rule.to_dict(), sort_keys=True),
                 json.dumps(timings), json.dumps({c.to_json(): r for c, r in sel.failed.items()}),
                 json.dumps(sel.summary(), sort_keys=True), _now()))

    def selection_for(self, key: str):
        """The stored decision for ``key`` as a Selection (re-decided from its stored timings), or None."""
        from flytune_nb.strategies.selection import Rule, decide

        with self._lock:
            row = self._db.execute("SELECT default_config, contenders, rule, timings, failed FROM selections "
                                   "WHERE key=?", (key,)).fetchone()
        if row is None:
            return None
        default, contenders, rule, timings, failed = row
        cands = [Config.from_json(c) for c in json.loads(contenders)][1:]
        timings = {Config.from_json(c): [_inf(t) for t in ts] for c, ts in json.loads(timings).items()}
        failed = {Config.from_json(c): r for c, r in json.loads(failed or "{}").items()}
        return decide(Config.from_json(default), cands, timings, Rule(**json.loads(rule)), failed)

    # -- baselines -----------------------------------------------------------------------------------------------
    def add_baseline(self, *, key: str, run_id: str, kernel: str, shape: dict, dtype: str, name: str, status: str,
                     reason: str, p20: float, p50: float, p80: float, device: str) -> None:
        self.check_file()
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO baselines (run_id, kernel, shape, dtype, name, status, reason, p20, p50, "
                "p80, device, key, created) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (run_id, kernel, _shape_json(shape), dtype, name, status, reason, _num(p20), _num(p50), _num(p80),
                 device, key, _now()))

    def baselines_for(self, key: str) -> dict[str, dict]:
        with self._lock:
            rows = self._db.execute("SELECT name, status, reason, p20, p50, p80 FROM baselines WHERE key=?",
                                    (key,)).fetchall()
        return {n: {"status": s, "reason": r, "p20": _inf(a), "p50": _inf(b), "p80": _inf(c)}
                for n, s, r, a, b, c in rows}

    # -- census (what each config compiles to on a target; flytune_nb.measure.census) ------------------------------
    def add_census(self, row, *, key: str, toolchain: dict | None = None, source: str = "") -> None:
        """One CensusRow under the target's tuning key (the key a sweep on that device would store its trials
        under), replacing a row of the same config."""
        rec = {**row.to_record(), "key": key, "toolchain": json.dumps(toolchain or {}), "source": source,
               "created": _now()}
        rec["shape"], rec["compile_s"] = _shape_json(rec["shape"]), _num(rec["compile_s"])
        self.check_file()
        with self._lock:
            self._db.execute(f"INSERT OR REPLACE INTO census ({', '.join(CENSUS_COLUMNS)}) VALUES "
                             f"({', '.join('?' * len(CENSUS_COLUMNS))})", tuple(rec[c] for c in CENSUS_COLUMNS))

    def census_for(self, key: str) -> dict:
        """Stored census rows of one tuning key, by Config."""
        return {row.config: row for row in self._census("key", key)}

    def census_rows(self, kernel: str) -> list:
        """Every stored census row of ``kernel``, as CensusRows, in the order they were stored."""
        return self._census("kernel", kernel)

    def _census(self, column: str, value: str) -> list:
        from flytune_nb.measure.census import CensusRow

        if not self.has_table("census"):  # a store written before the table existed, opened read-only
            return []
        with self._lock:
            # every column the table has: one written before a column existed, opened read-only (not migrated),
            # lacks it, and CensusRow reads such a column as unset
            cur = self._db.execute(f"SELECT * FROM census WHERE {column}=? ORDER BY id", (value,))
            names = [d[0] for d in cur.description]
            rows = [dict(zip(names, r)) for r in cur.fetchall()]
        return [CensusRow.from_record(r) for r in rows]

    # -- reading -------------------------------------------------------------------------------------------------
    def frame(self, kernel: str | None = None, table: str = "trials"):
        """The table as a pandas DataFrame, shape axes expanded into columns (M, N, ...)."""
        import pandas as pd

        _check_table(table)
        if not self.has_table(table):  # a store written before the table existed, opened read-only
            return pd.DataFrame()
        query = f"SELECT * FROM {table}" + (" WHERE kernel=?" if kernel else "")
        with self._lock:
            df = pd.read_sql_query(query, self._db, params=(kernel,) if kernel else ())
        if "shape" in df.columns and len(df):
            axes = pd.DataFrame([json.loads(s) for s in df["shape"]], index=df.index)
            df = pd.concat([df, axes], axis=1)
        return df

    def records(self, table: str = "trials", kernel: str | None = None) -> list[dict]:
        """The table's rows (of ``kernel``, where given) in the order they were stored, each a dict of its columns
        as stored: JSON columns (shape, config, toolchain) as text, NULL as None (a failed trial's latency, a
        selection without a band). ``frame`` holds the same rows, but pandas makes a NULL NaN, which is truthy and
        breaks ``x or default``, and an integer column with a NULL float; a script that reports stored numbers
        reads them here. [] for a table the store predates (an old store opened read-only)."""
        _check_table(table)
        if not self.has_table(table):
            return []
        where, args = (" WHERE kernel=?", (kernel,)) if kernel else ("", ())
        with self._lock:
            cur = self._db.execute(f"SELECT * FROM {table}{where} ORDER BY rowid", args)
            names = [d[0] for d in cur.description]
            return [dict(zip(names, r)) for r in cur.fetchall()]

    def kernels(self) -> list[str]:
        """The kernels this store has trials of, by name."""
        if not self.has_table("trials"):
            return []
        with self._lock:
            return sorted(r[0] for r in self._db.execute("SELECT DISTINCT kernel FROM trials"))

    def dtypes(self, kernel: str | None = None) -> list[str]:
        """The dtypes this store has trials in (of ``kernel``, where given)."""
        if not self.has_table("trials"):
            return []
        where, args = ("WHERE kernel=?", (kernel,)) if kernel else ("", ())
        with self._lock:
            return sorted(r[0] for r in self._db.execute(f"SELECT DISTINCT dtype FROM trials {where}", args))

    def has_table(self, table: str) -> bool:
        with self._lock:
            return self._db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?",
                                    (table,)).fetchone() is not None

    def count(self, table: str = "trials") -> int:
        if not self.has_table(table):
            return 0
        with self._lock:
            return self._db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]


TABLES = ("trials", "baselines", "runs", "retimes", "selections", "census")


def _check_table(table: str) -> None:
    if table not in TABLES:  # a table name goes into the SQL text: only the store's own
        raise UsageError(f"unknown table {table!r}; one of {', '.join(TABLES)}")


def _uri(path: Path, query: str) -> str:
    """SQLite's URI for ``path``: a ``?``, ``#`` or ``%`` in a file name would otherwise end or change it (a store
    named ``a?b.db`` read as ``a`` with the query ``b.db?mode=ro``, a file that holds no results). The empty
    authority (``file://`` + the path) keeps a path that starts with two slashes (``//data/runs.db``, which POSIX
    paths keep as written) a path: after ``file:`` alone SQLite reads ``//data`` as a host and refuses it. Quoted
    as the file system's bytes: a name that is not UTF-8 (café.db written by a Latin-1 system) is text with
    surrogates here, which quoting as UTF-8 text refuses with a UnicodeEncodeError; SQLite decodes %XX to bytes."""
    from urllib.parse import quote

    return f"file://{quote(os.fsencode(Path(path).absolute()))}?{query}"


def _connect_read_only(path: Path) -> sqlite3.Connection:
    """A read-only connection. A store in WAL mode needs its -shm file even to be read; in a folder this user may not
    write to (a read-only mount, a colleague's results) SQLite cannot make one and refuses with "unable to open
    database file". There the file is read as immutable (no locks, no -shm), which reads the database file alone: a
    store whose -wal still holds rows (its sweep was killed, or is running as another user) is refused instead, since
    those rows would be missing without a word."""
    def connect(flags: str) -> sqlite3.Connection:
        db = sqlite3.connect(_uri(path, f"mode=ro{flags}"), uri=True, check_same_thread=False, isolation_level=None,
                             timeout=30)
        try:
            db.execute("SELECT name FROM sqlite_master LIMIT 1")  # SQLite opens lazily: this is where it would fail
        except sqlite3.Error:
            db.close()
            raise
        return db

    try:
        return connect("")
    except sqlite3.OperationalError:
        if os.access(path.parent, os.W_OK):
            raise
        wal = Path(f"{path}-wal")
        if wal.exists() and wal.stat().st_size > 0:
            raise StoreError(f"{path} is in a read-only folder beside a write-ahead log ({wal.name}) that holds rows "
                             "SQLite can only read where it may write: copy both files to a folder of yours") from None
        return connect("&immutable=1")


_SQLITE_CORRUPT, _SQLITE_NOTADB = 11, 26  # SQLite's primary result codes (the low byte of an extended one)
SQLITE_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database file


def _damaged(path: Path, e: sqlite3.DatabaseError) -> bool:
    """Whether ``e`` says the file is an SQLite database with broken pages ("database disk image is malformed": a
    truncated copy, a disk error) or a broken header ("file is not a database", yet the file starts as SQLite's do),
    rather than a file that was never a database (a text file, a CSV named .db)."""
    code = getattr(e, "sqlite_errorcode", None)  # Python >= 3.11; the message before that
    corrupt = code & 0xFF == _SQLITE_CORRUPT if code is not None else "malformed" in str(e)
    notadb = code & 0xFF == _SQLITE_NOTADB if code is not None else "not a database" in str(e)
    if corrupt:
        return True
    if not notadb:
        return False
    try:  # SQLite cannot read this file at all, so no connection of this process holds a lock on it to lose
        with open(path, "rb") as f:
            return f.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:
        return False


def _let_sqlite_remove_sidecars(path: Path) -> None:
    """A read-write connection opened and closed: SQLite, closing a WAL database's last connection, checkpoints it and
    removes its -wal and -shm, and keeps both while any other connection (a sweep started meanwhile) has it open,
    which no check of ours could tell without a race. mode=rw never makes a database at a path that lost it."""
    if not (os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)):
        return  # SQLite could not remove them either
    try:
        db = sqlite3.connect(_uri(path, "mode=rw"), uri=True, isolation_level=None, timeout=1)
        try:
            db.execute("SELECT name FROM sqlite_master LIMIT 1")  # SQLite opens the WAL lazily: this is where
        finally:
            db.close()
    except sqlite3.Error:  # busy, or no longer a database: the files stay, as they did before
        pass


def _remove_made(made: list[Path]) -> None:
    """Remove the -wal and -shm files a refused open made (``made``: those that did not exist before it). A -wal
    that holds anything was written by someone else since (a process that opened the file meanwhile): both stay."""
    wal = [p for p in made if p.name.endswith("-wal")]
    try:
        if wal and wal[0].exists() and wal[0].stat().st_size > 0:
            return
        for p in made:
            p.unlink(missing_ok=True)
    except OSError:  # a read-only folder: SQLite could not make them either
        pass


def _cannot_write(path: Path, e: Exception) -> bool:
    """Whether opening ``path`` for writing failed because the place is read-only (not because the file is bad)."""
    if isinstance(e, OSError) and e.errno in (13, 30):  # EACCES, EROFS from mkdir
        return True
    text = str(e)
    return isinstance(e, sqlite3.OperationalError) and ("readonly" in text or "unable to open" in text) and (
        not os.access(path.parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)))


def _file_id(path: Path) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


def _links(file_id: tuple[int, int]) -> int | None:
    """How many names the file this process has open as ``file_id`` has left: 0 once it was deleted, while open
    descriptors keep its data. None where no open descriptor of it is found (no /proc: not Linux). Read through
    /proc/self/fd without opening the file: closing any descriptor of a database file drops every POSIX lock this
    process holds on it, SQLite's included (see SweepClaim)."""
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return None
    for fd in fds:
        try:
            st = os.stat(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == file_id:
            return st.st_nlink
    return None


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())


def _inf(v):
    return math.inf if v is None else v


def _nan(v):
    return math.nan if v is None else v
