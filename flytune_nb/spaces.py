"""Small helpers kernels use to write their spaces and heuristics (powers of two, lanes per warp, HIP knobs)."""
from __future__ import annotations

from itertools import product
from typing import Iterable

from .config import Config
from .device import DeviceInfo


def next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def pow2_between(lo: int, hi: int) -> list[int]:
    """Powers of two p with lo <= p <= hi."""
    out, p = [], next_pow2(lo)
    while p <= hi:
        out.append(p)
        p *= 2
    return out


def lanes(device: DeviceInfo) -> int:
    """Threads per warp: 64 on AMD CDNA (wave64), 32 on NVIDIA."""
    return 64 if device.backend == "hip" else 32


def max_warps(device: DeviceInfo) -> int:
    # 1024 threads per block on both vendors: 32 warps of 32 on NVIDIA, 16 waves of 64 on AMD.
    return 1024 // lanes(device)


def with_hip_knobs(configs: Iterable[Config], device: DeviceInfo,
                   waves_per_eu: Iterable[int | None] = (None, 2)) -> list[Config]:
    """On HIP, cross every config with ``waves_per_eu``; elsewhere unchanged, so the AMD-only knob never reaches a
    CUDA launch. ``None`` leaves the option unset, which is Triton's default (0: the compiler picks occupancy); it is
    not also listed as 0, which would time the same binary twice, and it keeps the heuristic default in the space."""
    configs = list(configs)
    if device.backend != "hip":
        return configs
    return [c.replace(waves_per_eu=w) for c, w in product(configs, waves_per_eu)]
