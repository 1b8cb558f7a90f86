"""sglang_fused_moe: SGLang's own Triton fused-MoE kernel (the one an SGLang server runs with the configs it reads),
tuned here, exported as the files SGLang's tuner writes. Needs the ``sglang`` package (the ``sglang`` extra).

Which parts are SGLang's, imported from the installed version: the kernel (``fused_moe_kernel``), its launcher
(``invoke_fused_moe_kernel``), the fused call (``fused_experts_impl``), ``override_config``, the heuristic default
(``get_default_config``) and, on a GPU with sgl_kernel, the alignment. Ours: the space (a copy of SGLang's tuning
script's rule, pruned; configs.py), the float64 reference, the alignment where sgl_kernel cannot run, and the glue
(kernel.py says which path runs where). The tuning key's source fingerprint covers this folder, SGLang's version and
SGLang's kernel source, so a new SGLang re-tunes.

Axes: M tokens, E experts of one rank, N intermediate size of one rank (w1 is (E, 2N, K), w2 (E, K, N)), K hidden
size, topk. Dtypes: bf16 and fp16 (unquantised), fp8 (SGLang's fp8_w8a8 per tensor: float8 weights with a scale per
expert, bf16 activations that SGLang's launcher quantises per tensor; files named ``…,dtype=fp8_w8a8.json``).
Files: ``<dir>/sglang_fused_moe/configs/triton_X_Y_Z/E=…,N=…,device_name=….json`` —
``SGLANG_MOE_CONFIG_DIR=<dir>/sglang_fused_moe`` makes SGLang read them (docs/sglang.md).
"""
from __future__ import annotations

import importlib.util

from flytune_nb.kit import KernelUnavailable

if importlib.util.find_spec("sglang") is None:  # before anything imports torch-heavy SGLang code: a fast "no"
    raise KernelUnavailable("needs sglang: pip install 'flytune_nb[sglang]'")

import hashlib  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

from flytune_nb.artifacts import sglang as files  # noqa: E402
from flytune_nb.core.key import code_tokens, source_fingerprint  # noqa: E402
from flytune_nb.kit import KernelSpec, to_torch  # noqa: E402

from .configs import configs  # noqa: E402
from .heuristic import default  # noqa: E402
from .kernel import fp8_quant, fp8_weights, operand_bytes, run, sglang  # noqa: E402
from .reference import moe_reference  # noqa: E402

SG = sglang()  # KernelUnavailable (one line) when SGLang is installed but its MoE modules do not import here
SHIPPED = "SGLang shipped"


def _fp8_activations(device) -> torch.dtype:
    """fp8 models run bf16 activations. Triton 3.6's interpreter rounds fp32 -> bf16 toward zero (half of all stores
    one ulp off), and the fp8 re-quantisation of the intermediate turns that into 2e-2 of error, beyond the
    tolerance: there the activations are fp16 (SGLang's fp8 path takes both), whose conversion rounds to nearest."""
    return torch.float16 if device.backend == "interpreter" else torch.bfloat16


def make_inputs(shape, dtype, device):
    M, E, N, K, topk = (shape[a] for a in ("M", "E", "N", "K", "topk"))
    fp8 = dtype == "fp8"
    dt, dev = (_fp8_activations(device) if fp8 else to_torch(dtype)), device.torch_device
    # Routing as in flytune's fused_moe: softmax over skewed random logits, top-k, renormalised, drawn from a
    # generator seeded by the shape so that every config of a shape is timed on the same routing (a fresh routing
    # per trial moves one config by up to 16% at small M on the H200). x and the weights are fresh draws.
    g = torch.Generator().manual_seed(((M * 1_000_003) ^ (E * 1009)) + topk)
    logits = (torch.randn(M, E, generator=g) + torch.linspace(0, 2, E)).to(dev)
    weights, ids = torch.topk(torch.softmax(logits, dim=-1), topk, dim=-1)
    inputs = {
        "x": torch.randn(M, K, device=dev, dtype=dt),
        "w1": torch.randn(E, 2 * N, K, device=dev, dtype=dt).mul_(K ** -0.5),
        "w2": torch.randn(E, K, N, device=dev, dtype=dt).mul_(N ** -0.5),
        "topk_weights": (weights / weights.sum(-1, keepdim=True)).float(),
        "topk_ids": ids.to(torch.int32),
    }
    if fp8:  # quantised as an fp8 checkpoint is: one scale per expert and weight
        inputs["w1"], inputs["w1_scale"] = fp8_weights(inputs["w1"])
        inputs["w2"], inputs["w2_scale"] = fp8_weights(inputs["w2"])
    return inputs


def reference(inputs):
    return moe_reference(inputs["x"], inputs["w1"], inputs["w2"], inputs["topk_weights"], inputs["topk_ids"],
                         inputs.get("w1_scale"), inputs.get("w2_scale"), fp8_quant)


def shape_of(inputs):
    (M, K), (E, two_n, _) = inputs["x"].shape, inputs["w1"].shape
    return {"M": M, "E": E, "N": two_n // 2, "K": K, "topk": inputs["topk_ids"].shape[1]}


def shipped_entry(shape, device, *, down: bool = False, dtype: str = "bf16"):
    """(Config, path, batch size) of the entry SGLang's own config folder has for this shape and dtype on this
    device, or None (flytune_nb.artifacts.sglang.shipped_entry)."""
    return files.shipped_entry(shape, device.name, down=down, dtype=files.config_dtype(dtype))


def named_configs(shape, dtype, device):
    found = shipped_entry(shape, device, dtype=dtype)
    return {SHIPPED: found[0]} if found else {}


def _bytes(s, d):
    active = min(s["E"], s["M"] * s["topk"])
    weights, acts = operand_bytes(d)
    return active * 3 * s["N"] * s["K"] * weights + 2 * s["M"] * s["K"] * acts


def fingerprint() -> str:
    """This folder's code, SGLang's version, the path that runs here, and SGLang's kernel and launcher source."""
    h = hashlib.sha256(source_fingerprint(Path(__file__).parent).encode())
    h.update(f"\0sglang={SG.version}\0path={SG.path}\0".encode())
    h.update(code_tokens(Path(SG.kernels.__file__).read_bytes()))
    return h.hexdigest()[:16]


SPEC = KernelSpec(
    name="sglang_fused_moe",
    axes=("M", "E", "N", "K", "topk"),
    batch_axis="M",
    dtypes=("bf16", "fp16", "fp8"),
    make_inputs=make_inputs,
    run=run,
    reference=reference,
    configs=configs,
    default=default,
    shape_of=shape_of,
    dtype_from="w1",  # bf16 / fp16, or float8 for fp8_w8a8 (whose x is bf16)
    bytes=_bytes,
    flops=lambda s, d: 2 * s["M"] * s["topk"] * 3 * s["N"] * s["K"],
    description=f"SGLang {SG.version}'s own Triton fused-MoE kernel (both GEMMs, one config), bf16/fp16/fp8_w8a8.",
    # Three storage roundings (gate+up GEMM, SiLU*up, down GEMM) plus the top-k sum, as flytune's fused_moe; fp16
    # through the interpreter measured 5e-4 against the float64 loop.
    tolerance_scale=3.0,
    fingerprint=fingerprint(),
    artifact_axes=("E", "N"),
    example_shape={"M": 64, "E": 8, "N": 14336, "K": 4096, "topk": 2},  # Mixtral-8x7B at tp=1
    artifact_dtype=files.config_dtype,
    schedule_knobs=("GROUP_SIZE_M",),  # the grouped tile order: which tile, not how it is computed
    named_configs=named_configs,
    artifact_path="sglang_fused_moe/configs",
    artifact_render=files.render,
    extra={"sglang_version": SG.version, "path": SG.path, "shipped_entry": shipped_entry},
)
