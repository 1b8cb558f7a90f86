"""The default for the down GEMM is what SGLang runs there without a ``_down`` file: the up config for this batch
size (``up_config``) — SGLang reuses the up table for the down GEMM, and without one its get_default_config."""
from __future__ import annotations

import os
import warnings

import triton

from flytune_nb.errors import UsageError
from flytune_nb.kit import Config

from .kernel import base


def up_config(shape, dtype, device):
    """The config SGLang will run for the up GEMM at this shape: the nearest entry of the file a server started now
    reads ($SGLANG_MOE_CONFIG_DIR, else SGLang's own folder; the running Triton's folder, else the newest that has
    it), else SGLang's get_default_config. UsageError for a $SGLANG_MOE_CONFIG_DIR without ``configs/`` (SGLang
    raises FileNotFoundError there: no server starts); an ArtifactWarning naming an up file SGLang cannot use."""
    files = base().package.files
    root = files.serving_root()
    if root is not None:
        name = files.file_name(shape["E"], shape["N"], device.name, files.config_dtype(dtype))
        try:
            path, _ = files.resolve(root, name, triton.__version__)
        except files.ArtifactError:
            raise UsageError(_no_configs(root)) from None
        if path is not None:
            try:
                table = files.read_table(path)
                knobs = {k: v for k, v in table[files.nearest(table, shape["M"])].items() if k != "USE_TMA"}
                return Config.from_dict(knobs)
            except UsageError as e:  # ArtifactError, ConfigError: a file SGLang fails on (or, empty, ignores)
                from flytune_nb.serve.lookup import ArtifactWarning

                why = str(e) if str(path) in str(e) else f"{path}: {e}"
                # one message per file (not per batch size): Python shows it once per process
                warnings.warn(f"{why}; SGLang cannot use this up config either, so the down GEMM is pinned to "
                              f"SGLang's default up config until the file is fixed or exported again",
                              ArtifactWarning, stacklevel=1)
    return base().heuristic.default(shape, dtype, device)


def _no_configs(root) -> str:
    where = f"SGLANG_MOE_CONFIG_DIR={root}" if os.environ.get("SGLANG_MOE_CONFIG_DIR") else str(root)
    below = sorted(p.parent.name for p in root.glob("*/configs") if p.is_dir())
    hint = f" (its subfolder {below[0]} has one: point it there)" if len(below) == 1 else (
        " (point it at the folder that holds configs/triton_X_Y_Z/: flytune export writes <out>/sglang_fused_moe)")
    what = "has no configs/ folder" if root.is_dir() else "is not a folder"
    return (f"{where} {what}: a SGLang server started with it raises FileNotFoundError, so there is no up config to "
            f"pin the down GEMM's BLOCK_SIZE_M to{hint}")


def default(shape, dtype, device):
    return up_config(shape, dtype, device)
