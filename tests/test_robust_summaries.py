"""Summaries over the records that answered (issue 37): an error record (no answer, 0 s, 0 tokens) is counted apart
and does not pull the latency and token means down, in the tables' summary and in the report's run page."""

from __future__ import annotations

import pytest

from balms.experiments.summaries import summarize
from balms.records import PredictionRecord
from balms.report_html import run_summary


def _rec(i: int, **kw) -> PredictionRecord:
    base = dict(sample_id=f"pmdata/p0{i}/2020-01-0{i}/L7", dataset="pmdata", user=f"p0{i}",
                target_date=f"2020-01-0{i}", lookback=7, label=3, source="synthetic", system="healthllm", cot=False,
                model="m", model_id="m")
    return PredictionRecord.model_validate(base | kw)


RECORDS = [_rec(1, prediction=3, latency_s=2.0, prompt_tokens=100, completion_tokens=10),
           _rec(2, prediction=4, latency_s=4.0, prompt_tokens=300, completion_tokens=30),
           _rec(3, latency_s=6.0, prompt_tokens=200, completion_tokens=20),  # a parse failure answered: timed
           _rec(4, error="BackendError: HTTP 500", latency_s=0.0, prompt_tokens=0, completion_tokens=0)]


def test_summary_means_leave_error_records_out_and_count_them_apart():
    import pandas as pd

    df = pd.DataFrame([r.model_dump(exclude={"transcript"}) for r in RECORDS]).assign(forced=[False, True, False,
                                                                                              False])
    row = summarize(df, n_boot=50).iloc[0]
    assert row["n_errors"] == 1 and row["n"] == 4
    assert row["mean_latency_s"] == pytest.approx(4.0)  # (2 + 4 + 6) / 3, not 12 / 4
    assert row["mean_prompt_tokens"] == pytest.approx(200.0) and row["mean_completion_tokens"] == pytest.approx(20.0)
    assert row["forced_rate"] == pytest.approx(1 / 3)


def test_the_report_run_page_means_leave_error_records_out():
    got = run_summary([r.model_dump(exclude={"transcript"}) for r in RECORDS])
    assert got["n_harness_errors"] == 1
    assert got["latency_s"] == pytest.approx(4.0) and got["prompt_tokens"] == pytest.approx(200.0)
