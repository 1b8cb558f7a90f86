"""Scratch buffers a kernel keeps between calls: split-K partial tiles, their arrival counters, a split softmax's row
statistics.

One buffer per (name, device, current stream, dtype), grown when a call needs more and never shrunk, so a serving
loop allocates once and a CUDA graph captured after the first call bakes in a pointer that stays valid. Per stream,
because two streams running the same kernel at once would otherwise write each other's partials. On the CPU the
interpreter runs a launch in the calling thread, so there a thread is the stream: a config of two launches (split
softmax: statistics, then the normalised rows) must not read another thread's statistics between them. ``zeroed`` buffers
are counters: zero when allocated, and the kernels that use them leave them zero when they finish (the last program
to arrive resets its counter), so no call pays for a memset.

Costs on the hot path: a dict lookup and the stream query (torch's C getter, ~0.1 us; flytune_nb._compat.torch).
Meta tensors (compiling without a device, flytune_nb.backends.triton) get meta buffers and never ask for a stream.
"""
from __future__ import annotations

import threading

import torch

from flytune_nb._compat.torch import cuda_stream_getter

_BUFFERS: dict[tuple, torch.Tensor] = {}
_STREAM = [None]
_THREAD = threading.local()  # CPU buffers, one dict per thread: freed with the thread
_COUNTERS: set[str] = set()  # names of the zeroed buffers: the counters the kernels leave at zero


def scratch(like: torch.Tensor, name: str, numel: int, dtype: torch.dtype, *, zeroed: bool = False) -> torch.Tensor:
    """A 1-D buffer of at least ``numel`` elements on ``like``'s device, for the current stream."""
    device = like.device
    if device.type == "cuda":
        getter = _STREAM[0] or _stream_getter()
        stream = getter(device.index if device.index is not None else torch.cuda.current_device())
        buffers = _BUFFERS
    else:
        stream = 0
        buffers = _THREAD.__dict__.setdefault("buffers", {})
    key = (name, device, stream, dtype)
    buf = buffers.get(key)
    if buf is None or buf.numel() < numel:
        n = max(int(numel), 1)
        buf = torch.zeros(n, dtype=dtype, device=device) if zeroed else torch.empty(n, dtype=dtype, device=device)
        buffers[key] = buf
        if zeroed:
            _COUNTERS.add(name)
    return buf


def rezero_this_threads_counters() -> None:
    """Zero, in place, every counter buffer (``zeroed=True``) of this thread's CPU buffers. For a launch the
    interpreter stopped part-way (an interrupt, an error in one program): it runs the programs one after another in
    this thread, so the programs that did run counted themselves in and the last arrival that resets a counter never
    came. Left so, every later call of that kernel takes an early arrival for the last one and sums partials that
    are not all its own: a split-K matmul called after an interrupted one returns inf. (A GPU launch fails before its
    programs run, or with a device fault that leaves the context unusable anyway.)"""
    for key, buf in _THREAD.__dict__.get("buffers", {}).items():
        if key[0] in _COUNTERS:
            buf.zero_()


def _stream_getter():
    _STREAM[0] = cuda_stream_getter()
    return _STREAM[0]


def clear() -> None:
    """Drop every buffer (tests; a process that wants the memory back): the GPUs' and this thread's CPU ones."""
    _BUFFERS.clear()
    _THREAD.__dict__.pop("buffers", None)
