"""Compile a shape's candidates in a process pool while the timing worker measures, so it never waits on the compiler.

Each pool process runs a candidate's ``run`` once in compile-only mode on meta-device inputs (tasks.compile_one: no
device context, no GPU memory, nothing launched beside the kernel being timed); that fills Triton's on-disk cache (shared by every process of the user: ~/.triton/cache or TRITON_CACHE_DIR), and the timing
worker's first launch of the same config is then a cache load. The candidates are submitted in the order the sweep
will time them and the timing worker waits only for the one it is about to time (``Batch.wait``): timing starts as
soon as the first config is compiled instead of after the last. Measured on the H200 (2026-11-30, rmsnorm 4096x4096,
47 configs): the old compile-everything-first barrier held the first trial back 3.1 s.

The pool is bounded by the cores and kept for the whole sweep; its processes fork from flytune's forkserver
(flytune_nb.procs), so they do not each import torch. A pool that breaks (a config that crashes the device) or stalls
only ends precompilation for that shape: the timing worker then compiles the rest itself and records the real failure.
"""
from __future__ import annotations

import concurrent.futures as cf
import json
import os
import threading
import time
import warnings

from .procs import adopt_env, child_env, context
from .tasks import compile_one, warm_up


def _set_env(env: dict) -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # interrupts are the parent's (see worker._worker_main)
    adopt_env(env)
    # The registry asks torch.cuda.is_available() before importing a kernel; through NVML that initialises no CUDA
    # in this process (flytune_nb.compiling: a pool process never needs it).
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"


def _key(config: dict) -> str:
    return json.dumps(config, sort_keys=True)


class Batch:
    """One shape's compiles in flight, in submission order."""

    def __init__(self, owner: "Precompiler", kernel: str, shape: dict, futs: dict, startup_s: float,
                 per_config_s: float) -> None:
        self.owner, self.kernel, self.shape, self.futs = owner, kernel, shape, futs
        self.startup_s, self.per_config_s = startup_s, per_config_s
        self.t0 = time.perf_counter()
        self.dead = False  # broken or stalled: the timing worker compiles whatever is left

    def wait(self, config: dict, stop: threading.Event | None = None) -> str:
        """Until ``config`` is compiled: "ok", "failed" (its own compile failed: the timing worker records why),
        "absent" (not in this batch), "dead" (the pool broke or stalled: precompilation ends for this shape) or
        "stopped". Stalled means no compile of the whole pool finished for ``per_config_s`` (``startup_s`` more
        before the pool's first): a config queued behind other lanes' batches, or timed in another order than
        submitted, waits as long as the pool makes progress; a hung compile ends precompilation once the rest of
        the queue is done (the timing worker then times it out on its own)."""
        if self.dead:
            return "dead"
        fut = self.futs.get(_key(config))
        if fut is None:
            return "absent"
        began = time.perf_counter()
        while not fut.done():
            if stop is not None and stop.is_set():
                return "stopped"
            limit = self.per_config_s + (0.0 if self.owner.progressed(fut.flytune_pool) else self.startup_s)
            quiet = time.perf_counter() - max(began, self.owner.last_progress(fut.flytune_pool))
            if quiet >= limit:
                self._give_up(fut, f"no compile finished for {quiet:.0f} s")
                return "dead"
            cf.wait([fut], timeout=min(limit - quiet, 0.25))
        try:
            status, _ = fut.result()
        except cf.CancelledError:
            return "dead"
        except Exception as e:  # noqa: BLE001 - BrokenProcessPool: a config took a pool process down
            self._give_up(fut, f"{type(e).__name__}")
            return "dead"
        return "ok" if status == "ok" else "failed"

    def _give_up(self, fut, why: str) -> None:
        self.dead = True
        pending = sum(not f.done() for f in self.futs.values())
        warnings.warn(f"precompile of {self.kernel} {self.shape} stopped early ({why}; {pending} pending, pool broken "
                      f"or stalled); the timing worker compiles the rest", RuntimeWarning, stacklevel=3)
        self.owner.discard(fut.flytune_pool)

    def wait_all(self, stop: threading.Event | None = None) -> dict:
        """Every config of the batch: {"ok": n, "failed": n, "wall_s": s, "stopped": bool}."""
        counts = {"ok": 0, "failed": 0}
        for key in self.futs:
            r = self.wait(json.loads(key), stop)
            if r == "stopped":
                for f in self.futs.values():
                    f.cancel()  # those not started; running compiles finish in the pool, which the sweep then closes
                return {**counts, "wall_s": time.perf_counter() - self.t0, "stopped": True}
            counts["ok" if r == "ok" else "failed"] += 1
        return {**counts, "wall_s": time.perf_counter() - self.t0, "stopped": False}


class Precompiler:
    def __init__(self, workers: int | None = None, env: dict | None = None) -> None:
        self.workers = max(1, workers or min(16, os.cpu_count() or 1))
        self.env = env or {}
        self._pool: cf.ProcessPoolExecutor | None = None
        self._lock = threading.Lock()
        self._progress: dict[int, tuple[float, bool]] = {}  # id(pool) -> (last completion or start, any completed)

    def _get_pool(self) -> cf.ProcessPoolExecutor:
        """The live pool; a broken one (a config took a process down) is replaced, whichever lane finds it so."""
        if self._pool is not None and getattr(self._pool, "_broken", False):
            self._kill(self._pool)
            self._pool = None
        if self._pool is None:
            # The pool starts its processes lazily, at the first submit: hand them the caller's environment now
            # (which GPU, which Triton cache) through the initializer.
            self._pool = cf.ProcessPoolExecutor(self.workers, mp_context=context(), initializer=_set_env,
                                                initargs=(child_env(self.env),))
            self._progress[id(self._pool)] = (time.perf_counter(), False)
        return self._pool

    def _submit(self, fn, *args) -> cf.Future:
        """Submit to the live pool, replacing it once if it turns out broken; marks progress when the task ends."""
        try:
            pool = self._get_pool()
            fut = pool.submit(fn, *args)
        except cf.process.BrokenProcessPool:
            self._kill(self._pool)
            self._pool = None
            pool = self._get_pool()
            fut = pool.submit(fn, *args)
        fut.add_done_callback(lambda f, key=id(pool): self._progress.__setitem__(key, (time.perf_counter(), True)))
        fut.flytune_pool = pool  # the pool it runs in: a batch that gives up kills that one, not a newer one
        return fut

    def progressed(self, pool) -> bool:
        return self._progress.get(id(pool), (0.0, False))[1]

    def last_progress(self, pool) -> float:
        return self._progress.get(id(pool), (0.0, False))[0]

    def discard(self, pool) -> None:
        """A batch gives up on the pool it was submitted to: kill that pool, and forget it if it is still the live
        one (a newer pool another lane is compiling in is left alone)."""
        with self._lock:
            if self._pool is pool:
                self._pool = None
        self._kill(pool)

    @staticmethod
    def _kill(pool) -> None:
        if pool is None:
            return
        for p in list((getattr(pool, "_processes", None) or {}).values()):
            p.kill()
        pool.shutdown(wait=False, cancel_futures=True)

    def warm(self, kernel: str, paths: tuple) -> None:
        """Start every pool process now (each forks and imports the kernel; no device context) without waiting: the
        sweep calls this before it plans, so the pool's start overlaps the timing worker's."""
        with self._lock:
            for _ in range(self.workers):
                self._submit(warm_up, kernel, paths)

    def submit(self, kernel: str, paths: tuple, shape: dict, dtype: str, configs: list[dict],
               per_config_s: float = 120.0, startup_s: float = 60.0, device: dict | None = None,
               target: tuple | None = None) -> Batch:
        """Queue ``configs`` in the order they will be timed. ``device``/``target``: the timing worker's DeviceInfo
        and Triton target (its describe), which let the pool compile without initialising the GPU."""
        with self._lock:  # one pool shared by the per-GPU threads
            futs = {_key(c): self._submit(compile_one, kernel, paths, shape, dtype, c, device, target)
                    for c in configs}
        return Batch(self, kernel, shape, futs, startup_s, per_config_s)

    def run(self, kernel: str, paths: tuple, shape: dict, dtype: str, configs: list[dict],
            per_config_s: float = 120.0, startup_s: float = 60.0, stop: threading.Event | None = None,
            device: dict | None = None, target: tuple | None = None) -> dict:
        """Compile all of ``configs`` and wait: {"ok": n, "failed": n, "wall_s": s, "stopped": bool}. ``stop`` ends
        the wait within a quarter second and cancels the compiles not yet started."""
        return self.submit(kernel, paths, shape, dtype, configs, per_config_s, startup_s, device,
                           target).wait_all(stop)

    def close(self, kill: bool = False) -> None:
        """End the pool without waiting for its processes to exit (importing torch made each one's exit ~0.7 s; two
        of those closes cost the H200 sweep 2.2 s). ``kill``: kill them now, compiles still running included (a
        failed or interrupted sweep); otherwise the idle processes are told to exit and do so in the background.
        Triton writes cache entries to a temporary name and renames them, so a killed compile leaves no torn file."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is None:
            return
        if kill:
            self._kill(pool)
        else:
            pool.shutdown(wait=False, cancel_futures=True)
