"""Every entry point from a clean environment, and what happens to a sweep's processes when it is stopped, interrupted
or killed. These run real subprocesses (the CLI, python -c, papermill) with an environment like a user's shell: no
TRITON_INTERPRET (the test session sets it for itself), no test variables.

The interpreter race they guard: Triton builds its @jit helpers (tl.sum, ...) for one mode when triton.language is
first imported. A forkserver whose preload imports Triton before the interpreter switch is decided hands its children
a Triton in which no interpreted kernel can run: on a machine without a GPU every trial is then `launch_error:
InterpreterError: RuntimeError("Cannot call @triton.jit'd outside of the scope of a kernel")`, in the CLI, python -c
and the notebook alike. A test environment that presets TRITON_INTERPRET hides it, which is why these tests build
their own."""
import json
import os
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import PLUGINS, REPO


def clean_env(tmp_path, **extra) -> dict:
    """What a user's shell has: PATH, HOME, and PYTHONPATH to this checkout (the tests run the working tree)."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "PYTHONPATH": REPO,
           "LANG": os.environ.get("LANG", "C.UTF-8")}
    env.update(extra)
    return env


def _count(db) -> int:
    try:
        with sqlite3.connect(db) as c:
            return c.execute("SELECT COUNT(*) FROM trials").fetchone()[0]
    except sqlite3.OperationalError:
        return 0


def _descendants(pid: int) -> set[int]:
    """Every process under ``pid`` (from /proc's parent links)."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    out, stack = set(), [pid]
    while stack:
        for c in children.get(stack.pop(), []):
            if c not in out:
                out.add(c)
                stack.append(c)
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait_for(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout:.0f} s")
        time.sleep(0.1)


def test_cli_sweep_from_a_clean_environment_passes_on_the_cpu(tmp_path):
    env = clean_env(tmp_path)
    db = tmp_path / "c.db"
    out = subprocess.run([sys.executable, "-m", "flytune_nb.ui.cli", "sweep", "rmsnorm", "--grid", "M=2 N=256",
                          "--dtype", "fp32", "--strategy", "random", "--budget", "3", "--db", str(db), "--quiet"],
                         env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "this run): 0 of 3 failed" in out.stdout, out.stdout
    statuses = [r[0] for r in sqlite3.connect(db).execute("SELECT status FROM trials")]
    assert statuses == ["ok"] * 3


def test_python_api_from_a_clean_environment_passes_on_the_cpu(tmp_path):
    code = ("from flytune_nb import Sweep\n"
            "r = Sweep('rmsnorm', 'M=2 N=256', ['fp32'], strategy='random', budget=3, db='api.db').run()[0]\n"
            "print(sorted({t.status for t in r.trials}), len(r.trials))\n")
    out = subprocess.run([sys.executable, "-c", code], env=clean_env(tmp_path), capture_output=True, text=True,
                         timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "['ok'] 3"


def test_papermill_batch_from_a_clean_environment_passes_and_keeps_its_outputs_beside_the_store(tmp_path):
    """papermill's kernel inherits its caller's environment: a clean one here. The batch notebook takes a timeout
    and a kernel path, and its default results land beside its store, not in the folder papermill ran from."""
    pytest.importorskip("papermill")
    (tmp_path / "runs").mkdir()
    code = ("from flytune_nb.ui.papermill import run_notebook, printed_output\n"
            "import sys\n"
            "nb = run_notebook('batch_sweep.ipynb', 'out/batch.ipynb', {'kernel': 'evil', 'grid': 'N=16', 'dtypes': "
            "'fp32', 'db': 'runs/b.db', 'export_dir': None, 'paths': [sys.argv[1]], 'timeout': 3}, cwd='.')\n"
            "print(printed_output(nb))\n")
    env = clean_env(tmp_path, FLYTUNE_EVIL_MODES="0,3", FLYTUNE_EVIL_SLEEPS="0")
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-c", code, PLUGINS], env=env, capture_output=True, text=True,
                         timeout=600, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "2 trials in runs/b.db (" in out.stdout, out.stdout
    assert "this run): 1 of 2 failed (all: timeout: no answer within 3 s" in out.stdout, out.stdout
    assert time.monotonic() - t0 < 120  # the hang cost its 3 s timeout, not the fixed 120 s
    assert "without encryption" not in out.stderr  # ipykernel's start-up warning, in every run before
    assert (tmp_path / "runs" / "b.results.csv").exists() and (tmp_path / "runs" / "b.results.json").exists()
    assert not (tmp_path / "results.csv").exists() and not (tmp_path / "out" / "results.csv").exists()


def test_a_killed_sweeps_workers_end_even_when_the_hang_holds_the_gil(tmp_path):
    """kill -9 of the CLI during a hanging config ends the worker, the forkserver and the resource tracker within
    15 s (a worker left alive on a GPU box keeps holding the GPU). MODE 5 hangs in C holding the GIL, so no Python
    thread of the worker can notice anything: only the kernel's parent-death signal ends it."""
    db = tmp_path / "k.db"
    env = clean_env(tmp_path, FLYTUNE_EVIL_MODES="0,5", FLYTUNE_EVIL_SLEEPS="0")
    proc = subprocess.Popen([sys.executable, "-m", "flytune_nb.ui.cli", "sweep", "evil", "--path", PLUGINS, "--grid",
                             "N=16", "--dtype", "fp32", "--db", str(db), "--quiet", "--timeout", "300"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path,
                            start_new_session=True)
    try:
        _wait_for(lambda: _count(db) >= 1, 240, "the default config was not stored")
        time.sleep(1.0)  # the hanging config is in flight now
        family = _descendants(proc.pid)
        assert len(family) >= 2, family  # the forkserver and the worker at least (and the resource tracker)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        _wait_for(lambda: not any(_alive(p) for p in family), 15,
                  f"children {[p for p in family if _alive(p)]} of the killed sweep still ran")
    finally:
        for p in _descendants(proc.pid):
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _torch_loading(pid: int) -> bool:
    """Whether process ``pid`` has started importing torch (its shared library is mapped): flytune_nb's import is
    under way, with most of torch's Python side (~1 s on 2 cores) still to come."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            return "libtorch" in f.read()
    except OSError:
        return False


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="finds the import under way through /proc")
def test_ctrl_c_while_the_command_imports_is_one_line_and_status_130(tmp_path):
    """Ctrl-C in the command's first second, while flytune_nb imports torch and before ui/cli.main's handler runs:
    one line and 130, as later interrupts give, never a KeyboardInterrupt traceback (or worse: torch's and numpy's
    import code does not survive an exception raised inside it). The signal is sent once torch is seen loading, and
    then after a few random delays, so most land inside the import and none depends on this machine's speed."""
    import random

    script = Path(sys.executable).parent / "flytune"
    commands = [[sys.executable, "-m", "flytune_nb", "kernels"]] + ([[str(script), "kernels"]] if script.exists()
                                                                     else [])
    inside = 0
    for cmd in commands:
        for delay in [0.0] + random.sample([0.05, 0.1, 0.2, 0.3], 2):
            proc = subprocess.Popen(cmd, env=clean_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, cwd=tmp_path,
                                    preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
            deadline = time.monotonic() + 120
            while not _torch_loading(proc.pid) and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.005)
            time.sleep(delay)
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 130, (cmd, delay, proc.returncode, err[-3000:])
            assert "Traceback" not in err and len(err.splitlines()) == 1, (cmd, delay, err[-3000:])
            assert out == "", (cmd, delay, out[-500:])  # nothing listed: interrupted before the command ran
            inside += err == "flytune: interrupted before anything ran\n"
    assert inside >= len(commands), inside  # at least the interrupts sent as torch started loading


def test_a_process_spawned_by_the_command_does_not_take_itself_for_the_command(tmp_path):
    """A spawned child (no forkserver, or one whose environment changed) gets the command's sys.argv before it
    imports flytune_nb: it must not install the command's import-time Ctrl-C handler, which would end a worker with
    "interrupted before anything ran" in the middle of a sweep. The command itself still does."""
    script = tmp_path / "flytune"  # what the console script's name makes sys.argv[0]
    script.write_text(textwrap.dedent("""
        import multiprocessing as mp
        import sys


        def probe(q):
            import flytune_nb
            q.put((flytune_nb._started_as_the_cli(), flytune_nb._SIGINT_BEFORE is not None))


        if __name__ == "__main__":
            import flytune_nb
            print("command", flytune_nb._started_as_the_cli(), flytune_nb._SIGINT_BEFORE is not None)
            ctx = mp.get_context("spawn")
            q = ctx.Queue()
            p = ctx.Process(target=probe, args=(q,))
            p.start()
            print("spawned", *q.get(timeout=120))
            p.join(60)
        """))
    # as from a terminal: a test run started in the background inherits SIGINT ignored, and the command then keeps it
    out = subprocess.run([sys.executable, str(script), "sweep"], env=clean_env(tmp_path), capture_output=True,
                         text=True, cwd=tmp_path, timeout=300,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[:2] == ["command True True", "spawned False False"], (out.stdout, out.stderr)


def _toy_plugins_with(tmp_path, code: str) -> Path:
    """A folder holding the toy kernel plugin with ``code`` (indented as in the caller) appended to its kernel.py."""
    plugins = tmp_path / "plugins"
    shutil.copytree(Path(PLUGINS) / "toy", plugins / "toy")
    with open(plugins / "toy" / "kernel.py", "a") as f:
        f.write(textwrap.dedent(code))
    return plugins


def test_ctrl_c_after_the_command_is_done_lets_it_end_with_its_own_status(tmp_path):
    """Once the command's output is out, tearing the interpreter down takes seconds where SGLang and FlyDSL were
    imported; a Ctrl-C then must not turn a finished command into one killed by SIGINT (status -2). A kernel folder
    whose module takes 20 s to tear down stands in for them, and says when its teardown has begun."""
    marker = tmp_path / "tearing-down"
    plugins = _toy_plugins_with(tmp_path, f"""

            class _SlowTeardown:
                def __del__(self, _open=open, _sleep=__import__("time").sleep):  # no imports at shutdown
                    _open({str(marker)!r}, "w").close()
                    _sleep(20)


            _SLOW_TEARDOWN = _SlowTeardown()
        """)
    proc = subprocess.Popen([sys.executable, "-m", "flytune_nb", "kernels", "--path", str(plugins)],
                            env=clean_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    _wait_for(lambda: marker.exists() or proc.poll() is not None, 120, "the module's teardown never began")
    assert proc.poll() is None, proc.communicate()
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, (proc.returncode, err[-2000:])  # after the teardown's 20 s: it was not cut
    assert "toy" in out and "Traceback" not in err, (out[-1000:], err[-2000:])


def _ctrl_c_in_a_hung_exit_handler(tmp_path, args: list, env: dict | None = None) -> tuple:
    """``flytune <args> --path <the toy kernel, whose import registers an exit handler that prints a line and then
    hangs>``, sent a Ctrl-C once that handler hangs: (status, stdout, stderr, seconds from the Ctrl-C to the end)."""
    marker = tmp_path / "hanging"
    plugins = _toy_plugins_with(tmp_path, f"""

            def _hang_at_exit():
                import time
                print("said at exit")  # into stdout's buffer: a pipe's is flushed only when it fills or at exit
                open({str(marker)!r}, "w").close()
                time.sleep(600)


            __import__("atexit").register(_hang_at_exit)
        """)
    proc = subprocess.Popen([sys.executable, "-m", "flytune_nb", *args, "--path", str(plugins)],
                            env=env or clean_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        _wait_for(lambda: marker.exists() or proc.poll() is not None, 240, "the exit handler never began")
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.5)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        return proc.returncode, out, err, time.monotonic() - t0
    finally:
        proc.kill()


def test_ctrl_c_in_a_hung_exit_handler_ends_the_finished_command_at_once_with_its_own_status(tmp_path):
    """A library's exit handler that waits on something that never comes (a child's join) must not leave a finished
    command un-interruptible: Ctrl-C ends it at once, with the command's own status and its output intact."""
    status, out, err, took = _ctrl_c_in_a_hung_exit_handler(tmp_path, ["kernels"])
    assert status == 0 and took < 30, (status, took, err[-2000:])
    assert "toy" in out and "said at exit" in out and "Traceback" not in err, (out[-1000:], err[-2000:])


def test_ctrl_c_in_a_hung_exit_handler_after_a_sweep_leaves_no_temp_folder(tmp_path):
    """Ending a finished sweep at once skips the exit handlers still to run, multiprocessing's too, which removes the
    temp folder holding the forkserver's socket: a normal exit leaves none in $TMPDIR, and neither may the Ctrl-C."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    status, out, err, _ = _ctrl_c_in_a_hung_exit_handler(
        tmp_path, ["sweep", "toy", "--grid", "N=64", "--dtype", "fp32", "--db", str(tmp_path / "s.db"), "--quiet",
                   "--baselines", "none"], env=clean_env(tmp_path, TMPDIR=str(tmp)))
    assert status == 0 and "trials in" in out and "Traceback" not in err, (status, err[-2000:])
    assert not list(tmp.glob("pymp-*")), sorted(str(p) for p in tmp.rglob("*"))


def test_ctrl_c_during_a_hang_ends_at_once_and_names_the_trial_it_cut(tmp_path):
    """Ctrl-C during a hang kills the worker at once instead of waiting out the rest of --timeout, and the message
    says which trial was in flight (not recorded: the re-run measures it again)."""
    db = tmp_path / "i.db"
    env = clean_env(tmp_path, FLYTUNE_EVIL_MODES="0,3", FLYTUNE_EVIL_SLEEPS="0")
    proc = subprocess.Popen([sys.executable, "-m", "flytune_nb.ui.cli", "sweep", "evil", "--path", PLUGINS, "--grid",
                             "N=16", "--dtype", "fp32", "--db", str(db), "--quiet", "--timeout", "300"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    _wait_for(lambda: _count(db) >= 1, 240, "the default config was not stored")
    time.sleep(1.0)
    t0 = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    took = time.monotonic() - t0
    assert proc.returncode == 130, err[-2000:]
    assert took < 20, took  # not the 300 s timeout
    assert "not recorded, in flight: N=16 fp32 MODE=3" in err and "Traceback" not in err
    assert [r[0] for r in sqlite3.connect(db).execute("SELECT status FROM trials")] == ["ok"]


@pytest.mark.parametrize("to", ["the process", "its process group"])
def test_sigterm_during_a_hang_stops_the_sweep_as_ctrl_c_does_and_ends_with_143(tmp_path, to):
    """`kill` (the process) or a batch scheduler's time limit (the whole group): the sweep stops at once, says in one
    line what was kept and which trial it cut, removes its lock, and ends with 128 + SIGTERM; the worker, which the
    signal reaches too, is not recorded as that config crashing."""
    db = tmp_path / "t.db"
    env = clean_env(tmp_path, FLYTUNE_EVIL_MODES="0,3", FLYTUNE_EVIL_SLEEPS="0")
    proc = subprocess.Popen([sys.executable, "-m", "flytune_nb.ui.cli", "sweep", "evil", "--path", PLUGINS, "--grid",
                             "N=16", "--dtype", "fp32", "--db", str(db), "--quiet", "--timeout", "300"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            start_new_session=True)
    _wait_for(lambda: _count(db) >= 1, 240, "the default config was not stored")
    time.sleep(1.0)
    workers = _descendants(proc.pid)
    t0 = time.monotonic()
    if to == "the process":
        os.kill(proc.pid, signal.SIGTERM)
    else:
        os.killpg(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err[-2000:]
    assert time.monotonic() - t0 < 20  # not the 300 s timeout
    assert "flytune: terminated (SIGTERM); everything measured so far is in the results store" in err, err[-2000:]
    assert "not recorded, in flight: N=16 fp32 MODE=3" in err and "Traceback" not in err, err[-2000:]
    assert [r[0] for r in sqlite3.connect(db).execute("SELECT status FROM trials")] == ["ok"]
    assert not (tmp_path / "t.db-sweep.lock").exists()
    _wait_for(lambda: not any(Path(f"/proc/{p}").exists() for p in workers), 20, "the workers did not end")


def test_stop_ends_an_isolated_sweep_during_a_hang_within_a_second_or_so(tmp_path, monkeypatch):
    """Stop kills the worker after a 0.5 s grace instead of waiting for the per-trial timeout (120 s here); the trial
    in flight is not stored, and Run measures it next time."""
    from flytune_nb.core.events import TrialStarted
    from flytune_nb.engine.sweep import Sweep

    monkeypatch.setenv("FLYTUNE_EVIL_MODES", "0,3")
    monkeypatch.setenv("FLYTUNE_EVIL_SLEEPS", "0")
    holder, stopped = {}, {}

    def on(event):
        if isinstance(event, TrialStarted) and event.config["MODE"] == 3:
            def later():
                time.sleep(0.5)
                stopped["at"] = time.monotonic()
                holder["sweep"].stop()
            import threading

            threading.Thread(target=later, daemon=True).start()

    sw = holder["sweep"] = Sweep("evil", "N=16", ["fp32"], db=tmp_path / "s.db", paths=[PLUGINS], timeout=120,
                                 baselines=(), listeners=[on])
    results = sw.run()
    took = time.monotonic() - stopped["at"]
    assert took < 3, took
    assert results[0].stopped and [t.config["MODE"] for t in results[0].trials] == [0]
    assert _count(tmp_path / "s.db") == 1  # the hang is not stored: not its config's fault


def test_a_worker_flooding_stdout_is_cut_to_its_allowance(tmp_path):
    """A kernel printing 20 MB must not flood the terminal: a worker passes at most 64 KiB of stdout per task. Run in
    a process of its own: workers forked earlier in this test process write to an earlier test's captured stdout."""
    code = ("import json\nfrom flytune_nb.engine.sweep import Sweep\n"
            f"r = Sweep('evil', 'N=16', ['fp32'], db={str(tmp_path / 'f.db')!r}, paths=[{PLUGINS!r}], "
            "baselines=()).run()[0]\n"
            "print('STATUSES', json.dumps([t.status for t in r.trials]))\n")
    env = clean_env(tmp_path, FLYTUNE_EVIL_MODES="6", FLYTUNE_EVIL_SLEEPS="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    statuses = json.loads(out.stdout.rsplit("STATUSES ", 1)[1])
    assert statuses == ["ok", "ok"]  # the default, and MODE 6: 5 launches of 4 MiB each
    assert 0 < out.stdout.count("flood") <= (64 << 10) // 6 + 1 and "the rest of it is dropped" in out.stdout


_FAKE_LAB = """
import os, signal, sys, time
from pathlib import Path

def ended(how):
    def handler(signum, frame):
        Path(os.environ["LAB_SAW"]).write_text(how)
        sys.exit(0)
    return handler

signal.signal(signal.SIGTERM, ended("SIGTERM"))
signal.signal(signal.SIGINT, signal.SIG_IGN if os.environ.get("LAB_DEAF") else ended("SIGINT"))
Path(os.environ["LAB_SAW"] + ".up").touch()
if os.environ.get("LAB_KILLED_BY"):
    os.kill(os.getpid(), int(os.environ["LAB_KILLED_BY"]))
time.sleep(120)
"""


@pytest.mark.parametrize("signal_to", ["the command (kill)", "the terminal's group (Ctrl-C)"])
def test_flytune_workbench_lets_jupyterlab_shut_down_on_sigterm_and_ctrl_c(tmp_path, signal_to):
    """kill of `flytune workbench` hands the SIGTERM on to JupyterLab (which shuts its kernels down on it) and ends
    with 143; a Ctrl-C reaches JupyterLab itself, which asks or stops, and is waited for: its own status. A stand-in
    for JupyterLab records what it got."""
    fake = tmp_path / "fake" / "jupyterlab"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "__main__.py").write_text(_FAKE_LAB)
    saw = tmp_path / "saw"
    env = clean_env(tmp_path, PYTHONPATH=f"{tmp_path / 'fake'}:{REPO}", LAB_SAW=str(saw))
    proc = subprocess.Popen([sys.executable, "-m", "flytune_nb", "workbench", str(tmp_path / "wb")], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    _wait_for(lambda: Path(str(saw) + ".up").exists(), 120, "the stand-in JupyterLab did not start")
    if signal_to.startswith("the command"):
        os.kill(proc.pid, signal.SIGTERM)
    else:
        os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    if signal_to.startswith("the command"):
        assert (proc.returncode, saw.read_text()) == (143, "SIGTERM"), err[-2000:]
        assert err.strip().splitlines()[-1] == "flytune: terminated (SIGTERM); JupyterLab was shut down"
    else:
        assert (proc.returncode, saw.read_text()) == (0, "SIGINT"), err[-2000:]
    assert "Traceback" not in err


@pytest.mark.parametrize("case", ["a JupyterLab deaf to Ctrl-C", "a SIGINT to the command alone"])
def test_flytune_workbench_stops_jupyterlab_at_the_third_ctrl_c_it_did_not_stop_at(tmp_path, case):
    """JupyterLab stops at its second Ctrl-C. One still running at the third ignores them (hung, or deaf to SIGINT)
    or never got them (`kill -INT` of the command alone): the command stops it and ends with 130 rather than waiting
    for it forever."""
    fake = tmp_path / "fake" / "jupyterlab"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "__main__.py").write_text(_FAKE_LAB)
    saw = tmp_path / "saw"
    env = clean_env(tmp_path, PYTHONPATH=f"{tmp_path / 'fake'}:{REPO}", LAB_SAW=str(saw),
                    **({"LAB_DEAF": "1"} if case.startswith("a JupyterLab") else {}))
    proc = subprocess.Popen([sys.executable, "-m", "flytune_nb", "workbench", str(tmp_path / "wb")], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        _wait_for(lambda: Path(str(saw) + ".up").exists(), 120, "the stand-in JupyterLab did not start")
        lab = _descendants(proc.pid)
        for _ in range(3):
            os.killpg(proc.pid, signal.SIGINT) if case.startswith("a JupyterLab") else proc.send_signal(signal.SIGINT)
            time.sleep(0.5)
        out, err = proc.communicate(timeout=60)
    finally:
        os.killpg(proc.pid, signal.SIGKILL) if proc.poll() is None else None
    assert (proc.returncode, saw.read_text()) == (130, "SIGTERM"), err[-2000:]
    assert "Traceback" not in err
    _wait_for(lambda: not any(_alive(p) for p in lab), 20, "JupyterLab did not end")


def test_flytune_workbench_ends_as_a_shell_says_jupyterlab_ended_when_a_signal_killed_it(tmp_path):
    """A JupyterLab killed by a signal (the OOM killer's SIGKILL) ends the command with 128 + that signal, as a shell
    reports it; the child's negative status passed to exit() would read as 247."""
    fake = tmp_path / "fake" / "jupyterlab"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "__main__.py").write_text(_FAKE_LAB)
    env = clean_env(tmp_path, PYTHONPATH=f"{tmp_path / 'fake'}:{REPO}", LAB_SAW=str(tmp_path / "saw"),
                    LAB_KILLED_BY=str(int(signal.SIGKILL)))
    out = subprocess.run([sys.executable, "-m", "flytune_nb", "workbench", str(tmp_path / "wb")], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 128 + signal.SIGKILL, (out.returncode, out.stderr[-2000:])


def test_flytune_workbench_prints_a_command_that_a_shell_runs_in_a_folder_with_spaces(tmp_path, capsys):
    from flytune_nb.ui.cli import main

    target = tmp_path / "my work" / "bench"
    assert main(["workbench", str(target), "--no-lab"]) == 0
    printed = capsys.readouterr().out
    shown = printed.split("open it with: ", 1)[1].strip()
    words = shlex.split(shown)
    assert words[:3] == ["cd", str(target), "&&"], shown
    p = subprocess.run(["bash", "-c", shown.split(" && ")[0] + " && ls"], capture_output=True, text=True)
    assert p.returncode == 0 and "workbench.ipynb" in p.stdout, p.stderr


def test_flytune_workbench_copies_the_notebook_into_a_folder_of_the_users(tmp_path, capsys):
    from flytune_nb.ui.cli import main

    target = tmp_path / "mine"
    assert main(["workbench", str(target), "--no-lab"]) == 0
    nb = json.loads((target / "workbench.ipynb").read_text())
    params = "".join(next(c for c in nb["cells"] if "parameters" in c["metadata"].get("tags", []))["source"])
    assert 'db = "workbench.db"' in params and 'export_dir = "exports"' in params  # the user's folder, relative
    printed = capsys.readouterr().out
    assert "cd " + str(target) in printed
    # the command it prints starts this environment's Jupyter from a plain shell, activated .venv or not
    jupyter = shlex.split(printed.split("&& ", 1)[1])[0]
    assert (shutil.which(jupyter) if jupyter == "jupyter" else Path(jupyter).is_file()), printed
    (target / "workbench.ipynb").write_text("edited")
    assert main(["workbench", str(target), "--no-lab"]) == 0 and (target / "workbench.ipynb").read_text() == "edited"
    (tmp_path / "file").write_text("x")
    assert main(["workbench", str(tmp_path / "file"), "--no-lab"]) == 2
    # a folder that cannot be made is bad input too: one 'error:' line naming what is in the way, exit 2
    capsys.readouterr()
    assert main(["workbench", str(tmp_path / "file" / "sub"), "--no-lab"]) == 2
    assert capsys.readouterr().err.strip() == (f"flytune: error: cannot put the workbench in {tmp_path}/file/sub: "
                                               f"{tmp_path}/file exists and is not a folder")
    assert not (tmp_path / "file").is_dir()


def test_sigterm_while_an_import_runs_exec_ends_with_143_not_by_sigint(tmp_path):
    """Imports run code through exec() of a string (dataclasses and namedtuple build their methods so), and CPython
    marks a KeyboardInterrupt that leaves such a call as unhandled: at exit it kills the process by SIGINT, whatever
    status the command returned. A SIGTERM landing there (seen in `flytune kernels`' SGLang import) must still end
    the command with 143, not as if it were a Ctrl-C."""
    plugins = _toy_plugins_with(tmp_path, """

            exec("import os, signal, time\\nos.kill(os.getpid(), signal.SIGTERM)\\ntime.sleep(60)")
        """)
    out = subprocess.run([sys.executable, "-m", "flytune_nb", "kernels", "--path", str(plugins)],
                         env=clean_env(tmp_path), capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 143, (out.returncode, out.stderr[-2000:])
    assert "flytune kernels: terminated (SIGTERM)" in out.stderr and "Traceback" not in out.stderr, out.stderr[-2000:]
