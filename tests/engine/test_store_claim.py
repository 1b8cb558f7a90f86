"""One sweep writes a store at a time: a second is refused at once, with the holder named, and the store is left as
it was; readers never wait; sweeps one after another in one process (the workbench's run, then its "measure
missing") each take and give back the claim."""
import os
import random
import subprocess
import sys

import pytest

from flytune_nb.engine.store import Store, StoreBusy, SweepClaim
from flytune_nb.engine.sweep import Sweep
from tests.conftest import PLUGINS, REPO, count_rows

HOLD = """
import sys
from flytune_nb.engine.store import SweepClaim
claim = SweepClaim.take(sys.argv[1])
print("held" if claim is not None else "not held", flush=True)
sys.stdin.read()  # held until the test closes the pipe
claim.release()
"""


def _sweep(db, n):
    return Sweep("toy", f"N={n}", ["fp32"], db=db, paths=[PLUGINS], isolate=False, baselines=())


def _snapshot(db):
    """The store's file and its -wal (the -shm is SQLite's index of the -wal, which readers write to as well)."""
    return {p.name: p.read_bytes() for p in (db, db.with_name(db.name + "-wal")) if p.exists()}


def test_a_second_sweep_of_a_store_is_refused_while_another_writes_it(tmp_path):
    rng = random.Random()
    first, second, third = rng.sample(range(16, 512), 3)
    db = tmp_path / "runs.db"
    _sweep(db, first).run()
    stored = count_rows(db)
    assert stored > 0 and not SweepClaim.lock_path(db).exists()  # given back, and its file removed
    before = _snapshot(db)

    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": REPO})
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(StoreBusy, match=rf"^results store {db} is being written by another sweep "
                                            rf"\(pid {holder.pid}\); wait for it to finish, or give this sweep "
                                            rf"another store \(--db\)$"):
            _sweep(db, second).run()
        from flytune_nb.ui.cli import main

        assert main(["sweep", "toy", "--path", PLUGINS, "--grid", f"N={second}", "--dtype", "fp32", "--db", str(db),
                     "--no-isolate", "--quiet"]) == 2
        assert _snapshot(db) == before  # both refused before they opened the store: not a byte written
        # readers are not kept waiting by a sweep's claim
        assert Store(db, readonly=True).count() == stored
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    assert holder.returncode == 0 and not SweepClaim.lock_path(db).exists()

    results = _sweep(db, second).run()  # the holder is gone: this one runs
    assert results[0].shape == {"N": second} and count_rows(db) > stored

    # in this process: a claim held (a notebook's sweep in its thread) refuses another sweep, naming this process
    claim = SweepClaim.take(db)
    try:
        with pytest.raises(StoreBusy, match=rf"another sweep \(in this process, pid {os.getpid()}\)"):
            _sweep(Store(db), third).run()
    finally:
        claim.release()
    # one after the other on one Store object, as the workbench runs a sweep and then its "measure missing"
    shared = Store(db)
    _sweep(shared, third).run()
    again = _sweep(shared, third)
    again.run()
    assert again.measured == 0 and not SweepClaim.lock_path(db).exists()


def test_a_claim_left_by_a_killed_sweep_is_taken_over(tmp_path):
    db = tmp_path / "runs.db"
    lock = SweepClaim.lock_path(db)
    lock.write_text(f"{random.randrange(2, 1 << 22)}\n")  # kill -9 leaves the file, but no process holds its lock
    claim = SweepClaim.take(db)
    assert claim is not None and lock.read_text() == f"{os.getpid()}\n"
    claim.release()
    assert not lock.exists()
    # a store in memory is nobody else's: nothing to claim
    assert SweepClaim.take(":memory:") is None and SweepClaim.take(None) is None
