"""Metrics that catch collapse (issue 39): the flag fires on a constant answerer and not on the labels themselves;
class-averaged MAE, kappa and within-person Spearman are blind to the commonest answer."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from balms import metrics


def _frame(pred_of) -> pd.DataFrame:
    """Ten participants, 15 days each, stress-like labels piled on 2 (about 40%), seeded."""
    rng = np.random.default_rng(0)
    rows = []
    for u in range(10):
        labels = rng.choice([1, 2, 3, 4, 5], size=15, p=[0.15, 0.4, 0.25, 0.15, 0.05])
        for i, y in enumerate(labels):
            rows.append({"sample_id": f"u{u}/{i}", "user": f"u{u}", "dataset": "pmdata", "label": int(y),
                         "prediction": pred_of(int(y))})
    return pd.DataFrame(rows)


def test_flag_fires_on_a_constant_answerer_and_not_on_the_labels():
    const = metrics.collapse_metrics(_frame(lambda y: 2.0), n_boot=200)
    gold = metrics.collapse_metrics(_frame(float), n_boot=200)
    assert const["answer_share"] == 1.0 and const["label_share"] < 0.8 and const["collapse"] is True
    assert gold["answer_share"] == gold["label_share"] and gold["collapse"] is False
    # the constant answerer: kappa 0, no within-person ranking; the labels: perfect on both
    assert const["qwk"] == pytest.approx(0.0) and const["within_person_spearman"] == 0.0
    assert gold["qwk"] == pytest.approx(1.0) and gold["within_person_spearman"] == pytest.approx(1.0)
    assert const["spearman_n_users"] == 10
    # its MAE is low, its class-averaged MAE is not
    frame = _frame(lambda y: 2.0)
    assert const["class_averaged_mae"] > metrics.mae(frame) + 0.3


def test_flag_margin_is_twenty_points():
    # labels: 50% are 1; answers: 70% -> excess 0.20 exactly (not more): no flag; 75% -> flag
    labels = [1] * 10 + [2] * 5 + [3] * 5
    for ones, flag in ((14, False), (15, True)):
        preds = [1] * ones + [3] * (20 - ones)
        df = pd.DataFrame({"sample_id": range(20), "user": ["a", "b"] * 10, "label": labels, "prediction": preds})
        assert metrics.answer_share(df)["collapse"] is flag


def test_class_averaged_mae_and_spearman_by_hand():
    df = pd.DataFrame({"sample_id": range(4), "user": "a", "label": [1, 1, 1, 2], "prediction": [1, 1, 1, 1]})
    assert metrics.mae(df) == pytest.approx(0.25)
    assert metrics.class_averaged_mae(df) == pytest.approx(0.5)  # label 1: 0, label 2: 1
    # within one person, answers in the reverse order of the labels: rho -1; a person with one label: left out
    two = pd.DataFrame({"sample_id": range(7), "user": ["a"] * 4 + ["b"] * 3, "label": [1, 2, 3, 4, 3, 3, 3],
                        "prediction": [4, 3, 2, 1, 1, 2, 3]})
    assert metrics.per_user_spearman(two).to_dict() == {"a": pytest.approx(-1.0)}
    # a parse failure counts in the answer share, not in the parsed-answer metrics
    bad = df.assign(prediction=[1, 1, None, 2])
    assert metrics.answer_share(bad)["answer_share"] == pytest.approx(0.5)
    assert metrics.class_averaged_mae(bad) == pytest.approx(0.0)


def test_collapse_table_one_row_per_cell():
    a, b = _frame(lambda y: 2.0).assign(system="const"), _frame(float).assign(system="gold")
    t = metrics.collapse_table(pd.concat([a, b]), ["dataset", "system"], n_boot=100).set_index("system")
    assert t.loc["const", "collapse"] and not t.loc["gold", "collapse"]


def test_report_run_page_states_the_collapse_check():
    from balms.report_html import render, run_summary

    recs = _frame(lambda y: 2.0).to_dict("records")
    s = run_summary(recs)
    assert s["collapse"]["collapse"] is True and s["collapse"]["answer_share"] == 1.0
    assert run_summary(_frame(float).to_dict("records"))["collapse"]["collapse"] is False
    about = {"dataset": "pmdata", "system": "healthllm", "model": "m", "model_id": "m", "cot": False, "lookback": 14,
             "cell_key": "k", "options": "{}"}
    page = render("run.html.j2", title="t", depth=1, slug="s", summary=s, rows=[], filters=[], about=about)
    assert 'id="collapse"' in page and "COLLAPSE" in page
