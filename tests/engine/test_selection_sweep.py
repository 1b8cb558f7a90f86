"""The sweep's selection stage, identical binaries and timing modes, end to end on the CPU (the evil plugin's
sleeps make the timings known; its ``extra["binary"]`` stands in for Triton's cubin hash, which the interpreter
has none of)."""
import dataclasses
import json
import sqlite3

import pytest

from flytune_nb.artifacts.export import export
from flytune_nb.artifacts.files import ArtifactError
from flytune_nb.core.config import Config
from flytune_nb.core.registry import get_kernel
from flytune_nb.core.events import ShapeSelected, TrialStarted
from flytune_nb.engine.store import Store
from flytune_nb.engine.sweep import Sweep
from flytune_nb.errors import UsageError
from flytune_nb.strategies.selection import INTERPRETER_RULE, Rule
from tests.conftest import PLUGINS


def _sleep(ms):
    return Config({"MODE": 0, "SLEEP_MS": ms}, num_warps=1)


@pytest.fixture
def evil(monkeypatch):
    """evil with only working configs, sleeping 0, 20, 25 or 40 ms, and a given default."""
    monkeypatch.setenv("FLYTUNE_EVIL_MODES", "0")
    monkeypatch.setenv("FLYTUNE_EVIL_SLEEPS", "0,20,25,40")

    def make(default_ms, binary=None):
        spec = get_kernel("evil", [PLUGINS])
        return dataclasses.replace(spec, default=lambda s, d, dev: _sleep(default_ms),
                                   extra={"binary": binary} if binary else {})
    return make


def _rows(db, table, where=""):
    with sqlite3.connect(db) as c:
        c.row_factory = sqlite3.Row
        return [dict(r) for r in c.execute(f"SELECT * FROM {table} {where}")]


def test_a_faster_candidate_wins_every_timing_is_stored_a_rerun_reuses_it_and_the_export_says_why(evil, tmp_path):
    db, events = tmp_path / "s.db", []
    rule = Rule(top=2, rounds=3)
    [r] = Sweep(evil(20), "N=16", ["fp32"], db=db, isolate=False, baselines=(), selection=rule,
                listeners=[events.append]).run()
    # contenders: the default (20 ms) and the one config faster than it in the search (0 ms); 25 and 40 are slower
    assert r.selection.contenders == [_sleep(20), _sleep(0)] and r.selection.winner == _sleep(0)
    assert r.pick.config == _sleep(0) and r.selection.deciding.margin > 0.5 and r.selection.repeats == 3
    retimes = _rows(db, "retimes")
    assert len(retimes) == 6 and sorted({x["round"] for x in retimes}) == [0, 1, 2]
    assert {json.loads(x["config"])["SLEEP_MS"] for x in retimes} == {0, 20}
    assert [e for e in events if isinstance(e, ShapeSelected)][0].selection is r.selection
    [sel] = _rows(db, "selections")
    assert sel["chose_default"] == 0 and sel["repeats"] == 3 and 0.02 <= sel["band"] < sel["margin"]
    # resumed: nothing timed again, the stored decision comes back
    events.clear()
    [r2] = Sweep(evil(20), "N=16", ["fp32"], db=db, isolate=False, baselines=(), selection=rule,
                 listeners=[events.append]).run()
    assert not [e for e in events if isinstance(e, TrialStarted)] and len(_rows(db, "retimes")) == 6
    assert r2.selection.winner == _sleep(0) and r2.selection.repeats == 3
    # the export carries the decision, and its latencies are the re-timed medians, not the search's minimum
    [path] = export(Store(db), tmp_path / "ex", paths=[PLUGINS])
    assert json.loads(path.read_text())["16"]["SLEEP_MS"] == 0
    prov = json.loads((path.parent / "provenance.json").read_text())[path.name]["16"]
    won = sorted(x["p50"] for x in retimes if json.loads(x["config"])["SLEEP_MS"] == 0)
    dflt = sorted(x["p50"] for x in retimes if json.loads(x["config"])["SLEEP_MS"] == 20)
    assert prov["best_p50_ms"] == pytest.approx(won[1]) and prov["default_p50_ms"] == pytest.approx(dflt[1])
    assert prov["selection"]["winner"] == "candidate" and prov["selection"]["repeats"] == 3
    assert prov["selection"]["margin"] > prov["selection"]["band"] >= 0.02
    assert prov["timing"] == "events" and "search_best_p50_ms" in prov


def test_the_default_is_kept_when_nothing_beats_it_and_the_stage_can_be_turned_off(evil, tmp_path):
    db = tmp_path / "s.db"
    [r] = Sweep(evil(0), "N=16", ["fp32"], db=db, isolate=False, baselines=(), selection=Rule(top=2, rounds=3)).run()
    assert r.selection.chose_default and r.selection.repeats == 0 and not _rows(db, "retimes")
    [path] = export(Store(db), tmp_path / "ex", paths=[PLUGINS])
    prov = json.loads((path.parent / "provenance.json").read_text())[path.name]["16"]
    assert prov["selection"]["winner"] == "default" and "no candidate" in prov["selection"]["reason"]
    [r] = Sweep(evil(20), "N=8", ["fp32"], db=db, isolate=False, baselines=(), selection=None).run()
    assert r.selection is None and r.pick is r.best and len(_rows(db, "retimes")) == 0
    # the interpreter's default rule re-times one candidate over 3 rounds: its timings only exercise the machinery
    [r] = Sweep(evil(20), "N=4", ["fp32"], db=db, isolate=False, baselines=()).run()
    assert r.selection.rule == INTERPRETER_RULE and len(_rows(db, "retimes", "WHERE shape='{\"N\":4}'")) == 6


def test_identical_binaries_are_timed_once_and_never_contend(evil, tmp_path):
    """The default sleeps 25 ms; 20 ms "compiles to the same binary" (the stand-in hash), so it is recorded as the
    default's measurement, not timed, and cannot be picked over it. 0 and 40 are timed."""
    def binary(shape, dtype, config, device):
        return f"{config['MODE']}-{config['SLEEP_MS'] // 10}"

    db, events = tmp_path / "t.db", []
    [r] = Sweep(evil(25, binary), "N=16", ["fp32"], db=db, isolate=False, baselines=(), listeners=[events.append],
                selection=Rule(top=3, rounds=3)).run()
    by_ms = {t.config["SLEEP_MS"]: t for t in r.trials}
    assert by_ms[20].p50 == by_ms[25].p50 and by_ms[20].reason.startswith("same binary as")
    assert by_ms[25].p50 > 20 and by_ms[40].p50 > 35  # these two really slept
    assert len([e for e in events if isinstance(e, TrialStarted)]) == 4  # every config counted, one not timed
    rows = {json.loads(x["config"])["SLEEP_MS"]: x for x in _rows(db, "trials")}
    assert Config.from_json(rows[20]["twin_of"]) == _sleep(25)
    assert rows[20]["binary"] == rows[25]["binary"] == "0-2" and rows[40]["twin_of"] is None
    assert r.selection.contenders == [_sleep(25), _sleep(0)]
    # resumed: the twin stays a twin
    [r2] = Sweep(evil(25, binary), "N=16", ["fp32"], db=db, isolate=False, baselines=(),
                 selection=Rule(top=3, rounds=3)).run()
    assert r2.selection.contenders == [_sleep(25), _sleep(0)]


def test_a_worker_process_hashes_binaries_too(tmp_path, monkeypatch):
    """The same through an isolated worker: the kernel folder's own stand-in (FLYTUNE_EVIL_TWINS) answers the
    worker's binary task."""
    monkeypatch.setenv("FLYTUNE_EVIL_MODES", "0")
    monkeypatch.setenv("FLYTUNE_EVIL_SLEEPS", "0,3,15")
    monkeypatch.setenv("FLYTUNE_EVIL_TWINS", "1")
    db = tmp_path / "w.db"
    [r] = Sweep("evil", "N=16", ["fp32"], db=db, paths=[PLUGINS], baselines=(), selection=None).run()
    twins = {json.loads(x["config"])["SLEEP_MS"]: x["twin_of"] for x in _rows(db, "trials")}
    assert twins[15] is None and twins[0] is None and json.loads(twins[3])["SLEEP_MS"] == 0


def test_the_timing_mode_is_part_of_the_key_the_store_and_the_provenance(tmp_path):
    db = tmp_path / "g.db"
    [ev] = Sweep("rmsnorm", "M=2 N=64", ["fp32"], db=db, isolate=False, baselines=(), strategy="random", budget=2,
                 selection=None).run()
    [gr] = Sweep("rmsnorm", "M=2 N=64", ["fp32"], db=db, isolate=False, baselines=(), strategy="random", budget=2,
                 selection=None, timing="graph").run()
    trials = _rows(db, "trials")
    assert len({x["key"] for x in trials}) == 2 and {x["timing"] for x in trials} == {"events", "graph"}
    # an events export, then a graph one into the same file: never mixed
    export(Store(db), tmp_path / "ex")  # the newest (graph) rows win the file
    [path] = list((tmp_path / "ex").rglob("N=64,*.json"))
    prov = json.loads((path.parent / "provenance.json").read_text())[path.name]["2"]
    assert prov["timing"] == "graph"
    Sweep("rmsnorm", "M=4 N=64", ["fp32"], db=tmp_path / "e.db", isolate=False, baselines=(), strategy="random",
          budget=2, selection=None).run()
    with pytest.raises(ArtifactError, match="timing mode"):
        export(Store(tmp_path / "e.db"), tmp_path / "ex")
    # timer={"graph": True} is the same mode by another name; a contradiction is refused
    assert Sweep("rmsnorm", "M=2 N=64", ["fp32"], timer={"graph": True}).timing == "graph"
    with pytest.raises(UsageError, match="contradicts"):
        Sweep("rmsnorm", "M=2 N=64", ["fp32"], timer={"graph": True}, timing="events")
    with pytest.raises(UsageError, match="unknown timing mode"):
        Sweep("rmsnorm", "M=2 N=64", ["fp32"], timing="cuda-graph")


def test_a_selection_that_is_not_a_rule_is_one_message_for_sweep_and_tuned():
    from flytune_nb.serve.tuned import tuned

    for make in (lambda s: Sweep("rmsnorm", "M=2 N=64", ["fp32"], selection=s),
                 lambda s: tuned("rmsnorm", selection=s)):
        with pytest.raises(UsageError, match="no field round"):
            make({"round": 3})
        with pytest.raises(UsageError, match="selection must be a Rule"):
            make("fastest")
        with pytest.raises(UsageError, match="rounds and top are at most"):
            make({"rounds": 10**6})
    assert tuned("rmsnorm", selection=None).rule == Rule(top=0)
