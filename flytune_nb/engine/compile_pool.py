"""Compile a shape's candidates in a process pool while the timing worker measures, so it never waits on the compiler.

Each pool process runs a candidate's ``run`` once in compile-only mode on meta-device inputs (tasks.compile_one: no
device context, no GPU memory, nothing launched beside the kernel being timed); that fills Triton's on-disk cache
(shared by every process of the user: ~/.triton/cache or TRITON_CACHE_DIR), and the timing worker's first launch of
the same config is then a cache load.

Order: a shape's candidates queue in the order an exhaustive sweep times them, and a feeder thread keeps one compile
per pool process in flight but one, which stays free for what the timing worker asks for. The timing worker waits only for the config it is about to time
(``Batch.wait``), and a config it asks for that has not started yet jumps the queue. So timing starts as soon as
the first config is compiled (a compile-everything-first barrier would hold the H200's first rmsnorm trial back
3.1 s), and a budgeted search (random, surrogate: a few dozen configs of a 1000-config GEMM or MoE
space, picked as it goes) gets its picks compiled first while the idle cores compile the rest ahead. A shape's
leftovers are dropped when it is done.

The pool is bounded by the cores (the sweep leaves one per timing worker) and kept for the whole sweep; its
processes fork from flytune's forkserver (flytune_nb.engine.processes), so they do not each import torch. A pool that breaks (a config that crashes the device) or stalls
only ends precompilation for the shape that found it: the timing worker then compiles the rest itself and records
the real failure, and the next shape gets a fresh pool.
"""
from __future__ import annotations

import collections
import concurrent.futures as cf
import json
import os
import queue
import threading
import time
import warnings

from flytune_nb._compat.stdlib import pool_broken, pool_processes
from flytune_nb.engine.processes import child_env, child_init, context
from flytune_nb.engine.tasks import compile_one, warm_up


def _set_env(env: dict) -> None:
    child_init(env)
    # The registry asks torch.cuda.is_available() before importing a kernel; through NVML that initialises no CUDA
    # in this process (flytune_nb.backends.triton: a pool process never needs it).
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"


def _key(config: dict) -> str:
    return json.dumps(config, sort_keys=True)


class Batch:
    """One shape's compiles: queued in timing order, started by the Precompiler's feeder or on demand."""

    def __init__(self, owner: "Precompiler", kernel: str, shape: dict, args: tuple, keys: list[str],
                 startup_s: float, per_config_s: float, census: bool = False) -> None:
        self.owner, self.kernel, self.shape, self.args = owner, kernel, shape, args
        self.census_wanted = census  # each compile also reads its kernels' resources (tasks.compile_one)
        self.keys = dict.fromkeys(keys)  # every config of the batch, in order
        self.futs: dict[str, cf.Future] = {}  # those started
        self.startup_s, self.per_config_s = startup_s, per_config_s
        self.t0 = time.perf_counter()
        self.dead = False  # broken or stalled: the timing worker compiles whatever is left
        self.closed = False  # the shape is done: nothing more of it is started

    def wait(self, config: dict, stop: threading.Event | None = None) -> str:
        """Until ``config`` is compiled: "ok", "failed" (its own compile failed: the timing worker records why),
        "absent" (not in this batch), "dead" (the pool broke or stalled: precompilation ends for this shape) or
        "stopped". A config not started yet is started now, ahead of the queue. Stalled means no compile of the
        whole pool finished for ``per_config_s`` (``startup_s`` more before the pool's first): a config queued
        behind other lanes' batches waits as long as the pool makes progress; a hung compile ends precompilation
        once the rest is done (the timing worker then times it out on its own)."""
        key = _key(config)
        if self.dead:
            return "dead"
        if key not in self.keys:
            return "absent"
        fut = self.owner.start_now(self, key)
        for again in (False, True):
            if fut is None:
                return "dead"
            began = time.perf_counter()
            while not fut.done():
                if stop is not None and stop.is_set():
                    return "stopped"
                pool = fut.flytune_pool
                limit = self.per_config_s + (0.0 if pool.flytune_progress[1] else self.startup_s)
                quiet = time.perf_counter() - max(began, pool.flytune_progress[0])
                if quiet >= limit:
                    self._give_up(fut, f"no compile finished for {quiet:.0f} s")
                    return "dead"
                cf.wait([fut], timeout=min(limit - quiet, 0.25))
            try:
                status = fut.result()[0]
                return "ok" if status == "ok" else "failed"
            except Exception as e:  # noqa: BLE001 - cancelled, or BrokenProcessPool: a process went down
                if not again and getattr(fut.flytune_pool, "flytune_discarded", False):
                    # Another shape or lane killed the pool under it (a hung leftover, a give-up): not this
                    # config's doing, so it starts again, once, in a fresh pool.
                    fut = self.owner.start_now(self, key, again=True)
                    continue
                if not isinstance(e, cf.CancelledError):
                    self._give_up(fut, f"{type(e).__name__}")
                return "dead"
        return "dead"

    def compiled(self, config: dict) -> bool:
        """Whether this batch compiled ``config`` (successfully or not): then ``binary`` is its answer."""
        fut = self.futs.get(_key(config))
        return fut is not None and fut.done() and not fut.cancelled() and fut.exception() is None

    def binary(self, config: dict) -> str | None:
        """The hash of what ``config`` compiled to (tasks.compile_one), once its compile is done; None when unknown
        (not compiled here, failed, or a binary that cannot be hashed)."""
        if not self.compiled(config):
            return None
        r = self.futs[_key(config)].result()
        return r[2] if len(r) > 2 and r[0] == "ok" else None

    def census(self, config: dict) -> dict | None:
        """The census record of ``config``'s compile (registers, spills, shared memory, occupancy: what a census
        process answers), once done, in a batch submitted with ``census=True``; None when unknown."""
        if not self.compiled(config):
            return None
        r = self.futs[_key(config)].result()
        return r[3] if len(r) > 3 and r[0] == "ok" else None

    def close(self) -> None:
        """The shape is done: drop what of it has not started (a budgeted search leaves most of its space)."""
        self.closed = True
        self.owner.wake()

    def _give_up(self, fut, why: str) -> None:
        self.dead = True
        with self.owner._lock:  # the feeder may be adding to futs
            pending = len(self.keys) - sum(f.done() for f in self.futs.values())
        warnings.warn(f"precompile of {self.kernel} {self.shape} stopped early ({why}; {pending} pending, pool broken "
                      f"or stalled); the timing worker compiles the rest", RuntimeWarning, stacklevel=3)
        self.owner.discard(fut.flytune_pool)

    def wait_all(self, stop: threading.Event | None = None) -> dict:
        """Every config of the batch: {"ok": n, "failed": n, "wall_s": s, "stopped": bool}."""
        counts = {"ok": 0, "failed": 0}
        for key in self.keys:
            r = self.wait(json.loads(key), stop)
            if r == "stopped":
                self.close()
                return {**counts, "wall_s": time.perf_counter() - self.t0, "stopped": True}
            counts["ok" if r == "ok" else "failed"] += 1
        return {**counts, "wall_s": time.perf_counter() - self.t0, "stopped": False}


class Precompiler:
    def __init__(self, workers: int | None = None, env: dict | None = None, reserve: int = 0) -> None:
        """``workers`` processes; by default up to 16 of the cores, less ``reserve`` (the sweep keeps one per timing
        worker: compiling runs beside the timing, and a worker starved of CPU enqueues late)."""
        self.workers = max(1, workers or min(16, (os.cpu_count() or 1) - reserve))
        self.env = env or {}
        self._pool: cf.ProcessPoolExecutor | None = None
        self._lock = threading.RLock()
        self._queue: collections.deque = collections.deque()  # (batch, key) not started yet, in order
        self._flying: list[cf.Future] = []  # compiles started by the feeder or on demand
        self._wake: queue.SimpleQueue = queue.SimpleQueue()  # a compile ended / work arrived / closing
        self._feeder: threading.Thread | None = None
        self._closing = False

    # -- the pool -------------------------------------------------------------------------------------------------
    def _get_pool(self) -> cf.ProcessPoolExecutor:
        """The live pool; a broken one (a config took a process down) is replaced, whichever lane finds it so."""
        if self._pool is not None and pool_broken(self._pool):
            self.discard(self._pool)
        if self._pool is None:
            # The pool starts its processes lazily, at the first submit: hand them the caller's environment now
            # (which GPU, which Triton cache) through the initializer.
            self._pool = cf.ProcessPoolExecutor(self.workers, mp_context=context(), initializer=_set_env,
                                                initargs=(child_env(self.env),))
            self._pool.flytune_progress = (time.perf_counter(), False)  # (last completion or start, any completed)
        return self._pool

    def _submit(self, fn, *args) -> cf.Future:
        """Submit to the live pool, replacing it once if it turns out broken; marks progress when the task ends.
        The done-callback runs in the pool's own thread: it only records and wakes the feeder, never locks."""
        pool = self._get_pool()
        try:
            fut = pool.submit(fn, *args)
        except cf.process.BrokenProcessPool:  # it broke since _get_pool looked
            self.discard(pool)
            pool = self._get_pool()
            fut = pool.submit(fn, *args)

        def done(f, pool=pool):
            pool.flytune_progress = (time.perf_counter(), True)
            self._wake.put(None)

        fut.add_done_callback(done)
        fut.flytune_pool = pool  # the pool it runs in: a batch that gives up kills that one, not a newer one
        return fut


    # -- feeding --------------------------------------------------------------------------------------------------
    def _start(self, batch: Batch, key: str) -> cf.Future:
        kernel, paths, shape, dtype, device, target = batch.args
        fut = self._submit(compile_one, kernel, paths, shape, dtype, json.loads(key), device, target,
                           batch.census_wanted)
        fut.flytune_batch, fut.flytune_started = batch, time.perf_counter()
        batch.futs[key] = fut
        self._flying.append(fut)
        return fut

    def start_now(self, batch: Batch, key: str, again: bool = False) -> cf.Future | None:
        """The future compiling ``key``, started ahead of the queue if it had not started (``again``: also if its
        future ended, cancelled or failed with a pool that was killed under it). None: the batch is dead."""
        with self._lock:
            if batch.dead:
                return None
            fut = batch.futs.get(key)
            if fut is None or (again and fut.done()):
                fut = self._start(batch, key)
            return fut

    def _fill(self) -> None:
        """Keep a compile per pool process in flight from the queue's head, but one (with two processes or more), so
        that a config the timing worker asks for starts at once instead of queueing behind the others (under the
        lock). A compile of a shape that is done, which nobody will wait for, that runs past its shape's per-config
        limit has hung: its pool is killed (the next start gets a fresh one) before it holds a process for good."""
        self._flying = [f for f in self._flying if not f.done()]
        now = time.perf_counter()
        for f in self._flying:
            b = f.flytune_batch
            if (b.closed or b.dead) and now - f.flytune_started > b.per_config_s:
                self.discard(f.flytune_pool)
                self._flying = [g for g in self._flying if g.flytune_pool is not f.flytune_pool]
                break
        slots = self.workers - 1 if self.workers > 1 else 1
        while len(self._flying) < slots and self._queue:
            batch, key = self._queue.popleft()
            if batch.dead or batch.closed or key in batch.futs:
                continue
            self._start(batch, key)

    def _feed(self) -> None:
        while True:
            try:
                self._wake.get(timeout=0.5)
            except queue.Empty:
                pass
            with self._lock:
                if self._closing:
                    self._feeder = None  # a submit after close() starts a new one
                    return
                try:
                    self._fill()
                except Exception:  # noqa: BLE001 - a pool that cannot take work: waits find out and give up
                    pass

    def wake(self) -> None:
        self._wake.put(None)

    def warm(self, kernel: str, paths: tuple) -> None:
        """Start every pool process now (each forks and imports the kernel; no device context) without waiting: the
        sweep calls this before it plans, so the pool's start overlaps the timing worker's. One of them also builds
        Triton's C helpers for the worker's first launch (one gcc run, not one per process)."""
        with self._lock:
            for i in range(self.workers):
                self._submit(warm_up, kernel, paths, i == 0)

    def submit(self, kernel: str, paths: tuple, shape: dict, dtype: str, configs: list[dict],
               per_config_s: float = 120.0, startup_s: float = 60.0, device: dict | None = None,
               target: tuple | None = None, census: bool = False) -> Batch:
        """Queue ``configs`` in the order an exhaustive sweep times them. ``device``/``target``: the timing worker's
        DeviceInfo and Triton target (its describe), which let the pool compile without initialising the GPU.
        ``census``: each compile also reads its kernels' resources (``Batch.census``)."""
        keys = [_key(c) for c in configs]
        batch = Batch(self, kernel, shape, (kernel, paths, shape, dtype, device, target), keys, startup_s, per_config_s,
                      census)
        with self._lock:  # one pool shared by the per-GPU threads
            self._closing = False
            self._queue.extend((batch, k) for k in batch.keys)
            self._fill()
            if self._feeder is None or not self._feeder.is_alive():
                self._feeder = threading.Thread(target=self._feed, daemon=True, name="flytune-precompile-feeder")
                self._feeder.start()
        return batch

    def run(self, kernel: str, paths: tuple, shape: dict, dtype: str, configs: list[dict],
            per_config_s: float = 120.0, startup_s: float = 60.0, stop: threading.Event | None = None,
            device: dict | None = None, target: tuple | None = None) -> dict:
        """Compile all of ``configs`` and wait: {"ok": n, "failed": n, "wall_s": s, "stopped": bool}. ``stop`` ends
        the wait within a quarter second and drops the compiles not yet started."""
        return self.submit(kernel, paths, shape, dtype, configs, per_config_s, startup_s, device,
                           target).wait_all(stop)

    # -- ending ---------------------------------------------------------------------------------------------------
    def discard(self, pool) -> None:
        """A batch gives up on the pool it was submitted to: kill that pool, and forget it if it is still the live
        one (a newer pool another lane is compiling in is left alone)."""
        with self._lock:
            if self._pool is pool:
                self._pool = None
        if pool is not None:
            pool.flytune_discarded = True  # its compiles failed through no fault of their own: waits start them again
            self._kill(pool)

    @staticmethod
    def _kill(pool, hard: bool = True) -> None:
        """End ``pool`` without waiting: ``hard`` kills its processes now, else the idle ones exit on their own."""
        if hard:
            for p in pool_processes(pool):
                p.kill()
        pool.shutdown(wait=False, cancel_futures=True)

    def close(self, kill: bool = False) -> None:
        """End the pool without waiting for its processes to exit (importing torch made each one's exit ~0.7 s; two
        of those closes cost the H200 sweep 2.2 s). ``kill``: kill them now, compiles still running included (a
        failed or interrupted sweep); otherwise the idle processes are told to exit and do so in the background.
        Triton writes cache entries to a temporary name and renames them, so a killed compile leaves no torn file."""
        with self._lock:
            pool, self._pool = self._pool, None
            self._queue.clear()
            self._closing = True
        self.wake()
        if pool is not None:
            self._kill(pool, hard=kill)
