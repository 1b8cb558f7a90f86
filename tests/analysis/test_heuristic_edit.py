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
    """triton.Config is what a Triton user writes first, and its bare name is the same as ours: the message names it
    with its module and says which Config to return."""
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


def test_the_editor_calls_ties_and_wins_with_the_band_the_selection_decided_the_shape_with(noisy_shape):
    """A win or a loss is beyond the band the shape's selection decided with (16% on these noisy rounds), not a fixed
    2%: a rule picking a config the selection judged a tie does not look better than the shape's own decision."""
    r, dev, c, others = noisy_shape
    assert r.selection.chose_default and r.selection.deciding.band == pytest.approx(0.1595, abs=1e-4)
    assert "band 16.0%" in r.selection.reason

    def rule_picking(cfg):
        return lambda shape, dtype, device: cfg

    [row] = rescore(rule_picking(c), [r], dev, lambda x: x).rows
    assert row.new_ms / row.old_ms == pytest.approx(0.9)
    assert row.verdict == "ties"  # what the selection said of C
    assert row.band == r.selection.deciding.band
    verdicts = {b: rescore(rule_picking(cfg), [r], dev, lambda x: x).rows[0].verdict for b, cfg in others.items()}
    assert verdicts == {88: "ties", 80: "wins", 110: "ties", 120: "loses"}


def test_a_shape_decided_on_quiet_rounds_keeps_the_two_percent_floor(noisy_shape):
    from flytune_nb.strategies.selection import Rule, decide

    r, dev, c, others = noisy_shape
    r.selection = decide(r.default, [c], {r.default: [1.0] * 5, c: [0.95, 0.951, 0.952, 0.953, 0.954]}, Rule())
    assert not r.selection.chose_default and r.selection.deciding.band == 0.02
    [row] = rescore(lambda shape, dtype, device: others[88], [r], dev, lambda x: x).rows
    assert row.band == 0.02 and row.verdict == "wins"  # 0.88 of the default's time
