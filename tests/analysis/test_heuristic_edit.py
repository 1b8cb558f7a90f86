"""The heuristic editor's engine: what an edited rule that returns the wrong thing is told."""
import pytest

from flytune_nb.analysis.heuristic_edit import HeuristicError, rescore
from flytune_nb.core.config import Config
from flytune_nb.core.device import current_device
from flytune_nb.core.registry import get_kernel
from flytune_nb.measure.trial import Trial
from flytune_nb.strategies.loop import SearchResult
from tests.conftest import PLUGINS


def _results():
    dev = current_device()
    cfg = Config({"BLOCK": 128, "MODE": 0}, num_warps=1)
    trial = Trial("toy", {"N": 64}, "fp32", cfg, "ok", p20=0.01, p50=0.01, p80=0.01, device=dev.name)
    return dev, [SearchResult("toy", {"N": 64}, "fp32", dev, cfg, [trial])]


def test_a_rule_returning_triton_config_is_told_which_config_to_return():
    """triton.Config is what a Triton user writes first; "returned Config ..., not a Config" named the type by its
    bare name, the same as ours, and so said nothing."""
    triton = pytest.importorskip("triton")
    spec = get_kernel("toy", [PLUGINS])
    dev, results = _results()

    def rule(shape, dtype, device):
        return triton.Config({"BLOCK": 128, "MODE": 0}, num_warps=1)

    with pytest.raises(HeuristicError) as e:
        rescore(rule, results, dev, spec.canonical, spec=spec)
    msg = str(e.value)
    assert "returned triton.runtime.autotuner.Config for {'N': 64} fp32" in msg
    assert "from flytune_nb.kit import Config" in msg


def test_a_rule_returning_a_builtin_is_named_plainly():
    spec = get_kernel("toy", [PLUGINS])
    dev, results = _results()
    with pytest.raises(HeuristicError, match=r"returned dict for \{'N': 64\} fp32, not a Config"):
        rescore(lambda s, d, dv: {"BLOCK": 128}, results, dev, spec.canonical, spec=spec)
