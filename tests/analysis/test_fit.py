"""analysis.fit on replayed H200 sweeps (no GPU): the fitted rule against the hand-written heuristic on shapes left
out of the fit, the emitted code as the heuristic editor runs it, and the tree on data built to need a split."""
import dataclasses
import math

import pytest

from flytune_nb.analysis import fit as F
from flytune_nb.analysis.heuristic_edit import load_heuristic
from flytune_nb.core.config import Config
from flytune_nb.core.registry import get_kernel
from tests.conftest import FIXTURES, H200

NO_TMA = dataclasses.replace(H200, arch="sm_80")  # the GEMM fixture is pointer-only: the H200's SMs without TMA
CASES = [("rmsnorm", "h200_sweeps.json", H200), ("fused_add_rmsnorm", "h200_sweeps.json", H200),
         ("matmul", "h200_gemm_sweeps.json", NO_TMA)]


@pytest.mark.parametrize("kernel,fixture,device", CASES)
def test_the_fit_beats_or_matches_the_hand_rule_on_shapes_left_out(kernel, fixture, device):
    """Each swept shape held out in turn, the rule fitted on the others: its geomean regret there is at most the
    hand rule's, over the same shapes, every one of them timed."""
    spec = get_kernel(kernel)
    data = F.from_fixture(FIXTURES / fixture, kernel, spec.canonical)
    summary = F.cross_validate(data, spec, device, group_by=()).summary()
    assert summary["compared"] == summary["shapes"] == len(data) >= 3
    assert summary["fitted_regret"] <= summary["hand_regret"] + 1e-12, summary


@pytest.mark.parametrize("kernel,fixture,device", CASES)
def test_the_fit_corrects_a_wrong_hand_rule_out_of_sample(kernel, fixture, device):
    """A hand rule that is plainly wrong (the slowest config of the first swept shape, everywhere): the fitted rule
    overrides it and is faster on the held-out shapes; kept as is, it would stay that slow."""
    spec = get_kernel(kernel)
    data = F.from_fixture(FIXTURES / fixture, kernel, spec.canonical)
    first = data[0]
    worst = max((c for c, t in first.times.items() if math.isfinite(t)), key=first.times.get)
    bad = dataclasses.replace(spec, default=lambda shape, dtype, dev: worst)
    summary = F.cross_validate(data, bad, device, group_by=(), land=False).summary()
    assert summary["compared"] >= 2
    assert summary["fitted_regret"] < summary["hand_regret"] / 1.2, summary


def test_the_tree_splits_where_the_winner_changes():
    """Synthetic sweeps: config A wins below M=64, B above, by 30%; fitted without the hand rule, the tree splits on
    log2 M and picks right at a batch size it never saw."""
    spec = get_kernel("rmsnorm")
    a = Config({"BLOCK_N": 1024}, num_warps=4, num_stages=1)
    b = Config({"BLOCK_N": 1024}, num_warps=16, num_stages=1)
    data = [F.ShapeTimes({"M": m, "N": 1024}, "bf16", {a: 1.0 if m < 64 else 1.3, b: 1.3 if m < 64 else 1.0})
            for m in (1, 4, 16, 256, 1024, 4096)]
    rule = F.fit(data, spec, H200, keep_hand=False)
    assert len(rule.leaves()) == 2
    assert rule.predict({"M": 8, "N": 1024}, "bf16", H200) == a
    assert rule.predict({"M": 512, "N": 1024}, "bf16", H200) == b
    # relative to the row: the same leaf at N=4096 is the whole row on 4 x as many warps
    assert rule.predict({"M": 2048, "N": 4096}, "bf16", H200) == Config({"BLOCK_N": 4096}, num_warps=32, num_stages=1)


@pytest.mark.parametrize("kernel,fixture,device", CASES)
def test_the_emitted_rule_is_what_the_editor_runs(kernel, fixture, device):
    """Rule.source compiles in the heuristic editor (the kernel folder as its package), stands alone (a copy of the
    hand rule inside, never an import of heuristic.py, so it can be saved over it), and on swept and unswept shapes
    returns the fitted pick landed on the pruned space."""
    spec = get_kernel(kernel)
    data = F.from_fixture(FIXTURES / fixture, kernel, spec.canonical)
    rule = F.fit(data, spec, device)
    source = rule.source
    assert "def default(shape, dtype, device)" in source and "from .heuristic" not in source
    fn = load_heuristic(source, package=f"flytune_nb.kernels.{kernel}")
    shapes = [s.shape for s in data] + ([{"M": 48, "N": 7168}, {"M": 3000, "N": 5120}] if kernel != "matmul" else
                                        [{"M": 48, "N": 11008, "K": 4096}, {"M": 700, "N": 6144, "K": 4096}])
    for shape in shapes:
        got = spec.canonical(fn(dict(shape), "bf16", device))
        assert got in spec.configs(shape, "bf16", device)
        leaf = rule.root.leaf_for(shape, "bf16", device)
        want = spec.canonical(spec.default(dict(shape), "bf16", device)) if leaf.template is F.HAND else \
            F.landed(spec, rule.predict(shape, "bf16", device), shape, "bf16", device)
        assert got == want, shape


def test_a_store_without_that_kernel_is_one_clear_error(tmp_path):
    from flytune_nb.engine.sweep import Sweep

    db = tmp_path / "s.db"
    one = Config({"BLOCK_N": 256}, num_warps=1, num_stages=1)
    Sweep("rmsnorm", "M=1,8 N=256", ["fp32"], configs=[one], db=db, isolate=False, baselines=()).run()
    data = F.from_store(db, "rmsnorm")
    assert len(data) == 2 and all(math.isfinite(s.best) for s in data)
    with pytest.raises(F.FitError, match="no timed softmax sweeps"):
        F.from_store(db, "softmax")
