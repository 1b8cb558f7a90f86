"""The precompile pool: its environment, hangs, stop, queue order, a broken pool replaced, and compiling on meta
inputs without a GPU."""
import time
from types import SimpleNamespace

import pytest

from flytune_nb.core.events import TrialStarted
from flytune_nb.engine.sweep import Sweep, SweepError
from tests.conftest import PLUGINS


def test_precompile_pool_gets_its_environment_and_a_hang_only_ends_precompilation():
    from flytune_nb.engine.compile_pool import Precompiler

    ok = {"MODE": 0, "SLEEP_MS": 0, "num_warps": 1, "num_stages": 1}
    hang = {"MODE": 3, "SLEEP_MS": 0, "num_warps": 1, "num_stages": 1}
    plain = Precompiler(workers=1)
    try:
        assert plain.run("evil", (PLUGINS,), {"N": 8}, "fp32", [ok])["ok"] == 1
    finally:
        plain.close()
    marked = Precompiler(workers=1, env={"FLYTUNE_EVIL_POOL_MARK": "fail"})  # the pool's processes see this
    try:
        assert marked.run("evil", (PLUGINS,), {"N": 8}, "fp32", [ok])["failed"] == 1
    finally:
        marked.close()
    stuck = Precompiler(workers=1)
    t0 = time.time()
    # A fresh pool stalls for startup_s + per_config_s before it gives up on the hang: startup_s=4 is twice the ~2 s
    # its process takes to start here, and the bound below twice the 6 s limit.
    with pytest.warns(RuntimeWarning, match="stopped early"):
        res = stuck.run("evil", (PLUGINS,), {"N": 8}, "fp32", [hang], per_config_s=2, startup_s=4)
    stuck.close(kill=True)
    assert res["failed"] == 1 and time.time() - t0 < 12


def test_a_hung_leftover_of_a_finished_shape_costs_the_next_shape_no_precompile():
    """The pool is shared: when a finished shape's hung compile gets the pool killed, the next shape's compile that
    was running in it is started again in a fresh pool, not given up on (and no 'stopped early' warning)."""
    import warnings

    from flytune_nb.engine.compile_pool import Precompiler

    hang = {"MODE": 3, "SLEEP_MS": 0, "num_warps": 1, "num_stages": 1}
    slow = {"MODE": 0, "SLEEP_MS": 4000, "num_warps": 1, "num_stages": 1}
    pc = Precompiler(workers=3)
    try:
        first = pc.submit("evil", (PLUGINS,), {"N": 8}, "fp32", [hang], per_config_s=3, startup_s=30)
        assert first.futs  # the hang has started
        time.sleep(2)
        first.close()  # the shape is done; its hung compile is past its limit a second later
        second = pc.submit("evil", (PLUGINS,), {"N": 16}, "fp32", [slow], per_config_s=60, startup_s=30)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert second.wait(slow) == "ok"
        assert not second.dead
    finally:
        pc.close(kill=True)


def test_precompile_pool_starts_before_planning_and_closes_if_planning_fails(monkeypatch):
    """The pool's processes (each imports torch: seconds) start while the timing worker plans, not after; a sweep
    whose planning fails leaves no pool behind."""
    from flytune_nb.engine.compile_pool import Precompiler

    order, closed = [], []
    real_warm, real_close, real_plan = Precompiler.warm, Precompiler.close, Sweep._plan
    monkeypatch.setattr(Precompiler, "warm", lambda self, *a: (order.append("warm"), real_warm(self, *a))[1])
    monkeypatch.setattr(Precompiler, "close", lambda self, kill=False: (closed.append(kill), real_close(self, kill))[1])
    monkeypatch.setattr(Sweep, "_plan", lambda self, lane: (order.append("plan"), real_plan(self, lane))[1])
    r = Sweep("toy", "N=64", ["fp32"], paths=[PLUGINS], precompile=True, baselines=(), isolate=False).run()[0]
    assert order == ["warm", "plan"] and closed == [False]
    plain = Sweep("toy", "N=64", ["fp32"], paths=[PLUGINS], precompile=False, baselines=(), isolate=False).run()[0]
    assert r.best is not None and [(t.config, t.status) for t in r.trials] == [(t.config, t.status) for t in plain.trials]

    def broken_plan(self, lane):
        raise SweepError("toy: cannot prepare the shape")

    monkeypatch.setattr(Sweep, "_plan", broken_plan)
    with pytest.raises(SweepError):
        Sweep("toy", "N=64", ["fp32"], paths=[PLUGINS], precompile=True, baselines=(), isolate=False).run()
    assert closed[-1] is True


def test_stop_ends_a_precompile_batch_without_waiting_for_it():
    """Stop / Ctrl-C during precompilation: the wait ends within a fraction of a second and the configs not yet
    started are cancelled, instead of sitting through the batch (here: hangs that would hold it for its deadline)."""
    import threading

    from flytune_nb.engine.compile_pool import Precompiler

    hang = {"MODE": 3, "SLEEP_MS": 0, "num_warps": 1, "num_stages": 1}
    stop = threading.Event()
    pc = Precompiler(workers=1)
    try:
        threading.Timer(1.0, stop.set).start()
        t0 = time.time()
        res = pc.run("evil", (PLUGINS,), {"N": 8}, "fp32", [hang, dict(hang, SLEEP_MS=1)], per_config_s=600,
                     startup_s=600, stop=stop)
        assert res["stopped"] and time.time() - t0 < 10  # not the 1800 s the batch's deadline allows
    finally:
        pc.close(kill=True)


def test_timing_waits_only_for_its_own_config_to_compile():
    """The pool compiles in timing order and each trial waits for its own config: a config whose compile takes 4 s
    does not hold back the one before it (a compile-everything-first barrier would: the H200's first trial would wait
    3.1 s for all 47)."""
    from flytune_nb.engine.compile_pool import Precompiler

    fast = {"MODE": 0, "SLEEP_MS": 0, "num_warps": 1, "num_stages": 1}
    slow = dict(fast, SLEEP_MS=4000)  # compile_one runs the config once: 4 s in the pool
    pc = Precompiler(workers=3)  # two compiling ahead, one kept free for what the timing worker asks for
    try:
        batch = pc.submit("evil", (PLUGINS,), {"N": 8}, "fp32", [fast, slow])
        assert batch.wait(fast) == "ok"
        t0 = time.time()
        assert batch.wait(fast) == "ok" and not batch.futs[next(k for k in batch.futs if "4000" in k)].done()
        assert time.time() - t0 < 1
        assert batch.wait(slow) == "ok" and batch.wait({"MODE": 9}) == "absent"
    finally:
        pc.close()


def test_each_trial_waits_for_its_config_before_it_starts(monkeypatch):
    from flytune_nb.engine.compile_pool import Batch

    order = []
    real_wait = Batch.wait
    def wait(self, c, stop=None):
        r = real_wait(self, c, stop)
        order.append(("wait", c["MODE"], c["SLEEP_MS"], r))
        return r

    monkeypatch.setattr(Batch, "wait", wait)
    listen = lambda e: isinstance(e, TrialStarted) and order.append(("start", e.config["MODE"], e.config["SLEEP_MS"]))  # noqa: E731
    monkeypatch.setenv("FLYTUNE_EVIL_MODES", "0")
    monkeypatch.setenv("FLYTUNE_EVIL_SLEEPS", "0,1,2")
    r = Sweep("evil", "N=8", ["fp32"], paths=[PLUGINS], precompile=True, baselines=(), isolate=False,
              listeners=[listen]).run()[0]
    assert all(t.ok for t in r.trials) and len(r.trials) == 3
    assert order == [e for s in (0, 1, 2) for e in (("wait", 0, s, "ok"), ("start", 0, s))]


def test_compiling_on_meta_refuses_real_launches_and_keeps_compile_errors():
    """The pool compiles on meta tensors with a stand-in Triton driver (no CUDA in the pool). A wrapper that launches
    outside flytune_nb.kit.launcher would launch a kernel on null pointers: Triton's launch-enter hook refuses it, as the
    stand-in refuses anything but device/stream/target, and the caller falls back to real inputs. A config's own
    compile error is not retried. Driver and hook are restored either way."""
    import torch
    from triton import knobs
    from triton.runtime.driver import driver

    from flytune_nb.backends.triton import compile_on_meta
    from flytune_nb.core.config import Config
    from flytune_nb.kit import launcher as launch

    seen = []

    class CompilationError(Exception):
        pass

    def run_ok(inputs, config):
        t = driver.active.get_current_target()
        seen.append((inputs["x"].device.type, launch._COMPILE_ONLY[0], driver.active.get_current_device(),
                     (t.backend, t.arch, t.warp_size)))

    def run_direct(inputs, config):
        knobs.runtime.launch_enter_hook(None)  # what Triton's launcher calls first on a real launch

    def run_asks_more(inputs, config):
        driver.active.utils  # noqa: B018 - e.g. loading a binary: needs the real driver

    def run_bad(inputs, config):
        raise CompilationError("at 3:4: bad config")

    hook, active = knobs.runtime.launch_enter_hook, driver._active
    spec = lambda run: SimpleNamespace(run=run)  # noqa: E731
    meta = {"x": torch.empty(8, device="meta")}
    cfg, target = Config({"BLOCK": 8}), ("cuda", 90, 32)
    assert compile_on_meta(spec(run_ok), meta, cfg, target) is True
    assert seen == [("meta", "cuda", 0, target)] and launch._COMPILE_ONLY[0] is None
    assert compile_on_meta(spec(run_direct), meta, cfg, target) is False
    assert compile_on_meta(spec(run_asks_more), meta, cfg, target) is False
    with pytest.raises(CompilationError):
        compile_on_meta(spec(run_bad), meta, cfg, target)
    assert knobs.runtime.launch_enter_hook is hook and driver._active is active


def test_the_pools_target_follows_tritons_cuda_rule_without_asking_its_driver(monkeypatch):
    """Triton's CudaDriver says GPUTarget("cuda", major*10+minor, 32); reading that from torch spares the timing
    worker building Triton's driver helpers before the pool has work. (test_gpu.py compares with Triton's driver.)"""
    import torch

    from flytune_nb.backends import triton as compiling
    from flytune_nb.core import device
    from tests.conftest import H200 as gpu
    monkeypatch.setattr(device, "current_device", lambda index=0: gpu)
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    assert compiling.current_target() == ("cuda", 90, 32)
    monkeypatch.setattr(device, "current_device", lambda index=0: device.interpreter_device())
    assert compiling.current_target() is None


def test_the_pools_target_on_hip_is_what_tritons_driver_says(monkeypatch):
    """HIP has no rule to read from torch (gfx942 vs gfx950, 64-wide waves): the target is the driver's, asked
    through flytune_nb._compat.triton; a Triton whose driver cannot say leaves it to the real driver (None)."""
    import torch

    import flytune_nb._compat.triton as tc
    from flytune_nb.backends import triton as compiling
    from flytune_nb.core import device
    from tests.conftest import MI300X_PROPS

    monkeypatch.setattr(device, "current_device", lambda index=0: device.from_properties(MI300X_PROPS, hip=True))
    monkeypatch.setattr(torch.version, "hip", "6.4")
    monkeypatch.setattr(tc, "driver_target", lambda: ("hip", "gfx942", 64))
    assert compiling.current_target() == ("hip", "gfx942", 64)
    monkeypatch.setattr(tc, "driver_target", lambda: None)
    assert compiling.current_target() is None


def test_a_broken_pool_is_replaced_and_a_stale_batch_leaves_the_new_one_alone():
    """A config that takes a pool process down breaks the whole pool. The next submit (another lane's shape) gets a
    fresh pool instead of an exception, and when the first batch finds its broken future later it kills only the
    pool it ran on, not the one the other lane is compiling in."""
    from flytune_nb.engine.compile_pool import Precompiler

    ok = {"MODE": 0, "SLEEP_MS": 0, "num_warps": 1, "num_stages": 1}
    crash, slow = dict(ok, MODE=4), dict(ok, SLEEP_MS=1500)
    pc = Precompiler(workers=1)
    try:
        first = pc.submit("evil", (PLUGINS,), {"N": 8}, "fp32", [crash])
        broken = next(iter(first.futs.values()))
        with pytest.raises(Exception, match="abruptly|terminated|Broken"):
            broken.result(timeout=120)
        second = pc.submit("evil", (PLUGINS,), {"N": 8}, "fp32", [slow])
        with pytest.warns(RuntimeWarning, match="stopped early"):
            assert first.wait(crash) == "dead"
        assert second.wait(slow) == "ok"
    finally:
        pc.close(kill=True)


def test_a_config_the_worker_asks_for_jumps_the_queue():
    """The pool keeps one compile per process in flight, from the queue's head; a config the timing worker asks for
    that has not started is started at once. A budgeted search's picks (random, surrogate: a few dozen of a
    1000-config space) so wait behind at most the compiles in flight, not behind the whole space; and a shape's
    leftovers are dropped when it is closed."""
    from flytune_nb.engine.compile_pool import Precompiler, _key

    ok = {"MODE": 0, "SLEEP_MS": 0, "num_warps": 1, "num_stages": 1}
    slow = [dict(ok, SLEEP_MS=900 + i) for i in range(5)]
    pc = Precompiler(workers=1)
    try:
        first = pc.submit("evil", (PLUGINS,), {"N": 8}, "fp32", slow, per_config_s=30, startup_s=60)
        assert first.wait(slow[0]) == "ok"
        t0 = time.time()
        assert first.wait(slow[4]) == "ok" and time.time() - t0 < 2.7  # behind one in flight, not three queued
        first.close()  # at most one more of its queue (slow[2]) may have started as slow[4] finished
        other = pc.submit("evil", (PLUGINS,), {"N": 16}, "fp32", [ok], per_config_s=30, startup_s=60)
        t0 = time.time()
        assert other.wait(ok) == "ok" and time.time() - t0 < 2.7
        time.sleep(2)
        assert _key(slow[3]) not in first.futs  # the leftovers were not started after the shape was closed
    finally:
        pc.close(kill=True)


def test_a_budgeted_search_gets_its_picks_precompiled(monkeypatch):
    """random / surrogate with a budget use the pool too: each pick jumps the queue, so every pick waits for, and gets,
    its own compile, never for the whole space (compiling all of it for a few picks would cost more than it saves)."""
    from flytune_nb.engine.compile_pool import Batch

    waits = []
    real_wait = Batch.wait
    monkeypatch.setattr(Batch, "wait", lambda self, c, stop=None: (waits.append(r := real_wait(self, c, stop)), r)[1])
    monkeypatch.setenv("FLYTUNE_EVIL_MODES", "0")
    monkeypatch.setenv("FLYTUNE_EVIL_SLEEPS", ",".join(str(i) for i in range(12)))
    r = Sweep("evil", "N=8", ["fp32"], paths=[PLUGINS], precompile=True, baselines=(), isolate=False,
              strategy="random", budget=4).run()[0]
    assert len(r.trials) == 4 and all(t.ok for t in r.trials)
    assert waits == ["ok"] * 4


def test_a_hung_compile_of_a_finished_shape_does_not_hold_the_pool():
    """The pool compiles ahead; a config nobody waits for (its shape is done) that hangs would hold a process for
    good, and with all of them held the next shape would wait out the stall limit. Past its shape's per-config
    limit such a compile's pool is killed and the next start gets a fresh one."""
    from flytune_nb.engine.compile_pool import Precompiler

    ok = {"MODE": 0, "SLEEP_MS": 0, "num_warps": 1, "num_stages": 1}
    hang = dict(ok, MODE=3)
    pc = Precompiler(workers=2)
    try:
        done = pc.submit("evil", (PLUGINS,), {"N": 8}, "fp32", [hang], per_config_s=1.0, startup_s=60)
        t0 = time.time()
        while not done.futs and time.time() - t0 < 60:
            time.sleep(0.05)
        hung = next(iter(done.futs.values()))
        done.close()
        t0 = time.time()
        while not hung.done() and time.time() - t0 < 30:
            time.sleep(0.1)
        assert hung.done()  # killed with its pool, not left running
        nxt = pc.submit("evil", (PLUGINS,), {"N": 16}, "fp32", [ok], per_config_s=30, startup_s=60)
        assert nxt.wait(ok) == "ok"
    finally:
        pc.close(kill=True)


