"""--gpus (Sweep(gpus=...)) names devices this machine has: checked before anything starts, and each worker pinned to
the GPU the index means here, within a CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES already set."""
import random
import types

import pytest

from flytune_nb.core import device
from flytune_nb.engine import lanes
from flytune_nb.engine.lanes import check_gpus, local_lanes, pin_env
from flytune_nb.engine.sweep import Sweep
from flytune_nb.errors import UsageError
from tests.conftest import PLUGINS


def _as_gpu_machine(monkeypatch, count, hip=None):
    """This process as one that sees ``count`` GPUs (CUDA, or ROCm with ``hip`` a version): nothing runs on them."""
    import torch

    monkeypatch.setattr(device, "ensure_backend", lambda: None)
    monkeypatch.setattr(device, "interpreting", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch, "version", types.SimpleNamespace(**{**vars(torch.version), "hip": hip}))
    for var in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"):
        monkeypatch.delenv(var, raising=False)


def test_gpus_on_the_interpreter_are_a_count_of_cpu_workers_not_devices(tmp_path):
    assert device.interpreting()
    n = random.randrange(1, 5)
    assert check_gpus(list(range(n))[::-1]) == list(range(n))[::-1]  # 0..n-1: n CPU workers share the shapes
    far = sorted(random.sample(range(n, 64), 2))
    db = tmp_path / "g.db"
    with pytest.raises(UsageError, match=rf"^--gpus {far[0]},{far[1]}: there is no GPU here \(Triton's CPU "
                                         rf"interpreter runs the trials\); on it --gpus only sets how many CPU "
                                         rf"workers share the shapes, numbered from 0 \(--gpus 0,1 for 2\)$"):
        Sweep("toy", "N=64", ["fp32"], db=db, paths=[PLUGINS], gpus=far)
    from flytune_nb.ui.cli import main

    assert main(["sweep", "toy", "--path", PLUGINS, "--grid", "N=64", "--dtype", "fp32", "--db", str(db),
                 "--gpus", ",".join(map(str, far)), "--quiet"]) == 2
    assert not db.exists()  # refused before anything started or was written
    g = random.randrange(0, 8)
    with pytest.raises(UsageError, match=f"names GPU {g} twice: two workers on one GPU"):
        check_gpus([g, g])
    with pytest.raises(UsageError, match="GPU indices are whole numbers >= 0"):
        check_gpus([-1 - g])
    with pytest.raises(UsageError, match=r"several GPUs need isolated workers .*\(isolate=False in Python and the "
                                         r"workbench\)$"):
        check_gpus([0, 1], isolate=False)


def test_gpus_beyond_the_machines_are_refused_naming_those_it_has(monkeypatch):
    count = random.randrange(2, 8)
    _as_gpu_machine(monkeypatch, count)
    assert check_gpus(list(range(count))) == list(range(count))
    extra = random.randrange(count, 16)
    with pytest.raises(UsageError, match=rf"^--gpus 0,{extra}: there is no GPU {extra} here; this machine has "
                                         rf"{count} GPUs: {', '.join(map(str, range(count)))}$"):
        check_gpus([0, extra])
    # CUDA_VISIBLE_DEVICES set before flytune started: torch counts what it leaves, and --gpus numbers within it
    visible = ",".join(str(7 - i) for i in range(count))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    with pytest.raises(UsageError, match=rf"GPUs: .* \(numbered within CUDA_VISIBLE_DEVICES={visible}\)$"):
        check_gpus([extra])
    # in-process trials run on this process's GPU 0, whatever index was asked for
    assert check_gpus([0], isolate=False) == [0]
    with pytest.raises(UsageError, match=rf"^--gpus {count - 1} with --no-isolate \(isolate=False\): trials run in "
                                         rf"this process, on its GPU 0; drop it to run them on GPU {count - 1}$"):
        check_gpus([count - 1], isolate=False)


def test_a_worker_is_pinned_to_the_gpu_its_index_means_here(monkeypatch):
    _as_gpu_machine(monkeypatch, 2)
    assert pin_env(1) == {"CUDA_VISIBLE_DEVICES": "1"}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "6, 4")  # GPU 1 of this process is the machine's GPU 4
    assert pin_env(1) == {"CUDA_VISIBLE_DEVICES": "4"}
    assert [lane.env for lane in local_lanes([1, 0], isolate=True)] == [{"CUDA_VISIBLE_DEVICES": "4"},
                                                                       {"CUDA_VISIBLE_DEVICES": "6"}]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-3f2a,GPU-9c1d")  # UUIDs are entries like any other
    assert pin_env(0) == {"CUDA_VISIBLE_DEVICES": "GPU-3f2a"}
    # ROCm: HIP_VISIBLE_DEVICES applies first and CUDA_VISIBLE_DEVICES within it; only the last set one is touched
    _as_gpu_machine(monkeypatch, 2, hip="6.2")
    assert pin_env(1) == {"HIP_VISIBLE_DEVICES": "1"}
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "2,3")
    assert pin_env(1) == {"HIP_VISIBLE_DEVICES": "3"}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    assert pin_env(1) == {"CUDA_VISIBLE_DEVICES": "0"}
    assert lanes._visible_var() == "CUDA_VISIBLE_DEVICES"
