"""Every summary of a sweep names the shape's pick (the selection stage's winner, what an export ships) as its best,
with re-timed times, not the search's fastest whose lead the re-timing undid."""
import io
import math
import random

import pytest

from flytune_nb.core.config import Config
from flytune_nb.core.device import DeviceInfo
from flytune_nb.measure.trial import Trial
from flytune_nb.strategies.loop import SearchResult
from flytune_nb.strategies.selection import Rule, decide

SHAPE = {"M": 4, "N": 128}


def _dev():
    return DeviceInfo(backend="interpreter", name="CPU_interpreter", arch="cpu", sm_count=1, l2_bytes=0, total_memory=0)


def _result(lucky_lead: bool, shape=SHAPE):
    """Default D and candidate C. The search timed C ~25% faster than D (a lucky timing); re-timed over five rounds
    C is either as slow as D within noise (``lucky_lead``: the default is kept) or 30% faster (C wins)."""
    rng = random.Random()
    base = rng.uniform(0.5, 2.0)  # ms: fresh numbers every run, so no test passes on a constant
    d, c = Config({"BLOCK_N": 128}, num_warps=1), Config({"BLOCK_N": 256}, num_warps=4)
    trials = [Trial("rmsnorm", shape, "fp32", d, "ok", p20=base, p50=base, p80=base, rel_error=1e-7),
              Trial("rmsnorm", shape, "fp32", c, "ok", p20=base * 0.75, p50=base * 0.75, p80=base * 0.75,
                    rel_error=1e-7)]
    d_rounds = [base * (1 + rng.uniform(-0.01, 0.01)) for _ in range(5)]
    ratio = 1.0 if lucky_lead else 0.7
    c_rounds = [t * ratio * (1 + rng.uniform(-0.01, 0.01)) for t in d_rounds]
    sel = decide(d, [c], {d: d_rounds, c: c_rounds}, Rule())
    r = SearchResult("rmsnorm", shape, "fp32", _dev(), d, trials, selection=sel)
    return r, d, c, d_rounds, c_rounds


def test_search_result_speedup_follows_the_pick_and_its_re_timed_times():
    r, d, c, d_rounds, c_rounds = _result(lucky_lead=True)
    assert r.best.config == c and r.pick.config == d  # the search's fastest lost its lead when re-timed
    assert r.speedup == 1.0 and r.search_speedup == pytest.approx(1 / 0.75)
    assert r.pick_ms == pytest.approx(sorted(d_rounds)[2]) and r.default_ms == r.pick_ms
    assert r.time_of(c) == pytest.approx(sorted(c_rounds)[2])  # re-timed, not the search's lucky 0.75
    w, d, c, d_rounds, c_rounds = _result(lucky_lead=False)
    assert w.pick.config == c
    assert w.speedup == pytest.approx(sorted(d_rounds)[2] / sorted(c_rounds)[2])
    assert 1.35 < w.speedup < 1.5  # ~1/0.7 re-timed, not the search's 1/0.75
    # a config the selection never re-timed answers with its search p50; one never measured with nan
    assert r.time_of(Config({"BLOCK_N": 512}, num_warps=8)) != r.time_of(Config({"BLOCK_N": 512}, num_warps=8))


def test_overview_scores_editor_and_trials_frame_name_the_pick():
    from flytune_nb.analysis.explore import trials_frame
    from flytune_nb.analysis.heuristic_edit import rescore
    from flytune_nb.analysis.overview import overview_frame, regret_by_dtype
    from flytune_nb.analysis.scores import speedup_rows

    r, d, c, _, _ = _result(lucky_lead=True)
    w, *_ = _result(lucky_lead=False, shape={"M": 16, "N": 128})
    frame = overview_frame([r, w], "M")
    kept, won = frame.iloc[0], frame.iloc[1]
    assert kept["best"] == str(d) and kept["speedup"] == 1.0 and kept["fastest"] == str(c)
    assert won["best"] == str(c) and won["speedup"] == pytest.approx(w.speedup) and won["fastest"] == ""
    assert regret_by_dtype(frame)["fp32"]["regret"] == pytest.approx(math.sqrt(w.speedup))
    rows = speedup_rows([r])
    assert rows[0]["best"] == str(d) and rows[0]["speedup"] == 1.0 and rows[0]["search_best"] == str(c)
    trials = trials_frame([r])
    assert list(trials[trials["is_best"]]["config"]) == [str(d)]
    # the editor scores a rule picking the unconfirmed candidate against the pick, both re-timed: no phantom win
    score = rescore(lambda shape, dtype, device: c, [r], _dev(), lambda x: x)
    row = score.rows[0]
    assert row.best_ms == pytest.approx(r.pick_ms) and row.new_ms == pytest.approx(r.time_of(c))
    assert row.verdict in ("ties", "loses")


def test_report_tables_mark_the_pick_and_the_unconfirmed_fastest():
    from flytune_nb.ui.report import summary_table, trials_table

    r, d, c, _, _ = _result(lucky_lead=True)
    lines = trials_table(r).splitlines()
    assert "best default" in next(line for line in lines if line.startswith(str(d)))
    assert next(line for line in lines if line.startswith(str(c))).rstrip().endswith("fastest")
    text = summary_table([r])
    assert "search's fastest (not confirmed)" in text and "default kept" in text
    row = text.splitlines()[-1]
    assert " default " in row and "1.00x" in row and row.rstrip().endswith(str(c))
    w, *_ = _result(lucky_lead=False)
    text = summary_table([w])
    assert "not confirmed" not in text and f"{w.speedup:.2f}x" in text


def test_line_listener_prints_each_finished_shape_and_a_status_line_per_interval():
    from flytune_nb.core.events import ShapeDone, TrialDone, TrialStarted
    from flytune_nb.ui.progress import LineListener

    now = [0.0]
    out = io.StringIO()
    log = LineListener(file=out, every_s=30, clock=lambda: now[0])
    r, d, c, _, _ = _result(lucky_lead=True)
    log(TrialStarted("rmsnorm", SHAPE, "fp32", d, 0, 2))
    log(TrialDone("rmsnorm", r.trials[0], 0, 2, r.trials[0]))
    assert out.getvalue() == ""  # under 30 s: no line yet
    stored = Trial("rmsnorm", SHAPE, "fp32", Config({"BLOCK_N": 64}, num_warps=2), "ok", p20=1.0, p50=1.0, p80=1.0)
    log(TrialDone("rmsnorm", stored, 2, 3, r.trials[0]))  # the store held it: no TrialStarted, not counted
    now[0] = 31.0
    log(TrialStarted("rmsnorm", SHAPE, "fp32", c, 1, 2))
    log(TrialDone("rmsnorm", r.trials[1], 1, 2, r.trials[1]))
    assert "2 trials measured so far; running: M=4 N=128 fp32 2/2" in out.getvalue()
    log(ShapeDone("rmsnorm", r))
    last = out.getvalue().splitlines()[-1]
    assert last.startswith("rmsnorm M=4 N=128 fp32: 2 trials, 0 failed; pick ") and str(d) in last
    assert "default kept" in last


def test_trials_table_says_which_timings_were_a_quick_round():
    """Successive halving times a survivor twice: its quick and full rows are told apart, not shown as duplicates."""
    from flytune_nb.ui.report import trials_table

    r, d, c, _, _ = _result(lucky_lead=False)
    assert "timing" not in trials_table(r).splitlines()[1]
    r.trials.append(Trial("rmsnorm", SHAPE, "fp32", c, "ok", p20=9.0, p50=9.0, p80=9.0, rel_error=1e-7,
                          fidelity="quick"))
    lines = trials_table(r).splitlines()
    assert "timing" in lines[1]
    assert sum(line.startswith(str(c)) and line.rstrip().endswith("quick") for line in lines) == 1


def test_a_config_never_re_timed_is_put_on_the_re_timed_clock():
    """The editor compares a rule's config with the pick: a config the selection never re-timed gets its search
    p50 scaled by the default's re-timed / search ratio, so the re-timing's offset (fresh inputs read a few percent
    slower here) cannot turn a search tie into a win."""
    from flytune_nb.analysis.heuristic_edit import rescore

    r, d, c, d_rounds, _ = _result(lucky_lead=True)
    base = r.trials[0].p50
    x = Config({"BLOCK_N": 512}, num_warps=8)
    r.trials.append(Trial("rmsnorm", SHAPE, "fp32", x, "ok", p20=base * 0.99, p50=base * 0.99, p80=base * 0.99,
                          rel_error=1e-7))
    scale = sorted(d_rounds)[2] / base
    assert r.time_of(x) == pytest.approx(base * 0.99 * scale)
    row = rescore(lambda shape, dtype, device: x, [r], _dev(), lambda k: k).rows[0]
    assert row.verdict == "ties" and row.new_ms / row.best_ms == pytest.approx(0.99)


def test_a_default_that_failed_a_round_is_a_loss_and_a_quick_only_pick_has_a_time():
    r, d, c, d_rounds, c_rounds = _result(lucky_lead=True)
    r.selection = decide(d, [c], {d: d_rounds[:2] + [math.inf] + d_rounds[3:], c: c_rounds}, Rule(),
                         failed={d: "wrong: rel 0.5"})
    assert r.pick.config == c and r.time_of(d) == math.inf
    assert r.speedup != r.speedup  # nan: no ratio against a failing default ...
    from flytune_nb.analysis.overview import overview_frame, regret_by_dtype

    frame = overview_frame([r], "M")
    assert frame["speedup"].iloc[0] == math.inf  # ... and the overview's regret shows the loss
    assert regret_by_dtype(frame)["fp32"]["regret"] == math.inf
    # a stopped shape whose only passing timing was successive halving's quick round
    q = Config({"BLOCK_N": 64}, num_warps=2)
    s = SearchResult("rmsnorm", SHAPE, "fp32", _dev(), d,
                     [Trial("rmsnorm", SHAPE, "fp32", d, "wrong", reason="rel 0.5"),
                      Trial("rmsnorm", SHAPE, "fp32", q, "ok", p20=2.0, p50=2.0, p80=2.0, fidelity="quick")],
                     stopped=True)
    assert s.pick.config == q and s.pick_ms == 2.0
