"""A sweep: shape grid x dtypes, one search per (shape, dtype), in this process.

This is the minimal in-process engine the core needs for ``make demo`` and ``flytune sweep``; the results store,
worker isolation and resume come with the sweep-engine issue and slot in behind the same events.
"""
from __future__ import annotations

from typing import Callable, Iterable

from .bench import make_timer
from .device import DeviceInfo, current_device
from .events import Emitter, SweepDone
from .trial import SearchResult, search


class ShapeTooLarge(ValueError):
    pass


def check_fits(spec, shape: dict, dtype: str, device: DeviceInfo) -> None:
    """Refuse shapes whose inputs cannot fit, before allocating anything. ``bytes`` is the minimum traffic, which for
    these kernels is about the inputs' size; 3x leaves room for the reference copy and the L2 flush buffer."""
    if spec.bytes is None:
        return
    need = 3 * spec.bytes(shape, dtype)
    have = device.total_memory if device.is_gpu else _host_memory()
    if have and need > have:
        raise ShapeTooLarge(f"{spec.name} {shape} {dtype} needs ~{need / 2**30:.1f} GiB; "
                            f"{device.name} has {have / 2**30:.1f} GiB")


def _host_memory() -> int:
    try:
        import os

        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def sweep(spec, shapes: Iterable[dict], dtypes: Iterable[str], *, device: DeviceInfo | None = None, timer=None,
          strategy: Callable | None = None, budget: int | None = None,
          listeners: Iterable[Callable] = ()) -> list[SearchResult]:
    device = device or current_device()
    shapes = [spec.check_shape(s) for s in shapes]
    dtypes = [spec.check_dtype(d) for d in dtypes]
    for s in shapes:
        for d in dtypes:
            check_fits(spec, s, d, device)
    timer = timer or make_timer(device)
    emit = Emitter(listeners)
    results = []
    for d in dtypes:
        for s in shapes:
            results.append(search(spec, s, d, device, timer, strategy=strategy, budget=budget, listener=emit))
    emit(SweepDone(spec.name, results))
    return results
