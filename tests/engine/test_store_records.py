"""Store.records: a table's rows as stored, for scripts (the benchmarks) that report a store's numbers without SQL of
their own or pandas' NaN for NULL."""
import json
import sqlite3

import pytest

from flytune_nb.core.config import Config
from flytune_nb.engine.store import Store
from flytune_nb.errors import UsageError
from flytune_nb.measure.trial import Trial


def _trial(kernel, n, status="ok", p50=2.5):
    return Trial(kernel, {"M": 4, "N": n}, "fp32", Config({"BLOCK": n}, num_warps=4), status,
                 reason="" if status == "ok" else "out of resources", p20=p50, p50=p50, p80=p50)


def test_records_are_the_stored_rows_in_order_with_null_as_none(tmp_path):
    store = Store(tmp_path / "s.db")
    store.add(_trial("toy", 256), key="k1", run_id="r1", toolchain={"triton": "3.6.0"}, is_default=True)
    store.add(_trial("other", 64), key="k2", run_id="r1")
    store.add(_trial("toy", 512, "compile_error", float("inf")), key="k1", run_id="r1",
              twin_of=Config({"BLOCK": 256}, num_warps=4))
    rows = store.records("trials", "toy")
    b256, b512 = (Config({"BLOCK": n}, num_warps=4).to_json() for n in (256, 512))
    assert [(r["config"], r["status"], r["p50"], r["is_default"], r["twin_of"]) for r in rows] == [
        (b256, "ok", 2.5, 1, None), (b512, "compile_error", None, 0, b256)]
    assert rows[0]["shape"] == '{"M":4,"N":256}' and json.loads(rows[0]["toolchain"]) == {"triton": "3.6.0"}
    assert [r["kernel"] for r in store.records()] == ["toy", "other", "toy"]
    assert store.records("selections") == []
    # what frame reads as NaN (truthy: `band or 0.02` would keep it) is None here
    assert store.frame("toy")["p50"].isna().tolist() == [False, True]
    with pytest.raises(UsageError, match="unknown table 'trails'; one of trials, baselines, runs, retimes"):
        store.records("trails")
    store.close()


def test_a_table_an_old_store_predates_has_no_records(tmp_path):
    db = tmp_path / "old.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE trials (id INTEGER PRIMARY KEY, kernel TEXT, config TEXT, p50 REAL)")
    con.execute("INSERT INTO trials (kernel, config, p50) VALUES ('toy', '{}', 1.5)")
    con.commit()
    con.close()
    store = Store(db, readonly=True)  # not migrated: read as it is
    assert store.records("retimes") == [] and store.records("census") == []
    assert store.records("trials") == [{"id": 1, "kernel": "toy", "config": "{}", "p50": 1.5}]
    store.close()
