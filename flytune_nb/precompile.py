"""Compile a shape's candidates in a process pool before timing, so the timing worker never waits on the compiler.

Each pool process launches a candidate once on real-shaped inputs (tasks.compile_one); that fills Triton's on-disk
cache (shared by every process of the user: ~/.triton/cache or TRITON_CACHE_DIR), and the timing worker's first launch
of the same config is then a cache load. The pool is bounded by the cores and kept for the whole sweep (spawning a
process that imports torch costs seconds). A pool that breaks (a config that crashes the device) or stalls only ends
precompilation for that shape: the timing worker then compiles the rest itself and records the real failure.
"""
from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import os
import threading
import warnings

from .tasks import compile_one, warm_up


def _set_env(env: dict) -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # interrupts are the parent's (see worker._worker_main)
    os.environ.update(env)


class Precompiler:
    def __init__(self, workers: int | None = None, env: dict | None = None) -> None:
        self.workers = max(1, workers or min(16, os.cpu_count() or 1))
        self.env = env or {}
        self._pool: cf.ProcessPoolExecutor | None = None
        self._lock = threading.Lock()

    def _get_pool(self) -> cf.ProcessPoolExecutor:
        if self._pool is None:
            # The pool starts its processes lazily, at the first submit: hand them the environment (which GPU)
            # through the initializer, not through os.environ at construction time.
            self._pool = cf.ProcessPoolExecutor(self.workers, mp_context=mp.get_context("spawn"),
                                                initializer=_set_env, initargs=(dict(self.env),))
        return self._pool

    def warm(self, kernel: str, paths: tuple) -> None:
        """Start every pool process now (each imports torch and the kernel, ~3-5 s) without waiting: the sweep calls
        this before it plans, so the pool's start overlaps the timing worker's."""
        with self._lock:
            pool = self._get_pool()
            for _ in range(self.workers):
                pool.submit(warm_up, kernel, paths)

    def run(self, kernel: str, paths: tuple, shape: dict, dtype: str, configs: list[dict],
            per_config_s: float = 120.0, startup_s: float = 60.0, stop: threading.Event | None = None) -> dict:
        """Returns {"ok": n, "failed": n, "wall_s": s, "stopped": bool}; never raises for a config's own failure.
        The whole batch may take ``startup_s`` (spawning processes that import torch) plus ``per_config_s`` per round
        of ``workers`` configs; a hanging config ends precompilation there (the timing worker then times it out on
        its own). ``stop`` (the sweep's Stop / Ctrl-C) ends the wait within a quarter second and cancels the
        compiles not yet started: a 1126-config GEMM space is ~70 rounds of 16, a minute or more to sit through."""
        import math
        import time

        with self._lock:  # one pool shared by the per-GPU threads
            t0 = time.perf_counter()
            pool = self._get_pool()
            futs = [pool.submit(compile_one, kernel, paths, shape, dtype, c) for c in configs]
            deadline = startup_s + per_config_s * math.ceil(len(configs) / self.workers)
            return self._collect(kernel, shape, futs, deadline, t0, stop)

    def _collect(self, kernel, shape, futs, deadline, t0, stop=None) -> dict:
        import time

        end, pending, done = time.perf_counter() + deadline, set(futs), set()
        while pending and not (stop is not None and stop.is_set()):
            left = end - time.perf_counter()
            if left <= 0:
                break
            finished, pending = cf.wait(pending, timeout=left if stop is None else min(left, 0.25))
            done |= finished
        if pending and stop is not None and stop.is_set():
            for f in pending:
                f.cancel()  # those not started; running compiles finish in the pool, which the sweep then closes
            return {"ok": sum(f.exception() is None and f.result()[0] == "ok" for f in done),
                    "failed": 0, "wall_s": time.perf_counter() - t0, "stopped": True}
        ok = failed = 0
        for f in done:
            try:
                status, _ = f.result()
                ok += status == "ok"
                failed += status != "ok"
            except Exception:  # noqa: BLE001 - BrokenProcessPool: a config took the pool process down
                failed += 1
        if pending or any(f.exception() is not None for f in done):
            warnings.warn(f"precompile of {kernel} {shape} stopped early ({len(pending)} pending, pool broken or "
                          f"stalled); the timing worker compiles the rest", RuntimeWarning, stacklevel=2)
            self.close(kill=True)
        return {"ok": ok, "failed": failed + len(pending), "wall_s": time.perf_counter() - t0, "stopped": False}

    def close(self, kill: bool = False) -> None:
        if self._pool is None:
            return
        if kill:
            for p in list(getattr(self._pool, "_processes", {}).values()):
                p.kill()
        self._pool.shutdown(wait=not kill, cancel_futures=True)
        self._pool = None
