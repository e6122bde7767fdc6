"""Table 5 builder (balms.data.summary.table5_eval_sets): the paper's rows beside our counts."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from balms.data.evaluation import EVALUATION_RULE_TEXT, EVALUATION_RULES
from balms.data.samples import SAMPLE_RULES
from balms.data.summary import TABLE5_COLUMNS, evaluation_statement, sample_rule_table, table5_eval_sets


def _summ(source, users, n, mae, n_test=None, dropped=None):
    return {"source": source, "n_users": users, "n_samples": n, "mean_predictor_mae": mae,
            "split": {"n_test": n_test}, "dropped": dropped or {}, "paper_n_samples": 1448,
            "paper_mean_predictor_mae": 0.48}


def test_table5_has_every_paper_row_with_ours_beside():
    t = table5_eval_sets({"pmdata": _summ("real", 16, 1450, 0.44712), "globem": _summ("real", 10, 20, None)})
    assert list(t.columns) == TABLE5_COLUMNS and list(t["dataset"]) == ["DiversityOne", "PMData", "GLOBEM"]
    d1, pm, gl = t.to_dict("records")
    assert d1["paper_n_samples"] == 1355 and pd.isna(d1["ours_n_samples"])  # not summarised: no count, no crash
    assert (pm["paper_n_samples"], pm["paper_mean_predictor_mae"], pm["lookback_days"]) == (1448, 0.48, 14)
    assert (pm["ours_users"], pm["ours_n_samples"], pm["ours_mean_predictor_mae"]) == (16, 1450, 0.447)
    assert gl["paper_n_samples"] == 1640 and math.isnan(gl["ours_mean_predictor_mae"])  # no baseline: NaN, no crash


def test_table5_unregistered_dataset_is_named_and_a_registered_one_without_a_paper_row_gets_its_own():
    with pytest.raises(ValueError, match="unknown dataset 'mimic'"):
        table5_eval_sets({"mimic": _summ("real", 1, 1, 0.1)})
    import dataclasses

    from balms.data import registry

    spec = dataclasses.replace(registry.get_dataset("pmdata"), name="mimic", display_name="MIMIC (ours)",
                               synthetic_stream=99)
    registry.register_dataset(spec)
    try:
        t5 = table5_eval_sets({"mimic": _summ("real", 3, 7, 0.1)}).set_index("dataset")
    finally:
        del registry._DATASETS["mimic"]
    assert t5.loc["MIMIC (ours)", "ours_n_samples"] == 7 and t5.loc["MIMIC (ours)", "cohort"] == "not in the paper"
    assert pd.isna(t5.loc["MIMIC (ours)", "paper_n_samples"]) and len(t5) == 4  # the paper's three rows kept


def test_sample_rule_table_marks_the_benchmark_rule_and_counts_every_filter():
    by_rule = {"paper_stated": {"pmdata": _summ("real", 16, 1726, 0.485, 518, {"missing_label": 0})},
               "balms": {"pmdata": _summ("real", 16, 1545, 0.459, 464, {"short_history": 161})}}
    t = sample_rule_table(by_rule)
    assert list(t["rule"]) == ["paper_stated", "balms"] and list(t["benchmark_rule"]) == [False, True]
    assert list(t["dropped_short_history"]) == [0, 161] and list(t["n_test"]) == [518, 464]


def test_evaluation_rule_names_the_sample_rule_and_the_evaluation_rule():
    for r in SAMPLE_RULES:
        for e in EVALUATION_RULES:
            text = evaluation_statement(r, e)
            assert repr(r) in text and repr(e) in text and EVALUATION_RULE_TEXT[e] in text
    assert "30%" in evaluation_statement("balms", "heldout30")
    assert "leave-one-out" in evaluation_statement("balms", "all_days_loo")
    with pytest.raises(KeyError):
        evaluation_statement("tuned")
