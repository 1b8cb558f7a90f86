"""The sweep engine: shape grid x dtypes x a search strategy, measured in workers, stored row by row.

Headless; it speaks only through events. The caller (a notebook kernel, the CLI, papermill) never runs a kernel
itself: every task goes to a lane (a worker process per GPU, or a Ray actor), so a config that crashes or hangs the
device costs one worker, which is restarted. Every finished trial is committed to the results store before the next
starts; re-running the same sweep against the same store replays what is stored and measures only the rest.
"""
from __future__ import annotations

import functools
import math
import queue
import threading
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterable

from flytune_nb.errors import RunError, UsageError
from flytune_nb.core.config import Config
from flytune_nb.core.device import DeviceInfo
from flytune_nb.measure.memory import ShapeTooLarge
from flytune_nb.core.events import Emitter, ShapeDone, ShapeSelected, SweepDone, TrialDone, TrialFailed, TrialStarted
from flytune_nb.core.shapes import grid_shapes
from flytune_nb.core.registry import get_kernel, kernel_paths, load_name
from flytune_nb.engine.store import LISTED_CONFIGS, Store, SweepClaim
from flytune_nb.strategies import SEEDED, get_strategy
from flytune_nb.engine.tasks import BASELINES, trial_from_dict
from flytune_nb.strategies.loop import SearchResult, explore, on_footing, planned
from flytune_nb.strategies.selection import Rule, as_rule, for_device, select, shortlist
from flytune_nb.measure.trial import Trial
from flytune_nb.errors import first_line
from flytune_nb.engine.lanes import (WorkerCrashed, WorkerError, WorkerStartError, WorkerStopped, WorkerTimeout,
                                    check_gpus, local_lanes, pin_env)


class SweepError(RunError):
    """A failure that is not one config's: the kernel's make_inputs/reference raised, a worker cannot start, ..."""


class _Stopped(Exception):
    pass


_SQLITE_INT_MAX = 2**63 - 1
STOP_GRACE_S = 0.5  # Stop lets the trial in flight finish this long (and be stored), then kills its worker


class Sweep:
    """``Sweep("rmsnorm", "M=1,64 N=4096", ["bf16"], db="runs.db").run()``.

    isolate: run trials in worker processes (default) or in this process (fast, for tests and tiny sweeps).
    precompile: compile each shape's candidates in a process pool, ahead of the timing (default: on GPUs only).
    baselines: names among ``torch_eager``, ``torch_compile`` (default: both on GPUs, eager on the interpreter).
    gpus: GPU indices for one worker each; ray: a Ray address ("auto", "local" or host:port) for one actor per GPU.
    timing: "events" (one launch per sample, L2 flushed: the default) or "graph" (a CUDA graph of several calls
    replayed, as engines serve decode); part of the tuning key, so the two never share trials.
    selection: the rule that picks each shape's winner after the search (strategies.selection.Rule: the top
    candidates and the default re-timed, interleaved; the default kept unless beaten beyond the tie band); a dict of
    its fields, or None / ``Rule(top=0)`` for the search's fastest median as the winner. "auto" (the default):
    ``Rule()`` on a GPU, ``INTERPRETER_RULE`` on the interpreter.
    twins: time configs that compile to the same binary as one timed before once, recording the rest as the same
    measurement (where binaries can be hashed: Triton on a GPU, or a kernel's ``extra["binary"]``).
    prune: "census" leaves out, before timing, the configs that spill to scratch or build the same binary as another
    on the GPU being swept (with the precompile pool on, its compiles are the census: a spilling config is left out
    when the search reaches it, and a duplicate binary is timed once through ``twins``); "census:<target>" decides on
    a named GPU's binaries (the CPU path: mi300x, h200, ...).
    warm_start: with a budget, each shape first measures the winners of the (up to two) shapes nearest along the
    batch axis already swept in this run (same dtype and other axes), within its budget, and a surrogate search is
    told every trial measured before it: batch sizes of one model tend to share their winners, and 5 random
    start-up draws of SGLang's 1920-config MoE space rarely land on the large tiles that win at M >= 1024.
    """

    def __init__(self, kernel, grid, dtypes: Iterable[str] | None = None, *, db: str | Path | Store | None = None,
                 paths: Iterable[str] = (), strategy: str = "exhaustive", budget: int | None = None,
                 timeout: float = 120.0, isolate: bool = True, precompile: bool | None = None,
                 baselines: Iterable[str] | None = None, gpus: Iterable[int] | None = None, ray: str | None = None,
                 timer: dict | None = None, listeners: Iterable[Callable] = (), seed: int = 0,
                 retry_failed: bool = False, configs: Iterable[Config] | None = None, timing: str | None = None,
                 selection: Rule | dict | str | None = "auto", twins: bool = True, prune=None,
                 remeasure: Iterable[Config] = (), beside: Iterable[Config] = (), warm_start: bool = True) -> None:
        self.paths = tuple(kernel_paths(paths))
        self.spec = kernel if not isinstance(kernel, str) else get_kernel(kernel, list(self.paths))
        if not isinstance(kernel, str):
            if self.spec.source_dir is not None:
                self.paths = tuple(dict.fromkeys(self.paths + (str(self.spec.source_dir.parent),)))
            if isolate or ray is not None:
                # Workers load kernels by name, from their folder or the module attribute they live at; a spec
                # object built or edited in this process (dataclasses.replace, a notebook edit) exists only here.
                try:
                    same = get_kernel(load_name(self.spec), list(self.paths)) is self.spec
                except LookupError:
                    same = False
                if not same:
                    raise UsageError(f"{self.spec.name}: a spec object that is not its folder's SPEC can only run "
                                     f"in this process (isolate=False); workers load kernels by name")
        from flytune_nb import backends

        backend = backends.of(self.spec)
        if backend.ISOLATED and not isolate and ray is None:
            raise UsageError(f"{self.spec.name} is a {backend.LABEL} kernel: its trials run in worker processes only "
                             f"(a launch that faults aborts the process it runs in, which no exception can catch); "
                             f"drop isolate=False (--no-isolate)")
        self._override = not isinstance(kernel, str) and not isolate and ray is None
        # What other processes load: the kernel's folder name or its module attribute ("pkg.mod:SPEC"); None for a
        # spec run in this process that no other process can import (made in a notebook): nothing precompiles it.
        try:
            self._load_name = load_name(self.spec)
        except UsageError:
            if not self._override:
                raise
            self._load_name = None
        # What tasks are asked to load: that, or for a spec object run in this process a name of this sweep's own
        # under which it registers that object, so two such sweeps of one kernel (a notebook running an edited
        # heuristic beside the original) never swap specs.
        self._task_kernel = f"{self.spec.name}@sweep-{id(self):x}" if self._override else str(self._load_name)
        self.shapes = grid_shapes(grid, self.spec.axes, self.spec.batch_axis)
        self.shapes = [self.spec.check_shape(s) for s in self.shapes]
        if not self.shapes:
            raise UsageError("the grid is empty")
        # "bf16,fp16" or "bf16" (papermill and the CLI pass text) as well as a list; never a string's characters
        self.dtypes = self.spec.check_dtypes(dtypes)
        if not self.dtypes:
            raise UsageError("no dtype given")
        self.strategy_name = strategy
        self.strategy = get_strategy(strategy)
        if isinstance(budget, str) and budget.strip().isdigit():  # papermill's -r and a form field pass text
            budget = int(budget)
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 1):
            raise UsageError(f"budget must be a whole number of configs >= 1 (or None: the whole space), got "
                             f"{type(budget).__name__} {budget!r}")
        if budget is not None and budget > _SQLITE_INT_MAX:  # the store's runs table records it as an SQLite integer
            raise UsageError(f"budget {budget} is more than any space holds; leave it out (None) to search the whole "
                             f"space")
        timeout = float(timeout)
        if not 0 < timeout < float("inf"):
            raise UsageError(f"timeout must be a number of seconds > 0, got {timeout!r}")
        self.budget, self.timeout, self.isolate, self.seed = budget, timeout, isolate, seed
        self.retry_failed = retry_failed  # re-measure every stored trial that did not pass (any failure status)
        # An explicit candidate list instead of the kernel's space (the workbench measures an edited heuristic's
        # picks this way); each must name exactly the knobs the kernel's configs have.
        # an optional knob written at its default (TMA=0) is the config without it: one name, timed once
        self.configs = None if configs is None else list(dict.fromkeys(map(self.spec.canonical, configs)))
        # measured again even when stored (the stored row is replaced by the fresh one)
        self.remeasure = set(map(self.spec.canonical, remeasure))
        # timed again for comparison only where a trial is stored (the heuristic editor's default and pick, beside an
        # edit's new picks): the fresh timing is an event and a ``retimes`` row (round -1: no selection round), and
        # the stored trial stays. It is the timing the search's other configs were taken beside: SearchResult.time_of
        # scales every config the selection never re-timed by the default's re-timed / stored ratio, so a default
        # stored again under another load (4x on a busy CPU) would put all of them on that clock in every view
        # rebuilt from the store, and a pick stored again would change the shortlist, so Run would re-select.
        self.beside = set(map(self.spec.canonical, beside))
        if baselines is not None:  # text as papermill and a form field pass it ("torch_eager,torch_compile"), or names
            if isinstance(baselines, str):  # "none" as the CLI's --baselines takes it
                baselines = () if baselines.strip().lower() == "none" else tuple(baselines.replace(",", " ").split())
            baselines = tuple(baselines)
            bad = [b for b in baselines if b not in BASELINES]
            if bad:
                raise UsageError(f"unknown baseline {bad[0]!r}; use {', '.join(BASELINES)} or none")
        self.precompile, self.baseline_names, self.ray = precompile, baselines, ray
        from flytune_nb.engine.census_pool import CensusPruner

        self.prune = CensusPruner.from_option(prune, paths=self.paths)
        # on Ray, gpus is a number of actors across the cluster, not this machine's devices
        self.gpus = check_gpus(gpus, isolate) if ray is None else (list(gpus) if gpus is not None else None)
        self.timer = dict(timer or {})
        from flytune_nb.core.key import check_timing

        # timer={"graph": True} is the graph mode by another name: the key must say so too
        mode = check_timing(timing if timing is not None else ("graph" if self.timer.get("graph") else None))
        if timing is not None and "graph" in self.timer and bool(self.timer["graph"]) != (mode == "graph"):
            raise UsageError(f"timing={mode!r} contradicts timer={{'graph': {self.timer['graph']}}}")
        self.timing = mode
        self.timer["graph"] = mode == "graph"
        self.rule = as_rule(selection)  # "auto" is resolved on the device
        self.twins = bool(twins)
        self.warm_start = bool(warm_start)
        self._winners: list = []  # (dtype, shape, winning config) of the shapes done in this run: warm starts
        self._winners_lock = threading.Lock()
        self.emit = Emitter(listeners)
        self._db = db
        self.store: Store | None = db if isinstance(db, Store) else None
        self._stop = threading.Event()
        # whether Stop ended this run before it measured all it planned: a Stop that comes once every shape is done
        # (a kernel switched as the sweep ends) leaves a finished run
        self.cut_short = False
        self._live_lanes: list = []
        self.results: list[SearchResult] = []
        self._unprepared: list[str] = []  # shapes the kernel's own code refused while planning, as messages
        self.run_id: str | None = None
        # trials timed by this run (first timings, re-timings, the selection's rounds): 0 when a resumed sweep
        # found everything in its store, which the caller says rather than print stale tables as new
        self.measured = 0
        self._measured_lock = threading.Lock()  # lanes (one thread per GPU) measure at once

    # -- control -------------------------------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop the sweep within ~1 s: the trial in flight gets STOP_GRACE_S to finish (and is stored), then its
        worker is killed and it is not stored, as with Ctrl-C. Everything measured before stays in the store."""
        self._stop.set()
        if self.prune is not None:
            self.prune.stop()  # a shape waiting for its census goes on (and ends) at once
        timer = threading.Timer(STOP_GRACE_S, self._cancel_lanes)
        timer.daemon = True
        timer.start()

    def _cancel_lanes(self) -> None:
        for lane in list(self._live_lanes):
            cancel = getattr(lane, "cancel", None)  # a Ray actor cannot be killed mid-call: it stops after it
            if cancel is not None:
                cancel()

    @property
    def stopped(self) -> bool:
        """Whether Stop was asked (``cut_short`` says whether it ended the run early)."""
        return self._stop.is_set()

    # -- the run -------------------------------------------------------------------------------------------------
    def run(self) -> list[SearchResult]:
        from flytune_nb.engine import tasks

        lanes, precompiler, completed, claim = [], None, False, None
        try:
            # Before anything starts: a second sweep of this store is refused here, not after its workers are up
            claim = SweepClaim.take(self._store_path())
            if self._override:
                tasks._OVERRIDES[self._task_kernel] = self.spec
            lanes = self._live_lanes = self._lanes()
            precompiler = self._precompiler()  # its processes start while the timing worker plans
            plans = self._plan(lanes[0])  # user errors (too large, broken plugin) surface here, before any write
            self._check_configs(plans[0])
            if self.prune is not None:
                self.prune.check(plans[0]["device"], precompiling=precompiler is not None)
            if self.store is None:
                self.store = Store(self._db if self._db is not None else ":memory:")
            if claim is None:  # the store's folder was made just now, as it opened
                claim = SweepClaim.take(self._store_path())
            if self.prune is not None:  # the next shapes' censuses compile while this one is timed
                self.prune.prefetch(self.spec.name, [(p["shape"], p["dtype"], self._space_of(p)) for p in plans],
                                    plans[0]["device"], self.store)
            device = plans[0]["device"]
            self.rule = for_device(self.rule, DeviceInfo(**device).is_gpu)
            strategy = self.strategy_name if self.configs is None else LISTED_CONFIGS + self.strategy_name
            self.run_id = self.store.start_run(self.spec.name, [dict(s) for s in self.shapes], self.dtypes,
                                               strategy, self.budget, device["name"], device_info=device,
                                               selection=self.rule.to_dict())
            jobs: queue.Queue = queue.Queue()
            for p in plans:
                jobs.put(p)
            results: dict[int, SearchResult] = {}
            errors: list[BaseException] = []

            def drain(lane, finished: threading.Event):
                try:
                    while not self._stop.is_set() and not errors:
                        try:
                            plan = jobs.get_nowait()
                        except queue.Empty:
                            return
                        try:
                            results[plan["index"]] = self._run_shape(lane, plan, precompiler)
                        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread below
                            errors.append(e)
                finally:
                    finished.set()

            finished = [threading.Event() for _ in lanes]
            for lane, done in zip(lanes, finished):
                threading.Thread(target=drain, args=(lane, done), daemon=True).start()
            try:
                _wait_all(finished)
            except BaseException:  # Ctrl-C / a notebook interrupt: end the trial in flight now, then unwind
                self._stop.set()
                if self.prune is not None:
                    self.prune.halt()
                self._cancel_lanes()  # a hang would otherwise hold the interrupt for the rest of its timeout
                _wait_all(finished)  # the lanes are closed below only once no thread uses them
                raise
            if errors:
                raise errors[0]
            self.results = [results[i] for i in sorted(results)]
            self.cut_short = self._stop.is_set() and (len(self.results) < len(plans)
                                                      or any(r.stopped for r in self.results))
            if not self.cut_short:  # a stopped run is not finished: export leaves its cut-off shape out
                self.store.finish_run(self.run_id)
            self.emit(SweepDone(self.spec.name, self.results))
            completed = True
            if self._unprepared:
                n = len(self.results)
                raise SweepError(f"{self._unprepared[0]}" + (f" (and {len(self._unprepared) - 1} more shapes)"
                                                             if len(self._unprepared) > 1 else "")
                                 + f"; the other {n} shape{'s' if n != 1 else ''} {'were' if n != 1 else 'was'} "
                                   f"measured and stored")
            return self.results
        finally:
            try:
                if precompiler is not None:  # after a failure, an interrupt or a stop, running compiles are killed
                    precompiler.close(kill=not completed or self._stop.is_set())
                if self.prune is not None:
                    self.prune.close()
                for lane in lanes:
                    lane.close()
                tasks._OVERRIDES.pop(self._task_kernel, None)
            finally:
                if claim is not None:  # last: nothing of this run writes after it
                    claim.release()

    def _store_path(self):
        """The file this sweep writes (None or ":memory:": a store in memory, which no other sweep can see)."""
        return self._db.path if isinstance(self._db, Store) else self._db

    def _check_configs(self, plan: dict) -> None:
        """An explicit config list must carry exactly this kernel's knobs: checked once, before anything is written."""
        if self.configs is None:
            return
        knobs = set(Config.from_dict(plan["default"]).to_dict())
        bad = [c for c in self.configs if any(self.spec.knob_mismatch(c.to_dict(), knobs))]
        if bad:
            raise SweepError(f"{self.spec.name}: {bad[0]} does not have this kernel's knobs ({', '.join(sorted(knobs))})")

    def _lanes(self) -> list:
        if self.ray is not None:
            from flytune_nb.engine.ray_lanes import ray_lanes

            return ray_lanes(self.ray, self.gpus)
        return local_lanes(self.gpus, self.isolate)

    def _plan(self, lane) -> list[dict]:
        plans, self._unprepared = [], []
        for dtype in self.dtypes:
            for shape in self.shapes:
                try:
                    d = lane.call("describe", dict(kernel=self._task_kernel, paths=self.paths, shape=shape, dtype=dtype,
                                                   timing=self.timing),
                                  timeout=max(self.timeout, 300.0))
                except WorkerError as e:
                    # the kernel's own code refused this shape (a wrapper that does not support it): the other
                    # shapes are measured and stored first, and the sweep then fails naming it
                    if self._stop.is_set():
                        raise SweepError("stopped before the first trial") from e
                    self._unprepared.append(f"{self.spec.name} {shape} {dtype}: cannot prepare the shape: "
                                            f"{first_line(e)}")
                    continue
                except (WorkerCrashed, WorkerTimeout, WorkerStartError) as e:
                    if self._stop.is_set():
                        raise SweepError("stopped before the first trial") from e
                    raise SweepError(f"{self.spec.name} {shape} {dtype}: cannot prepare the shape: "
                                     f"{first_line(e)}") from e
                if d.get("too_large"):
                    raise ShapeTooLarge(d["too_large"])
                self._check_space(d, shape, dtype)
                if not plans:
                    self._check_device(DeviceInfo(**d["device"]))
                plans.append({**d, "shape": shape, "dtype": dtype, "index": len(plans)})
        if not plans:
            raise SweepError(self._unprepared[0])
        return plans

    def _check_space(self, described: dict, shape: dict, dtype: str) -> None:
        """The kernel's own space for a shape holds a config, and one with the heuristic default's knobs: a default
        naming other knobs fails at its launch on every shape (a knob renamed in the kernel, not in heuristic.py),
        and an empty space would leave the default alone, reported as searched. Refused before anything is timed.
        A default with the space's knobs but values of its own is measured beside the space, as intended."""
        if self.configs is not None:
            return  # an explicit config list is checked against the default's knobs by _check_configs
        from flytune_nb.core.spec import SpecError

        name, where = self.spec.name, f"{' '.join(f'{a}={v}' for a, v in shape.items())} {dtype}"
        if not described["space"]:
            raise SpecError(f"{name}: configs(shape, dtype, device) returned no config for {where}; the search space "
                            f"must hold at least one")
        default = Config.from_dict(described["default"])
        mismatches = [self.spec.knob_mismatch(default.to_dict(), Config.from_dict(c).to_dict())
                      for c in described["space"]]
        if all(missing or extra for missing, extra in mismatches):
            missing, extra = mismatches[0]
            parts = ([f"lacks {', '.join(sorted(missing))}"] if missing else []) + (
                [f"has {', '.join(sorted(extra))}, which the space's configs do not"] if extra else [])
            raise SpecError(f"{name}: the heuristic's default for {where}, {default}, {' and '.join(parts)}; "
                            f"heuristic.py and configs.py must name the same knobs")

    def _check_device(self, device: DeviceInfo) -> None:
        """A kernel whose DSL cannot launch on the workers' device (FlyDSL anywhere but an AMD GPU) is refused with
        one message before anything is written, instead of failing (or aborting) on every config."""
        from flytune_nb import backends

        reason = backends.cannot_launch(self.spec, device)
        if reason:
            raise UsageError(reason)

    def _precompiler(self):
        """A started precompile pool, or None. Decided before planning (so the pool's start overlaps it): on by
        default where Triton compiles for a GPU, never through the interpreter or on Ray."""
        if self.precompile is False or self.ray is not None or self._load_name is None:
            return None
        from flytune_nb.core.device import interpreting

        import torch

        if self.precompile is None and (interpreting() or not torch.cuda.is_available()):
            return None
        from flytune_nb.engine.compile_pool import Precompiler

        env = {}
        if self.gpus:  # compile for the first GPU of the sweep; the binaries are the same for identical GPUs
            env = pin_env(self.gpus[0])
        pc = Precompiler(env=env, reserve=len(self.gpus) if self.gpus else 1)  # a core per timing worker
        pc.warm(self._load_name, self.paths)
        return pc

    def _timer(self, fidelity: str) -> tuple:
        t = dict(self.timer)
        if not t.get("graph"):
            t.pop("graph", None)  # the events timer's items as they were: a worker's timer cache keys on them
        if fidelity == "quick":  # successive halving's cheap round: an eighth of the timing budget
            t.update(rep_ms=t.get("rep_ms", 100.0) / 8, warmup_ms=5.0, min_reps=5, reps=1)
        return tuple(sorted(t.items()))

    def _space_of(self, plan: dict) -> list:
        return list(self.configs) if self.configs is not None else [Config.from_dict(c) for c in plan["space"]]

    def _run_shape(self, lane, plan: dict, precompiler) -> SearchResult:
        spec, shape, dtype, key = self.spec, plan["shape"], plan["dtype"], plan["key"]
        device = DeviceInfo(**plan["device"])
        default = Config.from_dict(plan["default"])
        space = self._space_of(plan)
        # census: configs that spill or duplicate another's binary are not timed; with the census taken by the
        # precompile pool, a config is judged when the search reaches it and its compile is done
        judging = self.prune is not None and self.prune.from_pool and precompiler is not None
        if self.prune is not None and not judging:
            space = self.prune(spec.name, shape, dtype, space, default, plan["device"], self.store)
        stored = self.store.trials_for(key)
        if self.retry_failed:
            stored = {k: t for k, t in stored.items() if t.ok}
        if self.remeasure:
            stored = {k: t for k, t in stored.items() if k[0] not in self.remeasure}
        named = {label: Config.from_dict(c) for label, c in plan.get("named", {}).items()}
        result = SearchResult(spec.name, shape, dtype, device, default, named=named)
        total = planned(space, default, self.budget, named.values())
        toolchain = plan["key_fields"]["toolchain"]

        # The pool compiles the space in exhaustive order, one config per process at a time; each trial waits only
        # for its own config, which jumps the queue if it has not started (a budgeted search's picks), and what is
        # left of the queue is dropped when the shape is done (precompile.Batch).
        batch = None
        if precompiler is not None:
            todo = [c.to_dict() for c in dict.fromkeys([default, *named.values()] + space) if (c, "full") not in stored]
            if todo:
                batch = precompiler.submit(self._load_name, self.paths, shape, dtype, todo, per_config_s=self.timeout,
                                           device=plan["device"], target=plan.get("target"), census=judging)

        # Identical binaries: (hash, fidelity) -> the config timed for it; config -> the config whose measurement it
        # shares. Stored trials say which was which, so a resumed sweep keeps both.
        timed_for: dict = {}
        twin_of: dict = {}
        timed_beside: dict = {}  # (config, fidelity) -> its fresh timing (Sweep's ``beside``), timed once a shape
        # Every trial this run reports is on the clock of the default it reports: the one it timed again (``beside``),
        # else the stored one. A trial stored by a run that timed the default again (the heuristic editor's new
        # picks, which a budgeted search never timed) was timed beside that run's timing of the default: replayed
        # as stored, it would read 4x off the search's configs after a Measure missing on a busy CPU.
        # (config, fidelity) -> p50 of the default its stored trial was timed beside, where not the stored default
        default_then = {(c, fidelity): p50 for _, _, c, fidelity, beside, p50 in self.store.timed_beside(key)
                        if beside == default}

        def default_now() -> float:
            d = timed_beside.get((default, "full")) or stored.get((default, "full"))
            return d.p50 if d is not None and d.ok else math.nan

        def on_this_clock(trial: Trial) -> Trial:
            k = (trial.config, trial.fidelity)
            d = stored.get((default, "full"))
            then = default_then.get(k, d.p50 if d is not None and d.ok else math.nan)
            return on_footing(trial, then, default_now())

        for c, (h, rep) in self.store.binaries_for(key).items():
            if rep is not None:
                twin_of[c] = rep
            elif h and (c, "full") in stored and stored[(c, "full")].ok:
                timed_for.setdefault((h, "full"), c)
        hashing = self.twins and plan.get("binaries", False)

        def binary_of(config: Config) -> str | None:
            if not hashing:
                return None
            if batch is not None and batch.compiled(config.to_dict()):
                return batch.binary(config.to_dict())  # the pool's answer, known or not: no second compile
            try:
                return lane.call("binary", dict(kernel=self._task_kernel, paths=self.paths, shape=shape, dtype=dtype,
                                                config=config.to_dict(), device=plan["device"],
                                                target=plan.get("target")), timeout=self.timeout)
            except (WorkerTimeout, WorkerCrashed, WorkerError):
                return None  # unknown: the config is timed, and its trial records any real failure

        def evaluate(config: Config, fidelity: str = "full") -> Trial:
            if self._stop.is_set():
                raise _Stopped
            i = len(result.trials)
            if config in self.beside and (config, fidelity) in stored and (config, fidelity) not in timed_beside:
                self.emit(TrialStarted(spec.name, shape, dtype, config, i, total))
                trial = timed_beside[(config, fidelity)] = self._measure(lane, shape, dtype, config, fidelity, device)
                if self._stop.is_set() and trial.status == "crashed":
                    raise _Stopped
                self.store.add_retime(trial, key=key, run_id=self.run_id, round=-1, timing=self.timing)
                result.trials.append(trial)
                self.emit((TrialDone if trial.ok else TrialFailed)(spec.name, trial, i, total, result.best))
                return trial
            trial = stored.get((config, fidelity))
            if trial is None:
                if batch is not None and batch.wait(config.to_dict(), self._stop) == "stopped":
                    raise _Stopped
                if judging:  # the default is never left out, but its row goes to the census table too
                    why = self.prune.judge(spec.name, shape, dtype, config, default, batch.census(config.to_dict()),
                                           plan["device"], self.store, plan)
                    if why is not None:  # not timed, not stored: a sweep without pruning measures it
                        return Trial(spec.name, dict(shape), dtype, config, "skipped", f"census: {why}",
                                     device=device.name, fidelity=fidelity)
                self.emit(TrialStarted(spec.name, shape, dtype, config, i, total))
                h = binary_of(config)
                rep = timed_for.get((h, fidelity)) if h else None
                if rep is not None:  # the same code launched the same way: its measurement, not a coin-flip twin
                    trial = replace(on_this_clock(stored[(rep, fidelity)]), config=config, compile_s=math.nan,
                                    reason=f"same binary as {rep}: timed once")
                    twin_of[config] = rep
                else:
                    trial = self._measure(lane, shape, dtype, config, fidelity, device)
                    if self._stop.is_set() and trial.status == "crashed":
                        raise _Stopped  # the interrupt took the worker down: not this config's fault, measure it next run
                    if h and trial.ok:
                        timed_for.setdefault((h, fidelity), config)
                self.store.add(trial, key=key, run_id=self.run_id, arch=device.arch, toolchain=toolchain,
                               is_default=config == default, source=plan["key_fields"]["source"], binary=h,
                               twin_of=rep, timing=self.timing)
                stored[(config, fidelity)] = trial
                if (default, "full") in timed_beside:
                    default_then[(config, fidelity)] = timed_beside[(default, "full")].p50
                else:
                    default_then.pop((config, fidelity), None)
            else:
                trial = on_this_clock(trial)
            result.trials.append(trial)
            self.emit((TrialDone if trial.ok else TrialFailed)(spec.name, trial, i, total, result.best))
            return trial

        strategy = self.strategy
        if self.strategy_name in SEEDED:  # same key -> same draws, so a resumed sweep re-draws what it stored
            seed = self.seed ^ int(key[:8], 16)
            # a partial keeps the strategy's signature, so explore sees whether it takes ``known``
            strategy = functools.partial(self.strategy, seed=seed)
        try:
            explore(default, space, evaluate, strategy, self.budget, named.values(), warm=self._warm(shape, dtype))
        except _Stopped:
            result.stopped = True
        finally:
            if batch is not None:
                batch.close()
        if not result.stopped and self.rule.on and result.best is not None:
            try:
                result.selection = self._select(lane, plan, result, lambda c: twin_of.get(c, c))
            except _Stopped:
                result.stopped = True
        if not result.stopped:
            result.baselines = self._baselines(lane, plan, device)
            if result.pick is not None:
                with self._winners_lock:
                    self._winners.append((dtype, dict(shape), result.pick.config))
        self.emit(ShapeDone(spec.name, result))
        return result

    def _warm(self, shape: dict, dtype: str) -> list:
        """The winners of the two shapes nearest ``shape`` along the batch axis (log distance) among those done in
        this run with the same dtype and other axes; none without a budget (an exhaustive search times them anyway)
        or with warm starts off."""
        if not self.warm_start or self.budget is None:
            return []
        axis = self.spec.batch_axis
        rest = {k: v for k, v in shape.items() if k != axis}
        with self._winners_lock:
            done = [(s, c) for d, s, c in self._winners
                    if d == dtype and {k: v for k, v in s.items() if k != axis} == rest and s != shape]
        if axis not in shape:
            return []
        near = sorted(done, key=lambda sc: abs(math.log(max(sc[0][axis], 1)) - math.log(max(shape[axis], 1))))
        return list(dict.fromkeys(c for _, c in near[:2]))

    def _select(self, lane, plan: dict, result: SearchResult, twin_of: Callable):
        """The selection stage (strategies/selection.py): the shortlist and the default re-timed, interleaved, each
        timing stored; the decision stored with its evidence. A stored decision over the same contenders and rule
        (a resumed sweep) is reused, not re-timed, unless a contender failed a round and the sweep retries failures:
        a default cut off by a timeout there would otherwise lose the shape without a comparison for good."""
        key, shape, dtype, device = plan["key"], plan["shape"], plan["dtype"], result.device
        candidates = shortlist(result.trials, result.default, self.rule, twin_of)
        old = self.store.selection_for(key)
        if old is not None and old.contenders == [result.default] + candidates and old.rule == self.rule and not (
                self.retry_failed and old.failed):
            self.emit(ShapeSelected(self.spec.name, shape, dtype, old))
            return old

        def retime(config: Config, round_: int) -> Trial:
            if self._stop.is_set():
                raise _Stopped
            t = self._measure(lane, shape, dtype, config, "full", device)
            if self._stop.is_set() and t.status in ("crashed", "timeout"):
                raise _Stopped
            self.store.add_retime(t, key=key, run_id=self.run_id, round=round_, timing=self.timing)
            return t

        sel = select(result.default, candidates, retime, self.rule)
        self.store.save_selection(sel, key=key, run_id=self.run_id, kernel=self.spec.name, shape=shape, dtype=dtype,
                                  device=device.name, timing=self.timing)
        self.emit(ShapeSelected(self.spec.name, shape, dtype, sel))
        return sel

    def _measure(self, lane, shape, dtype, config: Config, fidelity: str, device: DeviceInfo) -> Trial:
        with self._measured_lock:
            self.measured += 1
        base = dict(kernel=self.spec.name, shape=dict(shape), dtype=dtype, config=config, device=device.name,
                    fidelity=fidelity)
        try:
            d = lane.call("trial", dict(kernel=self._task_kernel, paths=self.paths, shape=shape, dtype=dtype,
                                        config=config.to_dict(), timer=self._timer(fidelity)),
                          timeout=self.timeout)
        except WorkerTimeout as e:  # stored even when a stop came meanwhile: the hang was the config's own
            return Trial(**base, status="timeout", reason=str(e))
        except WorkerStopped:
            raise _Stopped from None
        except WorkerCrashed as e:
            return Trial(**base, status="crashed", reason=str(e))
        except (WorkerError, WorkerStartError) as e:
            raise SweepError(f"{self.spec.name} {shape} {dtype}: {first_line(e)}") from e
        return replace(trial_from_dict(d), fidelity=fidelity)

    def _baselines(self, lane, plan: dict, device: DeviceInfo) -> dict:
        if not plan["has_baseline"]:
            return {}
        names = self.baseline_names
        if names is None:
            names = BASELINES if device.is_gpu else BASELINES[:1]
        names = tuple(names)
        have = self.store.baselines_for(plan["key"])
        missing = tuple(n for n in names if n not in have)
        if missing:
            try:
                rows = lane.call("baselines", dict(kernel=self._task_kernel, paths=self.paths, shape=plan["shape"],
                                                   dtype=plan["dtype"], names=missing,
                                                   timer=self._timer("full")),
                                 timeout=max(self.timeout, 600.0))  # torch.compile's first call takes a while
            except (WorkerTimeout, WorkerCrashed) as e:
                if self._stop.is_set():  # Stop killed the worker under the baselines: nothing to store
                    return {}
                rows = [{"name": n, "status": "error", "reason": str(e), "p20": math.inf, "p50": math.inf,
                         "p80": math.inf} for n in missing]
            for r in rows:
                self.store.add_baseline(key=plan["key"], run_id=self.run_id, kernel=self.spec.name,
                                        shape=plan["shape"], dtype=plan["dtype"], device=device.name, **r)
            have = self.store.baselines_for(plan["key"])
        return {n: have[n] for n in names if n in have}


def _wait_all(events: list) -> None:
    """Wait for every event. Event.wait with a timeout stays interruptible, unlike Thread.join, which an interrupt can
    leave reporting a still-running thread as finished (bpo-45274)."""
    for e in events:
        while not e.wait(0.2):
            pass

