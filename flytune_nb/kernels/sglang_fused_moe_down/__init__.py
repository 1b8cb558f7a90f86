"""sglang_fused_moe_down: the down GEMM of SGLang's fused MoE tuned on its own, for SGLang's ``…_down.json`` files
(SGLang looks for one beside every MoE config file and reuses the up table when it is missing). Needs the ``sglang``
package, like sglang_fused_moe, whose code it runs (kernel.py says what is timed).

Same axes and file names as sglang_fused_moe plus the ``_down`` suffix, written into the same folder, so one
``SGLANG_MOE_CONFIG_DIR=<dir>/sglang_fused_moe`` serves both. Tune the up file first and point SGLANG_MOE_CONFIG_DIR
at it: the down space keeps the BLOCK_SIZE_M of the up config SGLang will run (both GEMMs share one alignment).
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import torch

from flytune_nb.core.key import source_fingerprint
from flytune_nb.kit import KernelSpec

from .configs import configs
from .heuristic import default, up_config
from .kernel import base, run
from .reference import reference

BASE = base()  # KernelUnavailable here when SGLang is missing: "needs sglang: pip install 'flytune_nb[sglang]'"
SHIPPED = BASE.package.SHIPPED


def make_inputs(shape, dtype, device):
    """The base kernel's inputs with the up GEMM already applied: act = SiLU(gate) * up of every (token, slot) pair,
    in fp32 rounded once to the dtype (as SGLang's silu_and_mul), row m*topk + s. w1 is dropped after."""
    inputs = BASE.package.make_inputs(shape, dtype, device)
    x, w1, ids = inputs.pop("x"), inputs.pop("w1"), inputs["topk_ids"]
    w1_scale = inputs.pop("w1_scale", None)  # fp8: the up GEMM on the dequantised weights
    M, topk = ids.shape
    act = torch.empty(M * topk, shape["N"], dtype=x.dtype, device=x.device)
    if x.device.type == "meta":  # shapes only (memory checks, the precompile pool): nothing to compute
        inputs["act"] = act
        return inputs
    for e in range(w1.shape[0]):
        tok, slot = torch.where(ids == e)
        if tok.numel():
            w = w1[e].to(x.dtype) if w1_scale is None else (w1[e].float() * w1_scale[e]).to(x.dtype)
            act[tok * topk + slot] = BASE.kernel.silu_and_mul(x[tok] @ w.T)
    inputs["act"] = act
    return inputs


def shape_of(inputs):
    (E, K, N), (M, topk) = inputs["w2"].shape, inputs["topk_ids"].shape
    return {"M": M, "E": E, "N": N, "K": K, "topk": topk}


def named_configs(shape, dtype, device):
    """SGLang's shipped ``_down`` entry for this shape, with BLOCK_SIZE_M set to the up config's, as SGLang runs it."""
    found = BASE.package.shipped_entry(shape, device, down=True, dtype=dtype)
    if not found:
        return {}
    return {SHIPPED: found[0].replace(BLOCK_SIZE_M=up_config(shape, dtype, device)["BLOCK_SIZE_M"])}


def _bytes(s, d):
    weights, acts = BASE.kernel.operand_bytes(d)
    return (min(s["E"], s["M"] * s["topk"]) * s["N"] * s["K"] * weights
            + (s["M"] * s["topk"] * s["N"] + s["M"] * s["K"]) * acts)


def fingerprint() -> str:
    h = hashlib.sha256(source_fingerprint(Path(__file__).parent).encode())
    h.update(BASE.spec.fingerprint.encode())
    return h.hexdigest()[:16]


SPEC = KernelSpec(
    name="sglang_fused_moe_down",
    axes=("M", "E", "N", "K", "topk"),
    batch_axis="M",
    dtypes=("bf16", "fp16", "fp8"),
    make_inputs=make_inputs,
    run=run,
    reference=reference,
    configs=configs,
    default=default,
    shape_of=shape_of,
    dtype_from="w2",  # bf16 / fp16, or float8 for fp8_w8a8 (whose act is bf16)
    bytes=_bytes,
    flops=lambda s, d: 2 * s["M"] * s["topk"] * s["N"] * s["K"],
    description=f"The down GEMM of SGLang {BASE.package.SG.version}'s fused MoE, tuned on its own (_down files).",
    tolerance_scale=2.0,  # one GEMM's storage rounding plus the top-k sum
    fingerprint=fingerprint(),
    artifact_axes=("E", "N"),
    example_shape=BASE.spec.example_shape,
    artifact_dtype=BASE.spec.artifact_dtype,
    named_configs=named_configs,
    artifact_path=BASE.spec.artifact_path,
    artifact_suffix="_down",
    schedule_knobs=BASE.spec.schedule_knobs,
    artifact_render=BASE.spec.artifact_render,
)
