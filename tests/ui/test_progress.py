


def test_progress_keeps_one_bar_per_shape_in_flight():
    import io

    from flytune_nb.core.config import Config
    from flytune_nb.core.events import ShapeDone, TrialDone, TrialStarted
    from flytune_nb.measure.trial import Trial
    from flytune_nb.strategies.loop import SearchResult
    from flytune_nb.ui.progress import TqdmListener

    out = io.StringIO()
    bar = TqdmListener(file=out, disable=False)
    cfg = Config({"BLOCK": 64})
    a, b = {"N": 8}, {"N": 16}
    bar(TrialStarted("toy", a, "fp32", cfg, 0, 2))
    bar(TrialStarted("toy", b, "fp32", cfg, 0, 3))  # another GPU's shape, interleaved
    ta = Trial("toy", a, "fp32", cfg, "ok", p20=0.01, p50=0.01, p80=0.01)
    bar(TrialDone("toy", ta, 0, 2, ta))
    assert bar.bars[((("N", 8),), "fp32")].n == 1 and bar.bars[((("N", 16),), "fp32")].n == 0
    bar(ShapeDone("toy", SearchResult("toy", a, "fp32", None, cfg, [ta])))
    assert list(bar.bars) == [((("N", 16),), "fp32")] and "toy N=8 fp32" in out.getvalue()


