"""How flytune starts its processes (timing workers and the precompile pool): forked from one forkserver that has
imported torch and Triton once, instead of each spawned process importing them again.

Measured on the H200 host (16 cores, benchmarks/results/NVIDIA_H200/startup_profile.md): a spawned process
spends 3.3 s importing torch alone; 16 of them starting at once (the pool) took 5.4 s each and slowed the timing
worker's own start beside them to 8.7 s. Through the forkserver torch is imported once (3.6 s) and each process then
forks in milliseconds.

Two rules keep this safe:
- The server must never initialise CUDA/HIP (a process forked after that cannot use the GPU). It only imports torch
  and Triton and computes Triton's version key (flytune_nb.engine._preload), none of which touches the driver; the GPU
  tests' isolated sweeps would fail if it did.
- A forked child starts with the *server's* environment, frozen when the server started, not the caller's at the
  time of the call. So every child is handed the caller's environment as it is now and adopts it first thing
  (``adopt_env``): a TRITON_CACHE_DIR or CUDA_VISIBLE_DEVICES set after the first sweep still reaches the next one.

One thing a forked child cannot adopt: torch's compile configs (torch._dynamo, torch._inductor, torch._functorch)
read their TORCHDYNAMO_* / TORCHINDUCTOR_* / ... variables once, at import, and the server imports them (its meta
warm-up does). So a call made after one of those variables changed gets spawned processes instead: slower (each
imports torch again) but with the caller's settings, e.g. for the torch.compile baseline.

Where forkserver does not exist (Windows) the processes are spawned, each importing torch and Triton itself.
"""
from __future__ import annotations

import multiprocessing as mp
import os

PRELOAD = ["flytune_nb.engine._preload"]
# Variables read once, at import, by the torch modules the server preloads (see above).
IMPORT_TIME_VARS = ("TORCHDYNAMO_", "TORCHINDUCTOR_", "TORCHFUNCTORCH_", "TORCH_COMPILE_")
# Read at each use, not at import, and set by torch itself the first time Inductor runs in the caller: not a change.
READ_AT_USE = {"TORCHINDUCTOR_CACHE_DIR"}
_SERVER_ENV: list = []  # those variables as the server started with them (the first call's)


def _import_time_env() -> dict:
    return {k: v for k, v in os.environ.items() if k.startswith(IMPORT_TIME_VARS) and k not in READ_AT_USE}


def context():
    """The multiprocessing context for flytune's processes: the forkserver, or spawn where there is none or where
    a variable the server's torch read at import has changed since it started."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    if not _SERVER_ENV:
        _SERVER_ENV.append(_import_time_env())
    elif _import_time_env() != _SERVER_ENV[0]:
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    # Only takes effect before the server's first start; a server another library started keeps its own preload.
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


# The caller's pid, handed to every child inside its environment (and removed there): a child ends when that
# process is gone (watch_parent).
PARENT_VAR = "_FLYTUNE_PARENT_PID"
PARENT_POLL_S = 0.5  # how often a child's watch thread looks for its caller; a killed sweep's children end within this


def child_env(overrides: dict | None = None) -> dict:
    """The caller's environment now, plus ``overrides`` (which GPU a worker is pinned to) and the caller's pid.
    (The working directory needs nothing: multiprocessing starts every child in the caller's.)"""
    return {**os.environ, **(overrides or {}), PARENT_VAR: str(os.getpid())}


def child_init(env: dict) -> None:
    """First thing in every worker and pool process. Interrupts are the parent's: Ctrl-C in a terminal reaches the
    whole process group, as a batch scheduler's SIGTERM does, and a child dying of either mid-trial would be recorded
    as that config crashing; the parent stops after the trial in flight instead. Then the caller's environment
    (adopt_env), and the child ends when its caller is gone (watch_parent)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    env = dict(env or {})
    caller = env.pop(PARENT_VAR, None)
    adopt_env(env)
    if caller is not None:
        watch_parent(int(caller))


def watch_parent(caller: int) -> None:
    """End this process when ``caller`` (the sweep's process) is gone, even while a hung kernel holds the GIL.

    Without this, a kill -9 of a sweep during a hanging config leaves its worker, the forkserver and the resource
    tracker alive (70 s measured; on a GPU box the worker holds the GPU). Two guards, because either alone has a hole:
    - the kernel's death signal (Linux prctl PR_SET_PDEATHSIG, SIGKILL): needs no Python, so it fires while the hang
      holds the GIL. It follows the *parent*: for a forked child that is the forkserver, which exits when every
      copy of its "alive" pipe's write end is closed. Python hands a copy to each forked child too, so the child
      drops its own first (_compat.stdlib.drop_forkserver_alive_fd); the server then exits when the caller dies.
      It is not set for a spawned child, whose parent is the caller's thread that started it: the signal would
      fire when that thread ends.
    - a thread that checks every PARENT_POLL_S that the caller still exists: covers spawned children, a forkserver
      some other library started, and a caller that died before the death signal was armed.
    The resource tracker ends by itself once no process holds its pipe, i.e. once these children are gone."""
    import threading

    if os.getppid() != caller:  # forked by the forkserver
        from flytune_nb._compat.stdlib import drop_forkserver_alive_fd, set_parent_death_signal

        drop_forkserver_alive_fd()  # else this child itself keeps the server (its parent) from ever exiting
        set_parent_death_signal()
        if os.getppid() == 1 or not _alive(caller):  # it died before the signal was armed
            os._exit(1)

    def watch() -> None:
        import time

        while True:
            time.sleep(PARENT_POLL_S)
            if not _alive(caller):
                os._exit(1)  # a worker's trial in flight is lost, as it is with its sweep's process

    threading.Thread(target=watch, daemon=True, name="flytune-parent-watch").start()


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs: a zombie (killed, not yet reaped by its own parent) counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists (someone else's process)
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):  # no /proc (not Linux): kill(pid, 0) said it exists
        return True



def adopt_env(env: dict) -> None:
    """First thing in a child: become the caller's environment (keys the caller removed are removed too)."""
    if env is None:
        return
    for k in [k for k in os.environ if k not in env]:
        del os.environ[k]
    os.environ.update(env)


def prestart() -> None:
    """Start the forkserver now, in the background, so that its torch import (3.3 s on the H200 host) overlaps
    whatever the caller does before its first sweep: the CLI's own imports and argument checks, a notebook user
    choosing a grid. Returns at once; the first worker then waits only for what is left of the server's start.

    The interpreter decision comes first: the server imports Triton, whose own @jit helpers (tl.sum, ...) are built
    for one mode at import, so a server started before TRITON_INTERPRET is set would hand every child a Triton in
    which no interpreted kernel can run."""
    from flytune_nb.core.device import ensure_backend

    ensure_backend()
    ctx = context()
    if ctx.get_start_method() != "forkserver":
        return
    import signal
    import threading
    from multiprocessing import forkserver

    if threading.current_thread() is not threading.main_thread():  # only the main thread may change a disposition
        threading.Thread(target=forkserver.ensure_running, daemon=True, name="flytune-forkserver").start()
        return
    # Ignored while the server is forked: it keeps that disposition through exec, so an interrupt sent to the whole
    # process group while it still imports its preload (Jupyter interrupts a kernel's group as it shuts it down)
    # neither kills it nor prints a KeyboardInterrupt traceback from it; once its preload is done the server
    # ignores SIGINT itself. Forking it takes milliseconds: the preload runs in the server, not here.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        forkserver.ensure_running()
    finally:
        signal.signal(signal.SIGINT, previous)
