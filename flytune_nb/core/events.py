"""Events a search or sweep emits. Widgets, tqdm bars and papermill logging are all just listeners.

They are vocabulary, as configs are: the search loop (strategies) emits them for one shape and the engine's sweep for
a grid, so they live below both, and a strategy never imports the engine.

A listener is any callable taking one event. A listener that raises is detached with a warning: a broken progress bar
must not abort a two-hour sweep.
"""
from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterable, Protocol


class Listener(Protocol):
    def __call__(self, event: "Event") -> None: ...


@dataclass(frozen=True)
class Event:
    kernel: str


@dataclass(frozen=True)
class TrialStarted(Event):
    shape: dict
    dtype: str
    config: Any
    index: int  # 0-based position in this shape's candidate list
    total: int


@dataclass(frozen=True)
class TrialDone(Event):
    trial: Any  # flytune_nb.serve.tuned.Trial with status "ok"
    index: int
    total: int
    best: Any = None  # best ok Trial so far for this shape


@dataclass(frozen=True)
class TrialFailed(Event):
    trial: Any  # Trial with a failing status and a reason
    index: int
    total: int
    best: Any = None


@dataclass(frozen=True)
class ShapeDone(Event):
    result: Any  # flytune_nb.serve.tuned.SearchResult


@dataclass(frozen=True)
class ShapeSelected(Event):
    """The selection stage decided a shape's winner (before its ShapeDone)."""
    shape: dict
    dtype: str
    selection: Any  # flytune_nb.strategies.selection.Selection


@dataclass(frozen=True)
class SweepDone(Event):
    results: list = field(default_factory=list)


class Emitter:
    """Fans events out to listeners; detaches a listener that raises."""

    def __init__(self, listeners: Iterable[Listener] = ()) -> None:
        self.listeners = [l for l in listeners if l is not None]
        self._lock = threading.Lock()  # a multi-GPU sweep emits from one thread per GPU

    def __call__(self, event: Event) -> None:
        with self._lock:
            self._emit(event)

    def _emit(self, event: Event) -> None:
        for listener in list(self.listeners):
            try:
                listener(event)
            except Exception as e:  # noqa: BLE001 - a listener is user/UI code, not ours
                warnings.warn(f"event listener {listener!r} raised {e!r}; it is detached", RuntimeWarning, stacklevel=2)
                self.listeners.remove(listener)
