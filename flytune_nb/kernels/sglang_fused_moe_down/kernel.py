"""The down GEMM of SGLang's fused MoE on its own: SGLang's ``invoke_fused_moe_kernel`` on the SiLU*up activations
(scaled by the routing weight), then the sum over the top-k slots — what a ``…_down.json`` file configures.

Everything SGLang-facing is the sibling folder's (kernels/sglang_fused_moe, loaded through the registry so that one
copy of it runs): the kernel, the launcher, the alignment. The up GEMM is not run: its output is an input here
(``act``, made once per shape in torch), so a trial times the down GEMM and the alignment that feeds it.

Both GEMMs read one alignment sorted with the up config's BLOCK_SIZE_M, so a down config keeps the BLOCK_SIZE_M of the
up config SGLang will run at that batch size (``up_config``: the file SGLang reads — $SGLANG_MOE_CONFIG_DIR, else
its own folder — else its default). SGLang overwrites a mismatching one with a warning; here the space never has one.
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import types
from pathlib import Path

from flytune_nb.errors import KernelUnavailable


@functools.lru_cache(maxsize=1)
def base() -> types.SimpleNamespace:
    """The sibling sglang_fused_moe folder's modules (KernelUnavailable, with its own line, when it cannot load)."""
    from flytune_nb.core.registry import load_folder

    try:
        spec = load_folder(Path(__file__).resolve().parent.parent / "sglang_fused_moe")
    except KernelUnavailable as e:
        raise KernelUnavailable(str(e).split(": ", 1)[-1]) from None
    pkg = spec.run.__module__.rsplit(".", 1)[0]
    mods = {m: importlib.import_module(f"{pkg}.{m}") for m in ("kernel", "configs", "heuristic", "reference")}
    return types.SimpleNamespace(spec=spec, package=importlib.import_module(pkg), **mods)


def run(inputs: dict, config):
    from flytune_nb.kit.launcher import compiling_for

    k = base().kernel
    cfg = k.launch_dict(config)
    ids = inputs["topk_ids"]
    compiling = compiling_for() not in (None, "interpreter")  # the precompile pool: compile, launch nothing
    with k.compile_only() if compiling else contextlib.nullcontext():
        aligned = k.align(ids, cfg["BLOCK_SIZE_M"], inputs["w2"].shape[0])
        out = k.down_gemm(inputs["act"], inputs["w2"], inputs["topk_weights"], ids, aligned, cfg,
                          inputs.get("w2_scale"))
    return None if compiling else out
