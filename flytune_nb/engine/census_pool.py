"""Takes a compile census: processes that compile for one GPU (named, or the one being swept) without touching it,
rows stored beside the trials, and the sweep's census-driven pruning.

- One target per process (Triton's JIT keeps one target per device index): every process of a pool compiles for the
  same target; ``jobs`` processes compile in parallel (compiling is one busy core per process: on a 2-core machine
  two processes ran 3.6 configs/s of matmul for gfx942 against 3.0 for one when both cores were free, and were
  slower when another job held a core).
- A named target compiles into its own Triton cache (``census_cache_dir``: ``<root>/<backend>-<arch>``), so the local
  GPU's cache (~/.triton/cache or TRITON_CACHE_DIR) is never written; a census of the GPU being swept shares that
  GPU's cache on purpose: what it compiles is what the timing worker then loads.
- Resumable like a sweep: rows are committed one by one under the target's tuning key, and a config already in the
  store is not compiled again. Re-compiling is cheap anyway once Triton's cache has it (~20 ms a config).
- A compile that hangs or takes its process down is that config's row (timeout / crashed); the process is replaced.
"""
from __future__ import annotations

import collections
import json
import math
import os
import queue
import subprocess
import sys
import threading
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Callable, Iterable

import flytune_nb
from flytune_nb.core.config import Config
from flytune_nb.core.device import DeviceInfo
from flytune_nb.engine.census_worker import DEVICE_ENV
from flytune_nb.errors import RunError, UsageError
from flytune_nb.measure.census import CensusRow, CensusSummary, prune, summarise

CACHE_ENV = "FLYTUNE_CENSUS_CACHE"
CLOSE_S = 10.0  # how long the compiles in flight may take to finish once the pool closes, before they are killed
STARTUP_S = 300.0  # a fresh process imports torch and Triton: 3-5 s here, much longer on a loaded machine
COPRIME = 2 * 3 * 5 * 7  # knob periods of the spaces' product orders (2 waves_per_eu, 2 nonkdim, 3-5 warps ...)


def census_cache_dir(device: DeviceInfo) -> Path:
    """Triton's cache for a named target: ``$FLYTUNE_CENSUS_CACHE/<backend>-<arch>`` (default root
    ``$XDG_CACHE_HOME/flytune_census``). One per arch: an MI300X and an MI325X build the same gfx942 binaries."""
    root = os.environ.get(CACHE_ENV) or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"),
                                              "flytune_census")
    if Path(root).exists() and not Path(root).is_dir():  # otherwise an errno naming a subfolder, not the variable
        source = f"${CACHE_ENV}" if os.environ.get(CACHE_ENV) else "the census cache"
        raise UsageError(f"{source} ({root}) is a file, not a folder; point it at a folder")
    return _made(Path(root) / f"{device.backend}-{device.arch}")


def _made(cache: Path) -> Path:
    """``cache``, made if missing. Made here, before the store opens, so that a user who cannot write it (a service
    account whose HOME does not exist) gets one line naming the folder and the variable, and no empty store."""
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot make the census cache {cache}: {e.strerror or e}; set ${CACHE_ENV} to a writable "
                         f"folder") from None
    return cache


def spread(configs: list, every: int = 1, sample: int | None = None) -> list:
    """Every ``every``-th config, or about ``sample`` configs spread over the whole list with a stride coprime to 2,
    3, 5 and 7: a space listed as a product (tile x warps x waves_per_eu x nonkdim) repeats each knob with a small
    period, and a stride sharing a factor with one would only ever pick one of its values (every 4th config of the
    MI300X matmul space has one (nonkdim, waves_per_eu) pair)."""
    if sample is not None:
        every = max(1, -(-len(configs) // max(1, sample)))
        while every > 1 and math.gcd(every, COPRIME) != 1:
            every += 1
        # The coprime stride can overshoot far on a small space (40 configs, 24 wanted: stride 11, 4 configs):
        # then more offsets of the same stride, each still hitting every residue, up to about the sample.
        picked, offset = [], 0
        while offset < every and (not picked or len(picked) + len(configs[offset::every]) <= 1.1 * sample):
            picked += range(offset, len(configs), every)
            offset += 1
        return [configs[i] for i in sorted(picked)]
    return list(configs[::max(1, every)])


class _Process:
    """One census process and the thread that reads its replies."""

    def __init__(self, env: dict) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "flytune_nb.engine.census_worker"], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     bufsize=1)
        self.replies: queue.Queue = queue.Queue()
        self.stderr: collections.deque = collections.deque(maxlen=40)
        threading.Thread(target=self._read, args=(self.proc.stdout, self.replies.put), daemon=True).start()
        threading.Thread(target=self._read, args=(self.proc.stderr, self.stderr.append), daemon=True).start()
        self.ready = False

    @staticmethod
    def _read(stream, put) -> None:
        for line in stream:
            put(line.rstrip("\n"))
        put(None)  # end of stream: the process exited

    def _reply(self, timeout: float) -> dict:
        try:
            line = self.replies.get(timeout=timeout)
        except queue.Empty:
            self.kill()
            raise TimeoutError from None
        if line is None:
            self.proc.wait()
            tail = [s for s in self.stderr if s and s.strip()]  # None: the stderr reader saw its end
            raise ChildProcessError(f"exit {self.proc.returncode}" + (f": {tail[-1].strip()}" if tail else ""))
        return json.loads(line)

    def start(self) -> None:
        if not self.ready:
            try:
                hello = self._reply(STARTUP_S)
            except (TimeoutError, ChildProcessError) as e:
                raise RunError(f"a census process did not start ({type(e).__name__}: {e})") from None
            if "fatal" in hello:
                raise RunError(f"a census process did not start: {hello['fatal']}")
            self.ready = True

    def call(self, req: dict, timeout: float) -> dict:
        self.start()
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        return self._reply(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def end_input(self) -> None:
        """Its stdin's end: the process exits once its compile in flight is done."""
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except OSError:
                self.kill()

    def wait_or_kill(self, grace: float) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.kill()


class CensusPool:
    """``jobs`` processes compiling for ``device``; ``cache_dir``: their TRITON_CACHE_DIR (None: the caller's)."""

    def __init__(self, device: DeviceInfo, *, jobs: int | None = None, cache_dir: str | Path | None = None,
                 paths: Iterable[str] = (), timeout: float = 300.0) -> None:
        if not device.is_gpu:
            raise UsageError(f"a census compiles for a GPU; {device.label} is none (name a target: mi300x, h200, ...)")
        self.device, self.paths, self.timeout = device, tuple(str(p) for p in paths), float(timeout)
        # ~0.6 GB each (torch + Triton + a compile): up to 16 by default, as the precompile pool
        self.jobs = max(1, jobs or min(16, os.cpu_count() or 1))
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        # The workers import this very flytune_nb (a checkout run with PYTHONPATH, an editable install, a wheel).
        root = str(Path(flytune_nb.__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        env[DEVICE_ENV] = json.dumps(asdict(device))
        # A census process has no GPU of its own: it never initialises one beside a timing worker.
        env.update(CUDA_VISIBLE_DEVICES="", HIP_VISIBLE_DEVICES="", PYTORCH_NVML_BASED_CUDA_CHECK="1")
        if cache_dir is not None:
            env["TRITON_CACHE_DIR"] = str(_made(Path(cache_dir)))
        self._env = env
        self._procs: list[_Process | None] = [None] * self.jobs
        self._lock = threading.Lock()
        self._halted = threading.Event()  # see halt

    def _proc(self, i: int) -> _Process:
        with self._lock:
            if self._procs[i] is None or self._procs[i].proc.poll() is not None:
                self._procs[i] = _Process(self._env)
            return self._procs[i]

    def start(self) -> None:
        """Start every process now (their imports overlap whatever the caller does next)."""
        for i in range(self.jobs):
            self._proc(i)

    def plan(self, kernel: str, shape: dict, dtype: str) -> dict:
        """The target's tuning key, space and heuristic default for one shape (computed in a census process: the
        space depends on the target's DeviceInfo, the key on the codegen environment there)."""
        try:
            reply = self._proc(0).call({"op": "plan", "kernel": kernel, "paths": self.paths, "shape": shape,
                                        "dtype": dtype}, max(self.timeout, STARTUP_S))
        except (TimeoutError, ChildProcessError) as e:
            raise RunError(f"census of {kernel} {shape}: cannot plan the shape ({type(e).__name__}: {e})") from None
        if "error" in reply:
            raise (UsageError if reply.get("usage") else RunError)(f"{kernel}: {reply['error']}")
        return reply

    def compile(self, kernel: str, shape: dict, dtype: str, configs: list[dict],
                done: Callable[[dict, dict], None], stop: threading.Event | None = None) -> None:
        """Compile ``configs`` over the processes; ``done(config, record)`` as each finishes (in a pool thread).
        Once ``stop`` is set no further config starts; those compiling finish and are recorded."""
        todo: queue.Queue = queue.Queue()
        for c in configs:
            todo.put(c)
        errors: list = []
        halted = self._halted  # the caller was interrupted: nothing more starts, and a process ended by the
        # caller's exit is no config's crash

        def drain(i: int) -> None:
            while not errors and not halted.is_set() and not (stop is not None and stop.is_set()):
                try:
                    config = todo.get_nowait()
                except queue.Empty:
                    return
                t0 = time.perf_counter()
                try:
                    rec = self._proc(i).call({"op": "compile", "kernel": kernel, "paths": self.paths,
                                              "shape": shape, "dtype": dtype, "config": config}, self.timeout)
                except TimeoutError:
                    rec = {"status": "timeout", "error": f"no result after {self.timeout:g} s"}
                except ChildProcessError as e:
                    if halted.is_set():
                        return
                    rec = {"status": "crashed", "error": f"the compiler's process died ({e})"}
                except RunError as e:
                    errors.append(e)
                    return
                if "error" in rec and "status" not in rec:  # the request itself failed: not this config's
                    errors.append((UsageError if rec.get("usage") else RunError)(f"{kernel}: {rec['error']}"))
                    return
                rec.setdefault("compile_s", time.perf_counter() - t0)
                try:
                    done(config, rec)
                except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
                    errors.append(e)
                    return

        threads = [threading.Thread(target=drain, args=(i,), daemon=True)
                   for i in range(min(self.jobs, max(1, len(configs))))]
        for t in threads:
            t.start()
        try:
            for t in threads:
                while t.is_alive():
                    t.join(0.2)  # interruptible (Ctrl-C)
        except BaseException:
            halted.set()
            raise
        if errors:
            raise errors[0]

    def halt(self) -> None:
        """From another thread than the one in ``compile`` (a sweep's interrupt, while its census thread compiles):
        nothing more starts and the compiles in flight are killed now, none of them stored as a crash. The processes
        ignore Ctrl-C, so without this a hung compile would hold the interrupt for its whole timeout."""
        self._halted.set()
        self.close(grace=0.0)

    def close(self, grace: float = CLOSE_S) -> None:
        # one grace period for all: the processes ignore Ctrl-C and compile at once; waiting for each in turn would
        # make an interrupt wait the grace period once per process stuck in a long compile
        with self._lock:
            procs = [p for p in self._procs if p is not None]
            self._procs = [None] * self.jobs
        for p in procs:
            p.end_input()
        deadline = time.monotonic() + grace
        for p in procs:
            p.wait_or_kill(max(0.0, deadline - time.monotonic()))


def sibling_groups(configs: list, schedule_knobs: Iterable[str], first=None) -> dict:
    """Config -> the config whose binary's resources it shares: configs that differ only in ``schedule_knobs``
    (which tile a program computes) form a group, represented by ``first`` where it is a member, else by its first
    member in ``configs`` order. A representative maps to itself."""
    knobs = set(schedule_knobs)
    if not knobs:
        return {c: c for c in configs}
    rep: dict = {}
    out: dict = {}
    order = ([first] if first is not None and first in configs else []) + list(configs)
    for c in order:
        if c in out:
            continue
        k = tuple((n, v) for n, v in c.to_dict().items() if n not in knobs)
        out[c] = rep.setdefault(k, c)
    return out


def _check_knobs(spec, configs, default: Config) -> None:
    """Kernel parameters only: a launch option left out takes Triton's default, which is a config too."""
    want = dict(default.params)
    for c in configs:
        missing, extra = spec.knob_mismatch(dict(c.params), want)
        if missing or extra:
            what = "; ".join(p for p in (f"no knob {', '.join(sorted(extra))}" if extra else "",
                                          f"lacks {', '.join(sorted(missing))}" if missing else "") if p)
            knobs = ", ".join(sorted(set(want) | set(spec.optional_knobs)))
            raise UsageError(f"{spec.name} config {c}: {what} (its knobs: {knobs})")


def take_census(pool: CensusPool, kernel: str, shape: dict, dtype: str, *, store=None,
                configs: Iterable[Config] | None = None, every: int = 1, sample: int | None = None,
                limit: int | None = None, progress: Callable | None = None,
                stop: threading.Event | None = None, siblings: bool = True,
                check_knobs: bool = False) -> CensusSummary | None:
    """One shape's census on ``pool``'s target: the space (or ``configs``), spread by ``every`` / ``sample`` and cut
    to ``limit``, always with the heuristic default; rows already in ``store`` are reused, new ones committed one by
    one. ``progress(done, total)`` after each config. Stopped (``stop`` set), the summary covers the rows taken (None:
    no row at all). ``siblings``: configs that differ only in the kernel's schedule knobs are compiled once (the
    default always for itself) and the others get that binary's resources, marked ``sibling_of``; a group whose
    compile failed is compiled config by config, so a failure is never inferred. ``check_knobs``: ``configs`` came
    from a user, and one with a knob the kernel lacks, or without one it needs, is a UsageError (not a row whose
    compile fails with a KeyError); a space's own configs are the kernel's word (an adopted kernel's may differ in
    their knobs)."""
    from flytune_nb.core.registry import get_kernel

    plan = pool.plan(kernel, shape, dtype)
    default = Config.from_dict(plan["default"])
    spec = get_kernel(kernel, list(pool.paths))
    if check_knobs:
        _check_knobs(spec, configs or (), default)
    chosen = list(configs) if configs is not None else [Config.from_dict(c) for c in plan["space"]]
    chosen = spread(chosen, every, sample)[:limit]
    chosen = list(dict.fromkeys([default] + chosen))
    stored = store.census_for(plan["key"]) if store is not None else {}
    # every config compiled itself (siblings off): a stored sibling row is compiled now, not reused
    rows: dict = {c: stored[c] for c in chosen if c in stored and stored[c].status == "ok"
                  and (siblings or stored[c].sibling_of is None)}
    device = plan["device"]
    # Siblings only where measured equal: on gfx942 GROUP_SIZE_M=1/8/16/32 tiles differ in 2 of ~1900 instructions
    # with the same resources; on sm_90 the GROUP_SIZE_M=1 tiles' 64-bit `%` subroutine changes registers (40 vs
    # 42) and occupancy (48 vs 40 warps), so an NVIDIA census compiles every config.
    knobs = spec.schedule_knobs if siblings and device["backend"] == "hip" else ()
    group = sibling_groups(chosen, knobs, first=default)
    group[default] = default  # the default is always compiled itself (CI fails on a default that spills)
    members: dict = {}
    for c in chosen:
        members.setdefault(group[c], []).append(c)
    lock = threading.Lock()
    inferred = [0]  # sibling rows made by this call (the summary's "compiled in" counts the rest)

    def record(row: CensusRow) -> None:
        rows[row.config] = row
        if store is not None:
            store.add_census(row, key=plan["key"], toolchain=plan["toolchain"], source=plan["source"])
        if progress is not None:
            progress(len(rows), len(chosen))

    def give_siblings(rep_row: CensusRow) -> None:
        """The group's members without a row get the representative's resources (under ``lock``)."""
        for sib in members.get(rep_row.config, ()):
            if sib not in rows:
                record(replace(rep_row, config=sib, compile_s=0.0, binary=None, is_default=sib == default,
                               sibling_of=rep_row.config))
                inferred[0] += 1

    def done(config: dict, rec: dict) -> None:
        cfg = Config.from_dict(config)
        row = CensusRow(kernel, dict(shape), dtype, device["name"], device["arch"], device["backend"], cfg,
                        rec["status"], rec.get("error", ""), float(rec.get("compile_s", math.nan)), rec.get("binary"),
                        tuple(rec.get("kernels", ())), cfg == default, plan["occupancy_unit"])
        with lock:
            record(row)
            if row.ok:
                give_siblings(row)

    t0, found = time.perf_counter(), len(rows)
    todo = [c for c in chosen if c not in rows and group[c] == c]
    # a representative stored earlier gives its missing siblings its rows now
    for rep in [c for c in members if c in rows and rows[c].sibling_of is None]:
        with lock:
            give_siblings(rows[rep])
    pool.compile(kernel, shape, dtype, [c.to_dict() for c in todo], done, stop)
    # groups whose representative failed: every member compiled for itself
    left = [c for c in chosen if c not in rows and group[c] != c and group[c] in rows]
    if left and not (stop is not None and stop.is_set()):
        pool.compile(kernel, shape, dtype, [c.to_dict() for c in left], done, stop)
    if not any(c in rows for c in chosen):  # stopped before the first row
        return None
    return summarise([rows[c] for c in chosen if c in rows], wall_s=time.perf_counter() - t0,
                     stored=found, inferred=inferred[0], key=plan["key"])


def resolve_target(target) -> tuple[DeviceInfo, Path | None]:
    """(DeviceInfo, Triton cache dir) for ``target``: a name (mi300x, h200, ... : its own cache), a DeviceInfo (as
    given, e.g. the GPU being swept: the caller's cache), or None (this machine's GPU, its cache)."""
    from flytune_nb.core.targets import get_target

    if isinstance(target, DeviceInfo):
        return target, None
    if target is None:
        from flytune_nb.core.device import current_device

        dev = current_device()
        if not dev.is_gpu:
            from flytune_nb.core.targets import TARGETS

            raise UsageError(f"no GPU here to take a census of; name a target ({', '.join(TARGETS)})")
        return dev, None
    dev = get_target(str(target)).device()
    return dev, census_cache_dir(dev)


class Census:
    """``Census("matmul", "M=4096 N=4096 K=4096", target="mi300x", db="runs.db").run()``: every config of each
    shape's space compiled for the target, a CensusSummary per (shape, dtype), rows in the store's census table."""

    def __init__(self, kernel: str, grid=None, dtypes: Iterable[str] | None = None, *, target=None, db=None,
                 paths: Iterable[str] = (), jobs: int | None = None, every: int = 1, sample: int | None = None,
                 limit: int | None = None, configs: Iterable[Config] | None = None, timeout: float = 300.0,
                 progress: Callable | None = None, siblings: bool = True) -> None:
        from flytune_nb.core.registry import get_kernel
        from flytune_nb.core.shapes import grid_shapes

        self.paths = tuple(str(p) for p in paths)
        self.spec = get_kernel(kernel, list(self.paths))
        if grid is None:
            self.shapes = [self.spec.example()]
        else:
            self.shapes = grid_shapes(grid, self.spec.axes, self.spec.batch_axis)
        self.shapes = [self.spec.check_shape(s) for s in self.shapes]
        self.dtypes = self.spec.check_dtypes(dtypes)
        if not self.shapes or not self.dtypes:
            raise UsageError("a census needs at least one shape and one dtype")
        for name, v in (("every", every), ("sample", sample), ("limit", limit), ("jobs", jobs)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise UsageError(f"{name} must be an integer >= 1, got {v!r}")
        self.device, self.cache_dir = resolve_target(target)
        if self.spec.backend == "flydsl":  # before anything starts
            from flytune_nb.backends import flydsl

            flydsl.check_target(self.spec, self.device)
        self.db, self.jobs, self.every, self.sample, self.limit = db, jobs, every, sample, limit
        self.configs = None if configs is None else list(configs)
        self.timeout, self.progress, self.siblings = timeout, progress, siblings
        self.results: list[CensusSummary] = []
        self._stop = threading.Event()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def stop(self) -> None:
        """From any thread: start no further compile; ``run`` returns the summaries of what was taken."""
        self._stop.set()

    def run(self) -> list[CensusSummary]:
        from flytune_nb.engine.store import Store

        store = self.db if isinstance(self.db, Store) else Store(self.db) if self.db is not None else None
        pool = CensusPool(self.device, jobs=self.jobs, cache_dir=self.cache_dir, paths=self.paths,
                          timeout=self.timeout)
        try:
            pool.start()
            self.results = []
            for dtype in self.dtypes:
                for shape in self.shapes:
                    if self._stop.is_set():
                        return self.results
                    progress = None if self.progress is None else (
                        lambda d, t, s=shape, dt=dtype: self.progress(s, dt, d, t))
                    summary = take_census(pool, self.spec.name, shape, dtype, store=store, configs=self.configs,
                                          every=self.every, sample=self.sample, limit=self.limit,
                                          progress=progress, stop=self._stop, siblings=self.siblings,
                                          check_knobs=True)
                    if summary is not None:
                        self.results.append(summary)
            return self.results
        finally:
            pool.close()
            if store is not None and store is not self.db:
                store.close()


class CensusPruner:
    """A sweep's census-driven pruning (``Sweep(prune="census")``): before a shape is timed, its candidates are
    compiled for ``target`` (None: the GPU being swept, sharing its Triton cache, so the compiles also serve the
    timing worker) and those that spill to scratch or duplicate another config's binary are left out
    (flytune_nb.measure.census.prune). What was left out, per shape, is in ``dropped``.

    ``prefetch`` takes the census of every shape of the sweep, in sweep order, in a background thread, so the next
    shapes compile while this one is timed and the sweep waits only for the first shape's census. Census by census
    before each shape put every compile on the sweep's critical path: on the H200 that made a pruned sweep of row
    kernels 2-4x slower than the exhaustive one it was meant to shorten (benchmarks/census.py prune-sweep). The
    census processes compile beside the timing worker, as the precompile pool does, and leave it a core.

    On the GPU being swept with the precompile pool on (the default there), no census process starts: the pool's
    own compiles read each config's resources (``from_pool``), and a config that spills is left out when the
    search reaches it (``judge``), so pruning costs no second compile of the space. A config whose binary is
    another's is not left out in that mode: the sweep's identical-binary detection times it once and shares the
    measurement. Separate census processes made the H200's pruned row-kernel sweeps 1.9-3.7x slower than the
    exhaustive ones, whose twins already cost no timing."""

    def __init__(self, target: str | None = None, *, paths: Iterable[str] = (), jobs: int | None = None) -> None:
        if target is not None:
            from flytune_nb.core.targets import get_target

            get_target(target)  # an unknown name fails here, before the sweep writes anything
        self.target, self.paths, self.jobs = target, tuple(paths), jobs
        self._pool: CensusPool | None = None
        self._pool_lock = threading.Lock()  # one census at a time on the pool (its processes answer one request)
        self._stop = threading.Event()
        self._ahead: dict[tuple, dict] = {}  # shape key -> {"done": Event, "summary": ..., "error": ...}
        self._thread: threading.Thread | None = None
        self.dropped: dict[tuple, dict] = {}
        self.summaries: dict[tuple, CensusSummary] = {}
        self.from_pool = False  # the census comes from the sweep's precompile pool (set by check)

    @classmethod
    def from_option(cls, prune, *, paths=()) -> "CensusPruner | None":
        """``prune``: None / False (no pruning), "census" (the GPU being swept), "census:<target>", or a pruner."""
        if prune in (None, False):
            return None
        if isinstance(prune, CensusPruner):
            return prune
        text = str(prune)
        kind, _, target = text.partition(":")
        if kind != "census":
            raise UsageError(f"unknown prune option {text!r}; use 'census' or 'census:<target>' (e.g. census:mi300x)")
        return cls(target.strip() or None, paths=paths)

    def check(self, device: dict, precompiling: bool = False) -> None:
        """Refuse before anything is measured when there is nothing to compile for (the interpreter's kernels build
        no binaries, so on the CPU path a named target decides); otherwise start the census processes, whose imports
        then overlap the sweep's own start. ``precompiling``: the sweep compiles its candidates in a precompile pool
        for this very GPU, which then takes the census (``from_pool``) when no other target is named."""
        if self.target is None and not DeviceInfo(**device).is_gpu:
            from flytune_nb.core.targets import TARGETS

            raise UsageError(f"census pruning on {device['name']} needs a target to compile for, one of "
                             f"{', '.join(TARGETS)}: --prune-census mi300x (Sweep(..., prune='census:mi300x'))")
        self.from_pool = self.target is None and precompiling
        if not self.from_pool:
            self._start(device)

    def judge(self, kernel: str, shape: dict, dtype: str, config: Config, default: Config, record: dict | None,
              device: dict, store=None, plan: dict | None = None) -> str | None:
        """``from_pool`` mode: why ``config`` need not be timed (it spills to scratch), or None (time it: it does not
        spill, it is the default, or its resources are unknown). ``record``: its compile's census record
        (compile_pool.Batch.census); the row is stored in the census table under the sweep's tuning key."""
        from flytune_nb.core.targets import arch_rules

        if record is None:
            return None
        key = self._key(kernel, shape, dtype)
        row = CensusRow(kernel, dict(shape), dtype, device["name"], device["arch"], device["backend"], config,
                        record["status"], record.get("error", ""), float(record.get("compile_s", math.nan)),
                        record.get("binary"), tuple(record.get("kernels", ())), config == default,
                        arch_rules(DeviceInfo(**device)).occupancy_unit)
        if store is not None and plan is not None:
            store.add_census(row, key=plan["key"], toolchain=plan["key_fields"]["toolchain"],
                             source=plan["key_fields"]["source"])
        why = prune([config], {config: row}, default).get(config)
        if why is not None:
            self.dropped.setdefault(key, {})[config] = why
        return why

    def _start(self, device: dict) -> CensusPool:
        if self._pool is None:
            target = self.target if self.target is not None else DeviceInfo(**device)
            dev, cache = resolve_target(target)
            jobs = self.jobs or max(1, min(16, (os.cpu_count() or 2) - 1))  # a core for the timing worker
            self._pool = CensusPool(dev, jobs=jobs, cache_dir=cache, paths=self.paths)
            self._pool.start()
        return self._pool

    @staticmethod
    def _key(kernel: str, shape: dict, dtype: str) -> tuple:
        return kernel, json.dumps(shape), dtype

    def _take(self, kernel: str, shape: dict, dtype: str, space: list, store, pool=None,
              stop=None) -> CensusSummary | None:
        with self._pool_lock:
            # on the GPU being swept every config is compiled itself: those compiles fill the Triton cache the
            # timing worker then reads
            return take_census(pool or self._pool, kernel, shape, dtype, store=store, configs=space,
                               stop=stop or self._stop, siblings=self.target is not None)

    def stop(self) -> None:
        """From any thread (the sweep's Stop): no further compile starts, and a shape waiting for its census is timed
        unpruned at once; the compiles in flight finish and are stored."""
        self._stop.set()

    def halt(self) -> None:
        """An interrupt: as ``stop``, and the compiles in flight are killed rather than waited for (none is stored
        as a crash)."""
        self._stop.set()
        pool = self._pool
        if pool is not None:
            pool.halt()

    def prefetch(self, kernel: str, shapes: list, device: dict, store=None) -> None:
        """``shapes``: [(shape, dtype, space)] in the order the sweep times them. Their censuses are taken one after
        another in a background thread; ``__call__`` then waits for its shape's (usually long done)."""
        self._stop, self._ahead = threading.Event(), {}  # a sweep run again after close() starts afresh
        if self.from_pool:  # the precompile pool's compiles are the census
            return
        pool, stop = self._start(device), self._stop  # this run's: a thread outliving close() keeps its own
        todo = []
        for shape, dtype, space in shapes:
            slot = {"done": threading.Event(), "summary": None, "error": None}
            self._ahead[self._key(kernel, shape, dtype)] = slot
            todo.append((shape, dtype, list(space), slot))

        def work() -> None:
            for shape, dtype, space, slot in todo:
                try:
                    if not stop.is_set():
                        slot["summary"] = self._take(kernel, shape, dtype, space, store, pool, stop)
                except BaseException as e:  # noqa: BLE001 - re-raised by __call__ in the sweep's thread
                    slot["error"] = e
                finally:
                    slot["done"].set()

        self._thread = threading.Thread(target=work, daemon=True, name="flytune-census-ahead")
        self._thread.start()

    def __call__(self, kernel: str, shape: dict, dtype: str, space: list, default: Config, device: dict,
                 store=None) -> list:
        self._start(device)
        key = self._key(kernel, shape, dtype)
        slot = self._ahead.get(key)
        if slot is not None:
            while not slot["done"].wait(0.2):
                if self._stop.is_set():  # stopped while its census compiles: nothing to prune by yet
                    return list(space)
            if slot["error"] is not None:
                raise slot["error"]
            summary = slot["summary"]
        else:
            summary = self._take(kernel, shape, dtype, space, store)
        if summary is None:  # stopped before its census began: nothing to prune by
            return list(space)
        rows = {r.config: r for r in summary.rows}
        dropped = prune(space, rows, default)
        self.dropped[key], self.summaries[key] = dropped, summary
        return [c for c in space if c not in dropped]

    def close(self) -> None:
        """No further census starts; those compiling finish (their rows are stored), then the processes exit."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)
            self._thread = None
        if self._pool is not None:
            self._pool.close()
            self._pool = None
