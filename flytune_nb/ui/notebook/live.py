"""What a sweep has measured so far, per shape, as SearchResults: the one source every workbench view draws from.

A sweep listener (events arrive on the sweep's threads). Shapes in flight are SearchResults under construction; a
ShapeDone replaces them with the engine's own result (baselines, the stopped flag). ``on_change(label)`` is called
at most every ``interval`` seconds while trials arrive, and at once when a shape finishes, so redraws cost little
next to the trials (the live view measured -1.4% of sweep time on the H200, i.e. noise).
"""
from __future__ import annotations

import dataclasses
import math
import threading
import time

from flytune_nb.analysis.explore import shape_label
from flytune_nb.core.device import DeviceInfo, interpreter_device
from flytune_nb.core.events import ShapeDone, SweepDone, TrialDone, TrialFailed
from flytune_nb.strategies.loop import SearchResult, on_footing


class LiveResults:
    def __init__(self, interval: float = 0.25) -> None:
        self.interval = interval
        self.entries: dict[str, SearchResult] = {}  # label -> result (finished or in flight), in arrival order
        self.finished: set[str] = set()
        self.on_change = None  # fn(label or None)
        self.on_new_shape = None  # fn(label): a shape's first trial arrived
        self._lock = threading.Lock()
        self._last = 0.0
        self._timer: threading.Timer | None = None
        self._pending: str | None = None
        self._footing: dict[str, float] = {}  # label -> p50 of the default timed again beside added trials (add)

    def clear(self) -> None:
        """Forget every shape, and the redraw a trial left buffered: fired after a kernel switch, it would bring the
        previous kernel's shape back into the explorer."""
        with self._lock:
            self.entries.clear()
            self.finished.clear()
            self._footing.clear()
            if self._timer is not None:
                self._timer.cancel()
            self._timer, self._pending = None, None

    def results(self) -> list[SearchResult]:
        with self._lock:
            return [dataclasses.replace(r, trials=list(r.trials)) for r in self.entries.values()]

    def finished_results(self) -> list[SearchResult]:
        with self._lock:
            return [r for label, r in self.entries.items() if label in self.finished]

    def get(self, label: str) -> SearchResult | None:
        with self._lock:
            r = self.entries.get(label)
            return None if r is None else dataclasses.replace(r, trials=list(r.trials))

    def merge(self, result: SearchResult) -> None:
        """A finished result from elsewhere (the store, a sweep's ShapeDone): its trials replace those of the same
        config and fidelity, the others are kept."""
        label = shape_label(result.shape, result.dtype)
        with self._lock:
            old = self.entries.get(label)
            if old is not None and old is not result:
                seen = {(t.config, t.fidelity) for t in result.trials}
                result = dataclasses.replace(result, trials=list(result.trials) + [
                    t for t in old.trials if (t.config, t.fidelity) not in seen],
                    baselines=result.baselines or old.baselines)
            self.entries[label] = result
            self.finished.add(label)
        self._changed(label, now=True)

    def add(self, trial) -> None:
        """A trial measured beside a finished shape's search (the heuristic editor's picks, with the shape's default
        and pick timed again): it takes the place of that config's trial, and the shape stays finished with all
        else it has (default, named reference configs, baselines, the selection's decision). Timings added are not
        a new search of the shape, which a sweep's trials of a finished shape are (``__call__``). A shape not shown
        (cleared by a kernel switch) is not brought back. The run's trials come on the clock of its timing of the
        default (Sweep reports those it replays from the store on it too): they join on the search's clock by the
        search's default / that timing."""
        label = shape_label(trial.shape, trial.dtype)
        with self._lock:
            entry = self.entries.get(label)
            if entry is None:
                return
            if trial.config == entry.default and trial.fidelity == "full" and entry.default_trial is not None:
                # SearchResult.time_of puts a config the selection never re-timed on the selection's clock by the
                # default's re-timed / search ratio: the search's default trial must stay, or every such config of
                # the search would be scaled by a default timed later, under another load (a 6.2 ms config read
                # as 1.6 ms after a Measure missing on a busy CPU). The fresh timing sets the footing of the timings
                # this run adds instead.
                self._footing[label] = trial.p50 if trial.ok else math.nan
                return
            if entry.default_trial is not None:  # on the search's clock, as measured beside the default
                trial = on_footing(trial, self._footing.get(label, math.nan), entry.default_trial.p50)
            key = (trial.config, trial.fidelity)
            self.entries[label] = dataclasses.replace(
                entry, trials=[x for x in entry.trials if (x.config, x.fidelity) != key] + [trial])
        self._changed(label)

    def __call__(self, event) -> None:
        if isinstance(event, (TrialDone, TrialFailed)):
            t = event.trial
            label = shape_label(t.shape, t.dtype)
            with self._lock:
                entry = self.entries.get(label)
                new = entry is None
                if new or label in self.finished:  # a shape searched again (resumed, re-run)
                    device = entry.device if entry is not None else _device(t.device)
                    # the engine measures (or replays) the heuristic default first: index 0 names it
                    default = t.config if event.index == 0 else (entry.default if entry is not None else t.config)
                    entry = SearchResult(t.kernel, dict(t.shape), t.dtype, device, default,
                                         list(entry.trials) if entry is not None else [],
                                         dict(entry.baselines) if entry is not None else {})
                    self.entries[label] = entry
                    self.finished.discard(label)
                    self._footing.pop(label, None)
                entry.trials = [x for x in entry.trials if (x.config, x.fidelity) != (t.config, t.fidelity)] + [t]
            if new and self.on_new_shape is not None:
                self.on_new_shape(label)
            self._changed(label)
        elif isinstance(event, ShapeDone):
            self.merge(event.result)
        elif isinstance(event, SweepDone):
            self._changed(None, now=True)

    def _changed(self, label, now: bool = False) -> None:
        if self.on_change is None:
            return
        if now or time.monotonic() - self._last >= self.interval:
            self._last = time.monotonic()
            self.on_change(label)
            return
        with self._lock:
            self._pending = label
        if self._timer is None or not self._timer.is_alive():  # buffered: drawn within interval even if no event comes
            self._timer = threading.Timer(self.interval, self._fire)
            self._timer.daemon = True
            self._timer.start()

    def _fire(self) -> None:
        with self._lock:  # a clear() racing this timer: its shape is gone, and nothing is drawn
            label = self._pending if self._pending in self.entries else None
        if label is None:
            return
        self._last = time.monotonic()
        if self.on_change is not None:
            self.on_change(label)


def _device(name: str) -> DeviceInfo:
    """A trial carries only its device's name; the result's DeviceInfo comes with ShapeDone. Until then: the
    current device when the names agree (always, for a local sweep), else a described placeholder."""
    from flytune_nb.core.device import current_device

    dev = current_device()
    if dev.name == name:
        return dev
    return dataclasses.replace(interpreter_device(), name=name) if name else dev
