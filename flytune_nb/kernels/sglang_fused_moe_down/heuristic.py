"""The default for the down GEMM is what SGLang runs there without a ``_down`` file: the up config for this batch
size (``up_config``) — SGLang reuses the up table for the down GEMM, and without one its get_default_config."""
from __future__ import annotations

import triton

from flytune_nb.kit import Config

from .kernel import base


def up_config(shape, dtype, device):
    """The config SGLang will run for the up GEMM at this shape: the nearest entry of the file a server started now
    reads ($SGLANG_MOE_CONFIG_DIR, else SGLang's own folder; the running Triton's folder, else the newest that has
    it), else SGLang's get_default_config."""
    files = base().package.files
    root = files.serving_root()
    if root is not None:
        try:
            name = files.file_name(shape["E"], shape["N"], device.name, files.config_dtype(dtype))
            path, _ = files.resolve(root, name, triton.__version__)
            if path is not None:
                table = files.read_table(path)
                knobs = {k: v for k, v in table[files.nearest(table, shape["M"])].items() if k != "USE_TMA"}
                return Config.from_dict(knobs)
        except files.ArtifactError:
            pass
    return base().heuristic.default(shape, dtype, device)


def default(shape, dtype, device):
    return up_config(shape, dtype, device)
