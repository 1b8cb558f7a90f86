"""How flytune starts its processes (timing workers and the precompile pool): forked from one forkserver that has
imported torch and Triton once, instead of each spawned process importing them again.

Measured on the H200 host (16 cores, 2026-11-30, benchmarks/results/startup_profile.json): a spawned process spends
3.3 s importing torch alone; 16 of them starting at once (the pool) took 5.4 s each and slowed the timing worker's own
start beside them to 8.7 s. Through the forkserver torch is imported once (3.6 s) and each process then forks in
milliseconds.

Two rules keep this safe:
- The server must never initialise CUDA/HIP (a process forked after that cannot use the GPU). It only imports torch
  and Triton and computes Triton's version key (flytune_nb._preload), none of which touches the driver; the GPU
  tests' isolated sweeps would fail if it did.
- A forked child starts with the *server's* environment, frozen when the server started, not the caller's at the
  time of the call. So every child is handed the caller's environment as it is now and adopts it first thing
  (``adopt_env``): a TRITON_CACHE_DIR or CUDA_VISIBLE_DEVICES set after the first sweep still reaches the next one.

Where forkserver does not exist (Windows) the processes are spawned as before.
"""
from __future__ import annotations

import multiprocessing as mp
import os

PRELOAD = ["flytune_nb._preload"]


def context():
    """The multiprocessing context for flytune's processes."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    # Only takes effect before the server's first start; a server another library started keeps its own preload.
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def child_env(overrides: dict | None = None) -> dict:
    """The caller's environment now, plus ``overrides`` (which GPU a worker is pinned to)."""
    return {**os.environ, **(overrides or {})}


def child_init(env: dict) -> None:
    """First thing in every worker and pool process. Interrupts are the parent's: Ctrl-C in a terminal reaches the
    whole process group, and a child dying of SIGINT mid-trial would be recorded as that config crashing; the parent
    stops after the trial in flight instead. Then the caller's environment (adopt_env)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    adopt_env(env)


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
    choosing a grid. Returns at once; the first worker then waits only for what is left of the server's start."""
    ctx = context()
    if ctx.get_start_method() != "forkserver":
        return
    import threading
    from multiprocessing import forkserver

    threading.Thread(target=forkserver.ensure_running, daemon=True, name="flytune-forkserver").start()
