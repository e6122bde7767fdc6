"""Table 5 builder (balms.data.summary.table5_eval_sets): the paper's rows beside our counts."""

from __future__ import annotations

import math

import pytest

from balms.data.summary import TABLE5_COLUMNS, table5_eval_sets


def _summ(source, users, n, mae):
    return {"source": source, "n_users": users, "n_samples": n, "mean_predictor_mae": mae}


def test_table5_rows_in_summary_order_with_paper_numbers():
    t = table5_eval_sets({"pmdata": _summ("real", 16, 1450, 0.44712), "globem": _summ("real", 10, 20, None)})
    assert list(t.columns) == TABLE5_COLUMNS and list(t["dataset"]) == ["PMData", "GLOBEM"]
    pm, gl = t.to_dict("records")
    assert (pm["paper_n_samples"], pm["paper_mean_predictor_mae"], pm["lookback_days"]) == (1448, 0.48, 14)
    assert (pm["ours_users"], pm["ours_n_samples"], pm["ours_mean_predictor_mae"]) == (16, 1450, 0.447)
    assert gl["paper_n_samples"] == 1640 and math.isnan(gl["ours_mean_predictor_mae"])  # no baseline: NaN, no crash


def test_table5_unknown_dataset_is_named():
    with pytest.raises(KeyError, match="no paper row for dataset.*'mimic'"):
        table5_eval_sets({"mimic": _summ("real", 1, 1, 0.1)})
