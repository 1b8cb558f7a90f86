"""The Ray path, on a local Ray instance with CPUs only (as CI runs it)."""
import pytest

from flytune_nb.engine.store import Store
from flytune_nb.engine.sweep import Sweep
from tests.conftest import PLUGINS

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def test_ray_actors_run_the_sweep_and_results_land_in_the_same_store(local_ray, tmp_path, monkeypatch):
    monkeypatch.setenv("FLYTUNE_EVIL_MODES", "0,2")  # ok configs and one that aborts its process
    db = tmp_path / "ray.db"
    results = Sweep("evil", "N=8,16", ["fp32"], db=db, paths=[PLUGINS], ray="local", timeout=60,
                    baselines=()).run()
    assert [r.shape["N"] for r in results] == [8, 16]
    for r in results:
        statuses = {t.config["MODE"]: t.status for t in r.trials}
        assert statuses == {0: "ok", 2: "crashed"} and r.best.config["MODE"] == 0
        assert "Ray actor died" in next(t.reason for t in r.trials if t.status == "crashed")
    assert len(Store(db).frame()) == 6  # 2 shapes x (default + 1 sleep variant + abort)
