"""Identical binaries, for real: Triton compiles rmsnorm for sm_90 on this CPU machine (its bundled ptxas, no GPU,
the stand-in driver of flytune_nb.backends.triton), and configs that differ only in ``num_stages`` of a kernel
without a pipelined loop come out byte-identical, while ``num_warps`` changes the code."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

SCRIPT = r"""
import json, sys
import flytune_nb.core.registry as registry
from flytune_nb.backends.triton import binary_hash
from flytune_nb.core.config import Config
from flytune_nb.core.device import DESCRIBED, enter_compile_mode
from flytune_nb.measure.memory import meta_inputs

dev = DESCRIBED["NVIDIA_H200"]
enter_compile_mode(dev)  # compile for the GPU target: without it this GPU-less process picks the interpreter
spec = registry.get_kernel("rmsnorm")
shape = {"M": 4096, "N": 4096}
inputs = meta_inputs(spec, shape, "bf16", dev)
out = {}
for stages, warps in ((1, 4), (2, 4), (1, 8)):
    cfg = Config({"BLOCK_N": 1024}, num_warps=warps, num_stages=stages)  # looped: 4 blocks of a 4096 row
    out[f"{stages},{warps}"] = binary_hash(spec, inputs, cfg, ("cuda", 90, 32))
out["other_shape"] = binary_hash(spec, meta_inputs(spec, {"M": 4096, "N": 8192}, "bf16", dev),
                                 Config({"BLOCK_N": 1024}, num_warps=4, num_stages=1), ("cuda", 90, 32))
out["no_target"] = binary_hash(spec, inputs, Config({"BLOCK_N": 1024}, num_warps=4, num_stages=1), None)
print(json.dumps(out))
"""


def test_num_stages_twins_of_a_row_kernel_have_one_sm90_binary(tmp_path):
    ptxas = Path(__import__("triton").__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    if not ptxas.exists():
        pytest.skip("this Triton has no bundled ptxas")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(PYTHONPATH=REPO, TRITON_CACHE_DIR=str(tmp_path / "triton"))
    p = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    h = json.loads(p.stdout.strip().splitlines()[-1])
    assert h["1,4"] and len(h["1,4"]) == 16
    assert h["1,4"] == h["2,4"]  # num_stages changes nothing here: timed once
    assert h["1,4"] != h["1,8"]  # num_warps does
    assert h["other_shape"] != h["1,4"]  # N is a specialised argument: another launch
    assert h["no_target"] is None  # the interpreter: no binary, nothing to call a twin
