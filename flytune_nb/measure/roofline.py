"""Measured ceilings for roofline percentages, per device name. Numbers from our own runs, never datasheets:
H200 device-to-device copy 4.27 TB/s (read + write) and bf16 8192^3 matmul 729 TFLOP/s."""
MEASURED = {"NVIDIA_H200": {"copy_Bps": 4.27e12, "bf16_flops": 729e12}}


def bandwidth_fraction(spec, shape: dict, dtype: str, p50_ms: float, device_name: str) -> float | None:
    peak = MEASURED.get(device_name, {}).get("copy_Bps")
    if peak is None or spec.bytes is None or not p50_ms or p50_ms != p50_ms:
        return None
    return spec.bytes(shape, dtype) / (p50_ms * 1e-3) / peak
