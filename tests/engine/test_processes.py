"""Worker processes: the forkserver, what each forked worker inherits (the caller's environment, Triton's version
key, torch's meta machinery, torch.compile settings), prestart, and a worker that cannot start."""
import os
import subprocess
import sys

from flytune_nb.engine.sweep import Sweep
from tests.conftest import PLUGINS, REPO


def _triton_key_cached() -> int:
    from flytune_nb._compat.triton import version_key_computed

    return int(version_key_computed())


def _meta_machinery_loaded() -> list:
    import sys

    return [m for m in ("torch._refs", "torch.fx.experimental.symbolic_shapes", "sympy") if m not in sys.modules]


def test_a_worker_takes_the_callers_environment_as_it_is_at_each_start(monkeypatch):
    """Workers fork from one forkserver, which keeps the environment it started with; each worker must still see
    the caller's as it is when the worker starts (a benchmark points TRITON_CACHE_DIR at a fresh folder per run),
    variables set since and variables removed since alike. The evil plugin fails while FLYTUNE_EVIL_POOL_MARK is set."""
    from flytune_nb.engine.lanes import ProcessLane

    ok = {"MODE": 0, "SLEEP_MS": 0, "num_warps": 1, "num_stages": 1}

    def trial(pin=None):
        lane = ProcessLane(pin)
        try:
            return lane.call("trial", dict(kernel="evil", paths=(PLUGINS,), shape={"N": 8}, dtype="fp32", config=ok,
                                           timer=(("reps", 1),)), timeout=120)
        finally:
            lane.close()

    assert trial()["status"] == "ok"
    monkeypatch.setenv("FLYTUNE_EVIL_POOL_MARK", "fail")
    t = trial()
    assert t["status"] == "launch_error" and "POOL_MARK is set" in t["reason"]
    monkeypatch.delenv("FLYTUNE_EVIL_POOL_MARK")
    assert trial()["status"] == "ok"
    assert trial({"FLYTUNE_EVIL_POOL_MARK": "fail"})["status"] == "launch_error"  # a lane's own pin wins


def test_forked_processes_start_with_tritons_version_key_computed():
    """Triton hashes its sources and all of libtriton for its version key, once per process: 3.9 s of a pool
    process's first compile on the H200 host. The forkserver computes it once and every forked process inherits it."""
    from flytune_nb.engine.compile_pool import Precompiler

    pc = Precompiler(workers=1)
    try:
        assert pc._get_pool().submit(_triton_key_cached).result(timeout=120) == 1
    finally:
        pc.close()


def test_forked_processes_start_with_torchs_meta_machinery_imported():
    """The first meta-tensor op imports ~800 modules; every pool process and every worker's describe runs one. On
    the H200 host (no bytecode caches) that is 3.3 s per process, 4.3-5.7 s before the first config compiles. The
    forkserver does it once and every forked process inherits it."""
    from flytune_nb.engine.compile_pool import Precompiler

    pc = Precompiler(workers=1)
    try:
        assert pc._get_pool().submit(_meta_machinery_loaded).result(timeout=120) == []
    finally:
        pc.close()


def test_a_worker_forgets_what_the_caller_removed_after_the_forkserver_started():
    """The forkserver keeps the environment it started with; a variable the caller removed since must not reach a
    worker. Run in a fresh interpreter so that its forkserver starts with FLYTUNE_EVIL_POOL_MARK set."""
    code = (f"""
import os
os.environ["FLYTUNE_EVIL_POOL_MARK"] = "fail"
from flytune_nb.engine.lanes import ProcessLane
ok = {{"MODE": 0, "SLEEP_MS": 0, "num_warps": 1, "num_stages": 1}}
def trial():
    lane = ProcessLane()
    try:
        return lane.call("trial", dict(kernel="evil", paths=({PLUGINS!r},), shape={{"N": 8}}, dtype="fp32",
                                       config=ok, timer=(("reps", 1),)), timeout=120)["status"]
    finally:
        lane.close()
first = trial()
del os.environ["FLYTUNE_EVIL_POOL_MARK"]
print(first, trial())
""")
    env = {k: v for k, v in os.environ.items() if k != "FLYTUNE_EVIL_POOL_MARK"}
    root = REPO
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env, cwd=root)
    assert out.stdout.split() == ["launch_error", "ok"], out.stderr[-2000:]


def test_a_torch_compile_setting_changed_after_the_forkserver_started_reaches_the_processes(tmp_path):
    """Inductor reads TORCHINDUCTOR_* once, at import, and the forkserver imports it: a change made after the server
    started must still reach a worker or pool process (they are spawned then), or the torch.compile baseline would
    run with the old setting. Run in a fresh interpreter so that its forkserver starts without the variable."""
    script = tmp_path / "inductor_env.py"
    script.write_text("""
import concurrent.futures as cf
import os


def max_autotune():
    import torch._inductor.config as c

    return c.max_autotune


def ask():
    from flytune_nb.engine.processes import context

    ctx = context()
    with cf.ProcessPoolExecutor(1, mp_context=ctx) as ex:
        return ctx.get_start_method(), ex.submit(max_autotune).result(timeout=120)


if __name__ == "__main__":
    first = ask()
    os.environ["TORCHINDUCTOR_MAX_AUTOTUNE"] = "1"
    print(*first, *ask())
""")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHINDUCTOR_")}
    root = REPO
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env, cwd=root)
    assert out.stdout.split() == ["forkserver", "False", "spawn", "True"], out.stderr[-2000:]


def test_prestart_starts_the_forkserver_in_the_background():
    """`flytune sweep` and the workbench start the forkserver before their own imports, so the server's torch import
    overlaps theirs (a CLI sweep on these 2-core machines: 5.5 s -> 3.3 s). It must return at once and leave a
    running server that the first worker then forks from."""
    code = """
import time
from multiprocessing import forkserver
from flytune_nb.engine.processes import prestart
t0 = time.perf_counter()
prestart()
returned = time.perf_counter() - t0
while forkserver._forkserver._forkserver_pid is None and time.perf_counter() - t0 < 60:
    time.sleep(0.05)
from flytune_nb.engine.lanes import ProcessLane
lane = ProcessLane()
lane.call("describe", dict(kernel="rmsnorm", paths=(), shape={"M": 2, "N": 64}, dtype="fp32"), timeout=120)
lane.close()
print(returned < 0.5, forkserver._forkserver._forkserver_pid is not None)
"""
    root = REPO
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env, cwd=root)
    assert out.stdout.split() == ["True", "True"], out.stderr[-2000:]


def test_an_interrupt_while_the_forkserver_imports_neither_kills_it_nor_prints_a_traceback():
    """Jupyter interrupts a kernel's whole process group as it shuts it down, papermill's runs included: a server
    still importing torch died there with a KeyboardInterrupt traceback. Interrupted every 0.1 s from its start, it
    must come up and stay, silent."""
    code = """
import os, signal, time
from multiprocessing import forkserver
from flytune_nb.engine.processes import prestart
prestart()
while forkserver._forkserver._forkserver_pid is None:
    time.sleep(0.01)
pid = forkserver._forkserver._forkserver_pid
for _ in range(30):
    time.sleep(0.1)
    os.kill(pid, signal.SIGINT)
time.sleep(3)
print("alive", os.waitpid(pid, os.WNOHANG) == (0, 0))
"""
    env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env, cwd=REPO)
    assert out.stdout.split() == ["alive", "True"], out.stdout + out.stderr[-2000:]
    assert "KeyboardInterrupt" not in out.stderr, out.stderr[-2000:]


def test_a_script_without_a_main_guard_gets_told_why_its_worker_did_not_start(tmp_path):
    """Worker processes import the main script (Python's multiprocessing does); a script that sweeps at import time
    makes the worker exit at start-up. The error must say what to change, not only "exited with code 1"."""
    script = tmp_path / "unguarded.py"
    script.write_text("from flytune_nb.engine.sweep import Sweep\n"
                      f"Sweep('toy', 'N=64', ['fp32'], paths=[{PLUGINS!r}], baselines=()).run()\n")
    root = REPO
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env,
                         cwd=tmp_path)
    assert out.returncode != 0
    assert 'if __name__ == "__main__":' in out.stderr and "unguarded.py" in out.stderr, out.stderr[-1500:]


def test_a_profiled_worker_writes_snapshots_and_an_unwritable_folder_costs_no_trial(tmp_path, monkeypatch):
    """FLYTUNE_PROFILE_DIR makes the timing worker write cumulative cProfile snapshots (relative paths are the
    caller's); a folder it cannot write to only stops the profiling, and every trial is still measured."""
    import pstats

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FLYTUNE_PROFILE_DIR", "prof")  # relative to the caller, not to the worker's cwd
    # no selection stage: its re-timings are worker calls too, and this counts them
    r = Sweep("rmsnorm", "M=2 N=64", ["fp32"], strategy="random", budget=2, baselines=(), selection=None).run()[0]
    assert all(t.ok for t in r.trials)
    snaps = sorted((tmp_path / "prof").glob("worker-*.prof"))
    assert len(snaps) == 3  # describe, then one per trial
    assert any("trial" in f[2] for f in pstats.Stats(str(snaps[-1])).stats)
    (tmp_path / "blocker").write_text("x")
    monkeypatch.setenv("FLYTUNE_PROFILE_DIR", str(tmp_path / "blocker" / "prof"))
    r = Sweep("rmsnorm", "M=2 N=64", ["fp32"], strategy="random", budget=2, baselines=()).run()[0]
    assert len(r.trials) == 2 and all(t.ok for t in r.trials)


