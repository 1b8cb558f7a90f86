"""The one "did you mean" rule: similarity shortlists, the fewest edits decide."""
import pytest

from flytune_nb.core.suggest import closest
from flytune_nb.core.targets import get_target
from flytune_nb.errors import UsageError


def test_the_fewest_edits_decide_among_equally_similar_names():
    targets = ["mi300x", "mi325x", "mi350x", "mi355x", "h100", "h200", "b200"]
    assert closest("mi301x", targets) == "mi300x"  # difflib alone ties it with mi350x and lists mi350x first
    assert closest("h10", targets) == "h100"
    assert closest("kernal", ["grid", "kernel", "dtypes"]) == "kernel"
    assert closest("zzzz", targets) is None and closest("x", []) is None


def test_an_unknown_target_suggests_the_one_edit_away():
    with pytest.raises(UsageError, match=r"unknown target 'mi301x'\. Did you mean 'mi300x'\?"):
        get_target("mi301x")
