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


@pytest.mark.parametrize("address, said", [
    ("auto", "Could not find any running Ray instance. Please specify the one to connect to by setting `--address` "
             "flag or `RAY_ADDRESS` environment variable."),
    ("10.0.0.1:6379", "Failed to connect to Ray cluster at 10.0.0.1:6379"),
])
def test_a_ray_address_with_no_cluster_is_one_usage_line(address, said, tmp_path, monkeypatch, capsys):
    """Ray's own words name an `--address` flag flytune does not have; the sweep says which --ray found no
    cluster and how to get one, exits 2, and writes no store."""
    from flytune_nb.ui.cli import main

    def no_cluster(*args, **kwargs):
        raise ConnectionError(said)

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", no_cluster)
    db = tmp_path / "ray.db"
    assert main(["sweep", "toy", "--path", PLUGINS, "--grid", "N=8", "--dtype", "fp32", "--db", str(db),
                 "--ray", address, "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"flytune: error: --ray {address}: no Ray cluster"), err
    assert "--address" not in err and "ray start --head" in err and "--ray local" in err, err
    assert not db.exists()
