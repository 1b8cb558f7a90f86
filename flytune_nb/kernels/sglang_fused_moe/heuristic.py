"""The heuristic default is SGLang's own: ``get_default_config`` (sglang/srt/layers/moe/moe_runner/triton_utils/
fused_moe_triton_config.py), called as SGLang calls it when no config file matches — M, E, N (the intermediate size,
w2.shape[2]), K (w1.shape[2]), top-k, the dtype string (None for bf16/fp16, "fp8_w8a8"), not Marlin, no block shape.
For the unquantised dtypes it names no num_warps or num_stages, so Triton's launch defaults apply, and they are
written out here: 4 warps and 3 stages on CUDA, 2 stages on HIP (triton/backends/*/compiler.py). The default is often
outside the tuning space (BLOCK_SIZE_K=32, GROUP_SIZE_M=8 are not in it): it is timed first all the same."""
from __future__ import annotations

from flytune_nb.artifacts.sglang import config_dtype
from flytune_nb.kit import Config

from .kernel import sglang

TRITON_LAUNCH_DEFAULTS = {"cuda": {"num_warps": 4, "num_stages": 3}, "hip": {"num_warps": 4, "num_stages": 2},
                          "interpreter": {"num_warps": 4, "num_stages": 3}}


def sglang_default(shape, dtype, device) -> dict:
    """SGLang's dict as it returns it (no launch options)."""
    return dict(sglang().config.get_default_config(shape["M"], shape["E"], shape["N"], shape["K"], shape["topk"],
                                                   config_dtype(dtype), False, None))


def default(shape, dtype, device) -> Config:
    d = sglang_default(shape, dtype, device)
    launch = {**TRITON_LAUNCH_DEFAULTS.get(device.backend, TRITON_LAUNCH_DEFAULTS["cuda"]),
              **{k: d.pop(k) for k in ("num_warps", "num_stages") if k in d}}
    return Config(d, **launch)
