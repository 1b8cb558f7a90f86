"""The committed exports (flytune_nb/exports): valid, in the space of the GPU they were tuned on, and never
overwritten with interpreter timings."""
import json
from collections import Counter

import pytest
import triton

from flytune_nb.artifacts import files as artifacts
from flytune_nb.core.config import Config
from flytune_nb.core.registry import get_kernel
from flytune_nb.core.shapes import SGLANG_BATCH_SIZES
from flytune_nb.serve.lookup import lookup
from flytune_nb.ui.cli import main

pytestmark = pytest.mark.usefixtures("fresh_lookup_cache")


def test_export_refuses_interpreter_timings_for_the_committed_exports(swept, capsys):
    """`flytune export` writes into the repository's exports/ by default: CPU-interpreter timings are refused there
    (one message, nothing written), whatever calls export (CLI, workbench, batch)."""
    from flytune_nb.artifacts.files import BUILTIN_DIR
    from flytune_nb.core.device import current_device

    if current_device().is_gpu:
        pytest.skip("the store holds GPU timings here, which the committed folder takes")
    before = sorted(BUILTIN_DIR.rglob("*"))
    assert main(["export", "--db", str(swept.path)]) == 2
    assert "not written: these are CPU_interpreter timings" in capsys.readouterr().err
    assert sorted(BUILTIN_DIR.rglob("*")) == before


def test_committed_h200_exports_are_valid_and_in_the_h200_space():
    """The configs committed under exports/ come from real H200 sweeps; on a described H200 they must be found by
    lookup (not fall back), be in the kernel's pruned space, be named as the kernel names its files (SGLang's bf16
    MoE files carry no dtype), and carry provenance for every entry."""
    from flytune_nb.artifacts.files import BUILTIN_DIR
    from tests.conftest import H200

    files = sorted(BUILTIN_DIR.glob("*/triton_3_6_0/*device_name=NVIDIA_H200*.json"))
    kernels = Counter(f.parent.parent.name for f in files)
    # rmsnorm and fused_add_rmsnorm x N in {2048, 4096, 5120, 8192} x {bf16, fp16}; GEMM N,K = 4096,4096 and
    # 14336,4096; MoE E=8 N=14336 and E=128 N=768 (H200 surrogate sweeps); softmax
    # N=4096, 8192 bf16 (exhaustive H200 sweeps)
    assert kernels == {"rmsnorm": 8, "fused_add_rmsnorm": 8, "matmul": 2, "fused_moe": 2, "softmax": 2}
    dtypes_seen = set()
    for f in files:
        spec = get_kernel(f.parent.parent.name)
        table = artifacts.read_table(f)
        prov = json.loads((f.parent / "provenance.json").read_text())[f.name]
        assert sorted(table) == sorted(int(m) for m in prov)
        if spec.name in ("matmul", "fused_moe", "softmax"):
            assert len(table) == 18  # SGLang's batch sizes, 1 ... 4096
        for m, knobs in table.items():
            p = prov[str(m)]
            shape, dtype = {**p["shape"], spec.batch_axis: m}, p["dtype"]
            dtypes_seen.add(dtype)
            assert artifacts.file_name(spec, shape, "NVIDIA_H200", dtype) == f.name
            assert Config.from_dict(knobs) in spec.configs(shape, dtype, H200)
            assert p["device"] == "NVIDIA_H200" and p["best_p50_ms"] > 0
            if triton.__version__.startswith("3.6.0"):
                assert lookup(spec, shape, dtype, device=H200, directory=BUILTIN_DIR) == (Config.from_dict(knobs),
                                                                                          "artifact")
    assert dtypes_seen == {"bf16", "fp16"}


def test_committed_h100_matmul_exports_are_found_on_an_h100_and_in_its_space():
    """matmul's H100 files come from a surrogate sweep on an H100 over SGLang's 18 batch sizes, each shape vetted by
    the selection stage. Every entry must be in the space on a described H100, and be what lookup serves there."""
    from flytune_nb.artifacts.files import BUILTIN_DIR
    from flytune_nb.core.targets import get_target

    h100 = get_target("h100").device()
    files = sorted(BUILTIN_DIR.glob("matmul/triton_3_6_0/*device_name=NVIDIA_H100_80GB_HBM3*.json"))
    assert [f.name.split(",device")[0] for f in files] == ["N=14336,K=4096", "N=4096,K=4096"]
    spec = get_kernel("matmul")
    for f in files:
        table = artifacts.read_table(f)
        prov = json.loads((f.parent / "provenance.json").read_text())[f.name]
        assert sorted(table) == sorted(int(m) for m in prov) == list(SGLANG_BATCH_SIZES)
        for m, knobs in table.items():
            p = prov[str(m)]
            shape, dtype = {**p["shape"], "M": m}, p["dtype"]
            assert p["device"] == "NVIDIA_H100_80GB_HBM3" and p["selection"] is not None
            assert Config.from_dict(knobs) in spec.configs(shape, dtype, h100)
            if triton.__version__.startswith("3.6.0"):
                assert lookup(spec, shape, dtype, device=h100, directory=BUILTIN_DIR) == (Config.from_dict(knobs),
                                                                                          "artifact")


def test_fused_moe_refuses_more_experts_per_token_than_experts_and_its_exports_stay_current():
    """fused_moe's rule topk <= E (top-k 8 of 4 experts failed in the worker, after the sweep started) comes from its
    folder's shape_rules.json, which leaves the tuning key as it was: the committed H200 files are still of the
    kernel's current source, not stale."""
    from flytune_nb.artifacts.files import BUILTIN_DIR
    from flytune_nb.artifacts.gate import stale_files
    from flytune_nb.errors import UsageError

    spec = get_kernel("fused_moe")
    with pytest.raises(UsageError, match=r"^fused_moe: shape M=2 E=4 N=64 K=64 topk=8 breaks the rule topk <= E"):
        spec.check_shape({"M": 2, "E": 4, "N": 64, "K": 64, "topk": 8})
    assert spec.check_shape({"M": 2, "E": 8, "N": 64, "K": 64, "topk": 8})["topk"] == 8
    assert stale_files(BUILTIN_DIR, "NVIDIA_H200", kernels=["fused_moe"]) == []
    assert len(list(BUILTIN_DIR.glob("fused_moe/triton_3_6_0/*device_name=NVIDIA_H200*.json"))) == 2
