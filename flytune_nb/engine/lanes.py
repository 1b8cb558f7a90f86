"""Lanes: where tasks run. One lane per GPU.

- InProcessLane: in this process (fast; a crash here is a crash of the caller).
- ProcessLane: a worker process (aiter's choice: a fresh process after any fault), forked from flytune's forkserver
  (flytune_nb.engine.processes), never from the caller. A config that
  aborts, segfaults or corrupts the device kills only the worker; one that hangs past the timeout is killed. Both are
  reported as WorkerCrashed / WorkerTimeout, and the next call starts a fresh worker.
- RayLane (flytune_nb.engine.ray_lanes): a Ray actor per GPU, for several machines.
"""
from __future__ import annotations

import os
import signal
import threading
import traceback

from flytune_nb.errors import RunError, UsageError
from flytune_nb.engine.processes import child_env, child_init, context


class WorkerCrashed(RunError):
    pass


class WorkerTimeout(RunError):
    pass


class WorkerStopped(WorkerCrashed):
    """The caller stopped the lane (Stop, Ctrl-C) and its worker was killed: the trial in flight is nobody's
    failure and is not stored."""


class WorkerStartError(RunError):
    """The worker process could not start at all: the machine's problem, not a config's."""


class WorkerError(RunError):
    """A task raised in the worker outside a config's own launch (a plugin or flytune bug): not per-config data."""


STARTUP_TIMEOUT_S = 300.0  # importing torch + triton on a loaded 2-core machine can take ~10 s; a GPU context more
# A worker's stdout reaches the caller's terminal (or the notebook server's log) up to this much per task; a kernel
# printing 50 MB would flood a terminal. The rest of that task's output is dropped, with one line saying so.
OUTPUT_LIMIT_BYTES = 64 << 10
POLL_S = 0.1  # how often a waiting call looks for a cancel (Stop ends a sweep within ~1 s)


def _bound_stdout(limit: int):
    """Relay this process's fd 1 through a pipe, passing at most ``limit`` bytes per task. Returns ``next_task()``,
    which the worker calls before each task to renew the allowance. Only stdout: stderr carries the tracebacks and
    compiler messages that explain a failure, and C code writing to it while holding the GIL could block on a full
    pipe that the relay thread (which needs the GIL) never empties."""
    import fcntl

    try:
        real = os.dup(1)
        r, w = os.pipe()
        try:
            fcntl.fcntl(w, 1031, 1 << 20)  # F_SETPIPE_SZ: room for a burst while the relay waits for the GIL
        except (OSError, ValueError):
            pass
        os.dup2(w, 1)
        os.close(w)
    except OSError:
        return lambda: None
    state = {"left": limit, "noted": False}

    def relay() -> None:
        while True:
            try:
                chunk = os.read(r, 65536)
            except OSError:
                return
            if not chunk:
                return
            keep = chunk[:max(0, state["left"])]
            state["left"] -= len(chunk)
            try:
                if keep:
                    os.write(real, keep)
                if state["left"] < 0 and not state["noted"]:
                    state["noted"] = True
                    os.write(real, f"\n[flytune worker {os.getpid()}: more than {limit >> 10} KiB of output in one "
                                   f"task; the rest of it is dropped]\n".encode())
            except OSError:
                pass

    threading.Thread(target=relay, daemon=True, name="flytune-stdout-relay").start()

    def next_task() -> None:
        import sys

        try:
            sys.stdout.flush()
        except (OSError, ValueError):
            pass
        state["left"], state["noted"] = limit, False

    return next_task


def _worker_main(conn, env: dict) -> None:
    child_init(env)
    next_task = _bound_stdout(OUTPUT_LIMIT_BYTES)
    dump = _profiler()
    from flytune_nb.core.device import ensure_backend

    ensure_backend()
    from flytune_nb.engine.tasks import HANDLERS

    conn.send(("ready", os.getpid()))
    calls = 0
    while True:
        try:
            op, kwargs = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            return
        next_task()
        try:
            answer = ("ok", HANDLERS[op](**kwargs))
        except Exception as e:  # noqa: BLE001 - shipped to the parent, which decides
            answer = ("error", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=8)}")
        calls += 1
        if dump is not None:  # before answering: the parent may read the snapshot (or kill us) once answered
            dump(calls)
        try:
            conn.send(answer)
        except (EOFError, OSError):
            return
        except Exception as e:  # noqa: BLE001 - an answer that cannot be pickled is the task's error, not a crash
            conn.send(("error", f"{type(e).__name__}: the answer to {op} cannot be sent back: {e}"))


def _profiler():
    """With FLYTUNE_PROFILE_DIR set, profile this worker (cProfile) and return ``dump(calls)``, which writes the
    profile so far after each of its first 4 calls and every 16th: cumulative snapshots, so that the start, the
    first trial and the steady state can be told apart (benchmarks/startup_profile.py reads them). A worker is
    killed rather than left to exit, so nothing is written at exit."""
    folder = os.environ.get("FLYTUNE_PROFILE_DIR")
    if not folder:
        return None
    import cProfile

    prof = cProfile.Profile()
    prof.enable()
    broken = []

    def dump(calls: int) -> None:
        if broken or not (calls <= 4 or calls % 16 == 0):
            return
        path = os.path.join(folder, f"worker-{os.getpid()}-{calls:04d}.prof")
        try:
            os.makedirs(folder, exist_ok=True)
            prof.dump_stats(path + ".part")  # stops the profiler
            os.replace(path + ".part", path)
        except OSError as e:  # a profile that cannot be written must not fail the trial it follows
            broken.append(e)
            import sys

            print(f"flytune worker: FLYTUNE_PROFILE_DIR: cannot write {path}: {e}; profiling stops", file=sys.stderr)
            return
        prof.enable()

    return dump


def _main_hint(code: int | None) -> str:
    """The usual cause of a worker exiting with 1 at start-up: Python's multiprocessing re-imports the main script
    in every new process, so a script that starts a sweep at import time starts it again there, which
    multiprocessing refuses."""
    import sys

    main = sys.modules.get("__main__")
    if code == 1 and getattr(main, "__file__", None) and not getattr(main, "__spec__", None):
        return (f" (if {os.path.basename(main.__file__)} starts the sweep at import time, put that under "
                f"`if __name__ == \"__main__\":`: worker processes import the main script, as Python's "
                f"multiprocessing does)")
    return ""


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "worker stopped answering"
    if code < 0:
        try:
            return f"worker killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"worker killed by signal {-code}"
    return f"worker exited with code {code}"


class InProcessLane:
    name = "in-process"

    def call(self, op: str, kwargs: dict, timeout: float | None = None):
        from flytune_nb.engine.tasks import HANDLERS

        try:
            return HANDLERS[op](**kwargs)
        except Exception as e:  # noqa: BLE001 - same contract as the process lane
            raise WorkerError(f"{type(e).__name__}: {e}") from e

    def cancel(self) -> None:
        """Nothing to kill: a trial in this process ends when it returns (no isolation, no Stop mid-trial)."""

    def close(self) -> None:
        pass


class ProcessLane:
    def __init__(self, env: dict | None = None, name: str = "worker") -> None:
        self.env = dict(env or {})
        self.name = name
        self.proc = None
        self.conn = None
        self._cancelled = threading.Event()

    def cancel(self) -> None:
        """From any thread: kill the worker now and refuse further calls (WorkerStopped). Stop and Ctrl-C use this,
        so a hung trial ends the sweep at once instead of after its timeout."""
        self._cancelled.set()
        proc = self.proc
        if proc is not None and proc.is_alive():
            proc.kill()

    def _start(self) -> None:
        ctx = context()
        parent, child = ctx.Pipe()
        # The caller's environment as it is now (the interpreter decision, TRITON_CACHE_DIR, ...) plus this lane's
        # GPU pin: a forked worker would otherwise see the forkserver's, frozen when it started.
        proc = ctx.Process(target=_worker_main, args=(child, child_env(self.env)), daemon=True,
                           name=f"flytune-{self.name}")
        proc.start()
        child.close()
        if not parent.poll(STARTUP_TIMEOUT_S):
            _stop(proc, parent)
            raise WorkerStartError(f"{self.name}: worker did not start within {STARTUP_TIMEOUT_S:.0f} s")
        try:
            parent.recv()
        except EOFError:
            _stop(proc, parent, grace=5)
            raise WorkerStartError(f"{self.name}: {_describe_exit(proc.exitcode)} during start-up"
                                   f"{_main_hint(proc.exitcode)}") from None
        self.proc, self.conn = proc, parent

    def _detach(self) -> tuple:
        proc, conn, self.proc, self.conn = self.proc, self.conn, None, None
        return proc, conn

    def call(self, op: str, kwargs: dict, timeout: float | None = None):
        if self._cancelled.is_set():
            raise WorkerStopped(f"{self.name}: stopped")
        if self.proc is None or not self.proc.is_alive():
            _stop(*self._detach())  # a dead worker's pipe is closed before the fresh one starts
            self._start()
        try:
            self.conn.send((op, kwargs))
            answered = self._wait(timeout)
            if answered:
                status, value = self.conn.recv()
        except (EOFError, OSError):  # it died before or while answering (a broken pipe on send included)
            proc, conn = self._detach()
            _stop(proc, conn, grace=0 if self._cancelled.is_set() else 10)
            if self._cancelled.is_set():
                raise WorkerStopped(f"{self.name}: stopped (worker killed)") from None
            raise WorkerCrashed(_describe_exit(proc.exitcode)) from None
        if not answered and self._cancelled.is_set():
            _stop(*self._detach())
            raise WorkerStopped(f"{self.name}: stopped (worker killed)")
        if not answered:
            _stop(*self._detach())
            raise WorkerTimeout(f"no answer within {timeout:g} s (worker killed)")
        if status == "error":
            raise WorkerError(value)
        return value

    def _wait(self, timeout: float | None) -> bool:
        """conn.poll(timeout) in slices, so that a cancel from another thread is seen within POLL_S even when the
        kill did not reach the pipe (a worker not started yet)."""
        import time

        end = None if timeout is None else time.monotonic() + timeout
        while True:
            left = POLL_S if end is None else min(POLL_S, end - time.monotonic())
            if left <= 0:
                return False
            if self.conn.poll(left):
                return True
            if self._cancelled.is_set():
                return False

    def close(self) -> None:
        """Tell the worker to exit and return at once: a worker that imported torch takes ~0.7 s to exit (measured
        on the H200 host), which a background thread waits out (and kills it after 5 s)."""
        proc, conn = self._detach()
        if conn is not None:
            conn.close()  # the worker sees EOF and returns
        if proc is not None and proc.is_alive():
            threading.Thread(target=_stop, args=(proc, None, 5), daemon=True, name=f"flytune-reap-{self.name}").start()


def _stop(proc, conn=None, grace: float = 0.0) -> None:
    """Close the pipe, give the process ``grace`` seconds to exit on its own, then kill it."""
    if conn is not None:
        conn.close()
    if proc is None:
        return
    if grace:
        proc.join(grace)
    if proc.is_alive():
        proc.kill()
    proc.join(10)


def check_gpus(gpus, isolate: bool = True) -> list[int] | None:
    """``gpus`` (``--gpus``, ``Sweep(gpus=...)``) checked against the devices this process sees, before anything
    starts: an index that names no GPU would otherwise pin a worker to nothing (or, on the interpreter, run anyway).

    With a GPU: indices among ``torch.cuda.device_count()``, which counts the GPUs a CUDA_VISIBLE_DEVICES (or
    HIP_VISIBLE_DEVICES) already set leaves, numbered within it as torch numbers them (``pin_env``).
    Without one (Triton's CPU interpreter) there is no device to name, but the lanes stay: ``--gpus 0,1`` runs two
    CPU workers that share the shapes, which is how the multi-lane machinery is exercised without a GPU (the tests
    do so). What a user expects from ``--gpus 3,5`` there is GPUs 3 and 5; running two CPU workers instead would be
    a silent surprise, so on the interpreter only 0..k-1 are taken, as a count of workers, and any other index is
    refused saying there is no GPU here."""
    if gpus is None:
        return None
    gpus = list(gpus)
    text = ",".join(map(str, gpus))
    if any(isinstance(g, bool) or not isinstance(g, int) or g < 0 for g in gpus):
        raise UsageError(f"--gpus {text}: GPU indices are whole numbers >= 0")
    twice = next((g for i, g in enumerate(gpus) if g in gpus[:i]), None)
    if twice is not None:
        raise UsageError(f"--gpus {text} names GPU {twice} twice: two workers on one GPU would each time under the "
                         f"other's load")
    from flytune_nb.core import device

    device.ensure_backend()
    if device.interpreting():
        if sorted(gpus) != list(range(len(gpus))):
            n = len(gpus)
            raise UsageError(f"--gpus {text}: there is no GPU here (Triton's CPU interpreter runs the trials); on it "
                             f"--gpus only sets how many CPU workers share the shapes, numbered from 0 (--gpus "
                             f"{','.join(map(str, range(n)))} for {n})")
    else:
        import torch

        count = torch.cuda.device_count()
        missing = [g for g in gpus if g >= count]
        if missing:
            var = _visible_var()
            within = f" (numbered within {var}={os.environ[var]})" if var in os.environ else ""
            raise UsageError(f"--gpus {text}: there is no GPU {' or '.join(map(str, missing))} here; this machine "
                             f"has {count} GPU{'s' if count != 1 else ''}: {', '.join(map(str, range(count)))}"
                             f"{within}")
    if not isolate and (len(gpus) > 1 or gpus[:1] not in ([], [0])):
        if len(gpus) > 1:
            raise UsageError("several GPUs need isolated workers (one process per GPU); drop --no-isolate "
                             "(isolate=False in Python and the workbench)")
        raise UsageError(f"--gpus {text} with --no-isolate (isolate=False): trials run in this process, on its GPU 0; "
                         f"drop it to run them on GPU {text}")
    return gpus


def _hip() -> bool:
    import torch

    return bool(getattr(torch.version, "hip", None))


def _visible_var() -> str:
    """The variable that numbers the GPUs this process sees: of those set, the one the runtime applies last (ROCm
    applies HIP_VISIBLE_DEVICES, then CUDA_VISIBLE_DEVICES within what it left; CUDA only the latter); with none set,
    the platform's own."""
    names = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES") if _hip() else ("CUDA_VISIBLE_DEVICES",)
    return next((v for v in names if v in os.environ), "HIP_VISIBLE_DEVICES" if _hip() else "CUDA_VISIBLE_DEVICES")


def pin_env(gpu: int) -> dict:
    """The environment that leaves a worker only ``gpu``, an index among the GPUs this process sees: its entry in
    the visible-devices list already set (CUDA_VISIBLE_DEVICES=4,6 and GPU 1: 6, not the machine's GPU 1), else the
    index itself. One variable only: ROCm applies HIP_VISIBLE_DEVICES and then CUDA_VISIBLE_DEVICES on top of it, so
    setting both to "1" would leave no device at all."""
    var = _visible_var()
    entries = [e.strip() for e in os.environ[var].split(",")] if var in os.environ else None
    return {var: entries[gpu] if entries is not None and gpu < len(entries) else str(gpu)}


def local_lanes(gpus: list[int] | None, isolate: bool) -> list:
    """One lane per GPU index (``CUDA_VISIBLE_DEVICES`` / ``HIP_VISIBLE_DEVICES`` pin each worker to its GPU)."""
    gpus = check_gpus(gpus, isolate)
    if not isolate:
        return [InProcessLane()]
    if not gpus:
        return [ProcessLane()]
    return [ProcessLane(pin_env(g), name=f"gpu{g}") for g in gpus]
