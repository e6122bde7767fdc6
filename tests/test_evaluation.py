"""Evaluation rules (balms.data.evaluation) on the real data: which samples are scored, the mean predictor."""

from __future__ import annotations

import numpy as np
import pytest

from balms.data.evaluation import EVALUATION_RULES, evaluate, mean_predictor_mae
from balms.data.samples import build_samples
from balms.data.summary import evaluation_rule_table


@pytest.fixture(scope="module")
def pm(pmdata_tables):
    return build_samples(pmdata_tables)


def test_paper_rule_scores_every_sample_with_a_leave_one_out_mean(pm):
    ev = evaluate(pm, "all_days_loo")
    y = np.array([s.label for s in pm], float)
    assert len(ev.test) == len(pm) == len(ev.train)  # Table 7: every window is a held-out window
    for s in ev.test[:50]:
        assert ev.mean_prediction[s.sample_id] == pytest.approx((y.sum() - s.label) / (len(y) - 1))
    # on the real PMData the leave-one-out mean predictor rounds to the paper's 0.48 (balms sample rule)
    assert round(mean_predictor_mae(ev), 2) == 0.48


def test_heldout30_is_the_seeded_split_with_the_training_mean(pm):
    ev = evaluate(pm, "heldout30", seed=0)
    assert len(ev.test) == 464 and len(ev.train) + len(ev.test) == len(pm)
    assert not {s.sample_id for s in ev.test} & {s.sample_id for s in ev.train}
    assert list(set(ev.mean_prediction.values())) == [pytest.approx(np.mean([s.label for s in ev.train]))]


def test_per_user_rules_use_only_the_users_other_or_earlier_labels(pm):
    earlier = evaluate(pm, "all_days_user_earlier")
    first = {}
    for s in sorted(pm, key=lambda s: s.target_date):
        first.setdefault(s.user, s.sample_id)
    assert not set(first.values()) & set(earlier.mean_prediction)  # a user's first day has no earlier label
    s = earlier.test[5]
    prev = [x.label for x in pm if x.user == s.user and x.target_date < s.target_date]
    assert earlier.mean_prediction[s.sample_id] == pytest.approx(np.mean(prev))


def test_unknown_rule_is_named(pm):
    with pytest.raises(ValueError, match="unknown evaluation rule 'tuned'"):
        evaluate(pm, "tuned")


def test_rule_table_has_every_rule_and_the_papers_counts(pmdata_tables, globem_tables):
    t = evaluation_rule_table({"pmdata": pmdata_tables, "globem": globem_tables}, sample_rules=["balms"])
    assert set(t.evaluation_rule) == set(EVALUATION_RULES)
    gl = t[(t.dataset == "globem") & (t.evaluation_rule == "all_days_loo")].iloc[0]
    assert (gl.paper_table5_n, gl.paper_table7_n, gl.n_scored) == (1640, 1640, gl.n_samples)
    pm = t[(t.dataset == "pmdata") & (t.evaluation_rule == "heldout30")].iloc[0]
    assert (pm.n_samples, pm.n_scored, pm.paper_table7_n) == (1545, 464, 1463)


def test_a_sweep_cells_mean_predictor_is_the_evaluation_that_drew_its_samples(real_data, monkeypatch):
    """Notebook 03 draws its target days at the longest look-back, whose held-out days (heldout30) are not the
    default look-back's: each cell's mean predictor comes from the cohort that scores all of its samples."""
    from balms.experiments import config
    from balms.experiments.cells import cells_for, draw_lookbacks
    from balms.experiments.cohorts import cohort, mean_predictions, with_lookback

    monkeypatch.setenv("BALMS_RAW_DIR", str(real_data))
    cfg = config.load("demo", evaluation_rule="heldout30")
    assert draw_lookbacks(cfg) == [None, max(cfg.lookbacks)] == [None, max(d.sample_lookback or 0
                                                                          for d in cells_for("03_long_horizon", cfg))]
    default, sweep = cohort("pmdata", cfg), cohort("pmdata", cfg, max(cfg.lookbacks))
    drawn = [with_lookback(s, 7) for s in sweep.test]
    outside = [s.sample_id for s in drawn if s.sample_id not in default.mean_prediction]
    assert outside, "every sweep day is also held out at the default look-back: nothing to check"
    where = draw_lookbacks(cfg)
    got = mean_predictions(cfg, "pmdata", outside, where)
    assert set(got.values()) == {sweep.train_mean} != {default.train_mean}
    inside = sorted(default.mean_prediction)[:5]  # a notebook-01 cell: the default cohort's own evaluation
    assert mean_predictions(cfg, "pmdata", inside, where) == {i: default.mean_prediction[i] for i in inside}
    with pytest.raises(KeyError, match="not all scored"):
        mean_predictions(cfg, "pmdata", [*outside[:1], "pmdata/p01/1999-01-01/L7"], where)
