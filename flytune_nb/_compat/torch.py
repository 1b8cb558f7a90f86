"""Private torch internals flytune_nb touches, each with a fallback for a torch without it."""
from __future__ import annotations

import torch


def cuda_device_getter():
    """torch's C getter of the current CUDA device, or None. ``torch.cuda.current_device`` is a Python function that
    re-checks lazy initialisation on every call; the launch fast path runs only once CUDA is up, where the C getter
    answers the same in a fraction of the time."""
    return getattr(torch._C, "_cuda_getDevice", None)


def cuda_stream_getter():
    """``index -> raw handle of that CUDA device's current stream``: torch's C getter where this torch has it (what
    Triton's own launcher asks), else the public ``torch.cuda.current_stream(index).cuda_stream``, which builds a
    Stream object on every call. Per-stream scratch buffers (flytune_nb.kit.scratch) ask on every launch."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw
    return lambda index: torch.cuda.current_stream(index).cuda_stream


def has_gpu_sleep() -> bool:
    return hasattr(torch.cuda, "_sleep")


def gpu_sleep(cycles: int) -> None:
    """Keep the GPU busy for ``cycles`` clock cycles (``torch.cuda._sleep``): the timer holds the GPU this way while
    the host enqueues a launch, so the host's enqueue time stays out of the measured interval. A torch without it:
    no spin (timings of launch-bound kernels then include some host time)."""
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is not None:
        sleep(cycles)


def view_base(t):
    """The tensor ``t`` is a view of (``Tensor._base``), or None for a tensor that owns its storage: adopt() tells
    an input written in place from the argument launch passes for it, often a view of it (``x.view(-1, N)``)."""
    return getattr(t, "_base", None)


def dynamo_reset() -> None:
    """Fresh dynamo state: one worker serves every shape of a sweep, and without a reset dynamo recompiles the same
    function per shape until its recompile limit (8), then silently runs it eagerly."""
    torch._dynamo.reset()
