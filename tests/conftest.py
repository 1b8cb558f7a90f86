import os

import pytest

from flytune_nb.device import DESCRIBED, current_device, ensure_backend

ensure_backend()  # TRITON_INTERPRET=1 on machines without a GPU, before any kernel module is imported

HERE = os.path.dirname(__file__)
PLUGINS = os.path.join(HERE, "plugins")
# A described H200 (what current_device() reports there), for CPU tests of GPU-only decisions; nothing runs on it.
H200 = DESCRIBED["NVIDIA_H200"]


def pytest_collection_modifyitems(config, items):
    if current_device().is_gpu:
        return
    skip = pytest.mark.skip(reason="needs a GPU (run on the device: pytest -m gpu)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    """Every test gets its own tuning cache and working directory (results stores land there), and never searches
    unless it asks to."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FLYTUNE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("FLYTUNE_AUTOTUNE", raising=False)
    monkeypatch.delenv("FLYTUNE_KERNEL_PATH", raising=False)


@pytest.fixture
def dev():
    return current_device()


@pytest.fixture
def cpu_timer():
    from flytune_nb.bench import CpuTimer

    return CpuTimer(reps=2, warmup=0)


@pytest.fixture
def timer(dev):
    from flytune_nb.bench import make_timer

    return make_timer(dev, reps=2, rep_ms=20, warmup_ms=5)
