"""Will a shape fit? Checked before anything is allocated, so a typo like M=100000000 is one clear line."""
from __future__ import annotations

import dataclasses
import os

from flytune_nb.errors import UsageError
from flytune_nb.core.device import DeviceInfo


class ShapeTooLarge(UsageError):
    pass


def meta_inputs(spec, shape: dict, dtype: str, device: DeviceInfo) -> dict | None:
    """The shape's inputs on PyTorch's meta device (shapes and dtypes only, nothing allocated); None when the
    kernel's make_inputs cannot build them there."""
    try:
        return spec.make_inputs(shape, dtype, dataclasses.replace(device, torch_device="meta"))
    except Exception:  # noqa: BLE001 - e.g. a make_inputs that reads values
        return None


def footprint(spec, shape: dict, dtype: str, device: DeviceInfo) -> int:
    """Bytes the kernel's inputs occupy, from ``make_inputs`` on PyTorch's meta device (shapes and dtypes only,
    nothing allocated). Not ``spec.bytes``: that is the minimum *traffic*, which for fused_moe counts only the experts
    a batch touches (0.66 GiB at M=1, E=256, N=2048, K=7168 against 21 GiB of weights)."""
    import torch

    inputs = meta_inputs(spec, shape, dtype, device)
    if inputs is None:  # fall back to the traffic model
        return int(spec.bytes(shape, dtype)) if spec.bytes is not None else 0
    return sum(v.numel() * v.element_size() for v in inputs.values() if isinstance(v, torch.Tensor))


def check_fits(spec, shape: dict, dtype: str, device: DeviceInfo) -> None:
    """3x the inputs leaves room for the checked launch's fresh inputs beside the timed ones, the reference, the
    NaN-poisoned outputs and the L2 flush buffer."""
    need = 3 * footprint(spec, shape, dtype, device)
    have = device.total_memory if device.is_gpu else host_memory()
    if have and need > have:
        raise ShapeTooLarge(f"{spec.name} {' '.join(f'{k}={v}' for k, v in shape.items())} {dtype} needs "
                            f"~{need / 2**30:.1f} GiB; {device.name} has {have / 2**30:.1f} GiB")


def host_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0
