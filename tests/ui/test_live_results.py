"""LiveResults.add: timings measured beside a finished shape's search (the heuristic editor's Measure missing) join
it on the search's clock, so the configs the selection never re-timed keep their times."""
import math
import random

import pytest

pytest.importorskip("ipywidgets")

from flytune_nb.core.config import Config  # noqa: E402
from flytune_nb.core.device import interpreter_device  # noqa: E402
from flytune_nb.measure.trial import Trial  # noqa: E402
from flytune_nb.strategies.loop import SearchResult  # noqa: E402
from flytune_nb.strategies.selection import Rule, Selection  # noqa: E402
from flytune_nb.analysis.explore import shape_label  # noqa: E402
from flytune_nb.ui.notebook.live import LiveResults  # noqa: E402

SHAPE = {"N": 64}


def _trial(block, p50):
    return Trial("toy", SHAPE, "fp32", Config({"BLOCK": block}, num_warps=1), "ok", p20=p50 * 0.98, p50=p50,
                 p80=p50 * 1.02)


def test_a_default_timed_again_under_another_load_does_not_rescale_the_searchs_other_configs():
    d_search, a_search = random.uniform(0.5, 2.0), random.uniform(2.0, 4.0)
    d_rounds = d_search * random.uniform(1.02, 1.10)  # re-timed with fresh inputs: a few percent off the search
    load = random.uniform(3.0, 5.0)  # the machine is this much slower when Measure missing runs
    default, a, b = _trial(16, d_search), _trial(32, a_search), _trial(64, 1.0)
    sel = Selection(default.config, default.config, "kept", Rule(), [default.config],
                    {default.config: [d_rounds] * 3})
    result = SearchResult("toy", SHAPE, "fp32", interpreter_device(), default.config, [default, a], {},
                          selection=sel)
    live = LiveResults()
    live.merge(result)
    label = shape_label(SHAPE, "fp32")
    before = live.get(label).time_of(a.config)
    assert math.isclose(before, a_search * d_rounds / d_search)

    b_fresh = random.uniform(1.0, 3.0)
    live.add(_trial(16, d_search * load))  # Measure missing times the default first, then the picks
    live.add(_trial(64, b_fresh))
    after = live.get(label)
    assert label in live.finished and after.selection is sel
    assert math.isclose(after.time_of(a.config), before)  # was a_search * d_rounds / (d_search * load)
    # a pick on the same footing as the search: its time beside the re-timed default, over the default's
    assert math.isclose(after.time_of(b.config), b_fresh / (d_search * load) * d_rounds)
    assert math.isclose(after.time_of(default.config), d_rounds)
