"""Will a shape fit? Checked before anything is allocated, so a typo like M=100000000 is one clear line."""
from __future__ import annotations

import os

from .device import DeviceInfo


class ShapeTooLarge(ValueError):
    pass


def check_fits(spec, shape: dict, dtype: str, device: DeviceInfo) -> None:
    """``bytes`` is the minimum traffic, about the inputs' size for a memory-bound kernel; 3x leaves room for the
    reference copy, the NaN-poisoned outputs and the L2 flush buffer."""
    if spec.bytes is None:
        return
    need = 3 * spec.bytes(shape, dtype)
    have = device.total_memory if device.is_gpu else host_memory()
    if have and need > have:
        raise ShapeTooLarge(f"{spec.name} {' '.join(f'{k}={v}' for k, v in shape.items())} {dtype} needs "
                            f"~{need / 2**30:.1f} GiB; {device.name} has {have / 2**30:.1f} GiB")


def host_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0
