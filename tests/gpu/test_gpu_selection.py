"""GPU checks of the selection stage, identical binaries and graph timing (skipped without a GPU).
Run on the device: python -m pytest -m gpu tests/gpu/test_gpu_selection.py (~1 min on the H200)."""
import sqlite3

import pytest
import torch

from flytune_nb.core.registry import get_kernel
from flytune_nb.engine.sweep import Sweep
from flytune_nb.measure.timer import GpuTimer
from flytune_nb.measure.trial import evaluate

pytestmark = pytest.mark.gpu


def test_graph_timing_restores_in_place_state_and_leaves_the_callers_tensors_alone(dev):
    """fused_add_rmsnorm mutates its residual: in graph mode the snapshot is put back before each replay (the
    10 captured calls run on the state the previous left), and the caller's tensors come back as they were."""
    spec = get_kernel("fused_add_rmsnorm")
    shape = {"M": 16, "N": 4096}
    inputs = spec.make_inputs(shape, "bf16", dev)
    before = {k: v.clone() for k, v in inputs.items() if hasattr(v, "clone")}
    t = evaluate(spec, shape, "bf16", spec.default(shape, "bf16", dev), dev, GpuTimer(dev, rep_ms=10, graph=True),
                 inputs=inputs)
    assert t.ok and t.method == "graph" and 0 < t.p50 < 0.1, t
    assert torch.equal(inputs["residual"], before["residual"]) and torch.equal(inputs["x"], before["x"])


def test_twins_are_timed_once_in_a_real_sweep_and_their_hash_is_the_pools(tmp_path):
    """rmsnorm 4096 x 4096 on sm_90: 51 configs, 30 distinct binaries (the looped configs' num_stages changes no
    code). Every config has a hash from the precompile pool, and only one config per hash was timed."""
    db = tmp_path / "t.db"
    [r] = Sweep("rmsnorm", "M=4096 N=4096", ["bf16"], db=db, baselines=(), timer={"rep_ms": 5}).run()
    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT config, binary, twin_of FROM trials").fetchall()
    hashes = {b for _, b, _ in rows}
    assert None not in hashes and len(rows) == len(r.trials)
    timed = [cfg for cfg, _, twin in rows if twin is None]
    assert len(timed) == len(hashes) < len(rows), (len(timed), len(hashes), len(rows))
    twins = [t for t in r.trials if t.reason.startswith("same binary as")]
    assert twins and all(t.ok for t in twins)
    assert r.selection is not None and r.selection.repeats >= 5 or r.selection.reason.startswith("no candidate")


def test_a_graph_mode_sweep_keys_apart_from_events_and_exports_its_mode(tmp_path):
    from flytune_nb.artifacts.export import export
    from flytune_nb.engine.store import Store

    db = tmp_path / "g.db"
    for timing in ("events", "graph"):
        Sweep("rmsnorm", "M=1 N=4096", ["bf16"], db=db, baselines=(), timer={"rep_ms": 5}, timing=timing,
              strategy="random", budget=6).run()
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT COUNT(DISTINCT key), COUNT(DISTINCT timing) FROM trials").fetchone() == (2, 2)
        assert {m for (m,) in c.execute("SELECT method FROM trials WHERE timing='graph'")} == {"graph"}
    [path] = export(Store(db), tmp_path / "ex")
    import json

    assert json.loads((path.parent / "provenance.json").read_text())[path.name]["1"]["timing"] == "graph"
