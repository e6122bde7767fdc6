"""PHIA failure taxonomy: constructed traces for each of F1-F5 (positive and negative), the taxonomy
table, and traces produced by the REAL faithful and improved executors on real PMData."""

from __future__ import annotations

import pytest

from balms.failures import (
    classify_trace,
    failure_rates,
    magic_thresholds,
    paper_rates,
    schema_blind_aggregations,
    taxonomy_table,
)
from balms.records import PredictionRecord, Step

NO_OUT = "Code executed (no output)"


def rec(steps, **kw) -> PredictionRecord:
    base = dict(sample_id="pmdata/p01/2020-01-15/L14", dataset="pmdata", user="p01", target_date="2020-01-15",
                lookback=14, label=3, source="real", system="phia", cot=False, model="fake", model_id="fake",
                options={"executor": "faithful"}, prediction=3)
    base.update(kw)
    return PredictionRecord(transcript=steps, **base)


def code(src):
    return Step(kind="code", content=src)


def obs(text, status="ok", error_type=None):
    return Step(kind="observation", content=text, meta={"status": status, "error_type": error_type})


def test_f1_silent_execution():
    r = rec([code("x = daily['steps'].mean()"), obs(NO_OUT, "no_output"), code("print(1)"), obs("1")])
    assert classify_trace(r)["F1"] == 1
    r = rec([code("print(daily['steps'].mean())"), obs("8123.4")])
    assert classify_trace(r)["F1"] == 0


def test_f2_lost_state_needs_an_earlier_assignment():
    err = "Traceback (most recent call last):\nNameError: name 'avg' is not defined"
    r = rec([code("avg = daily['steps'].mean()"), obs(NO_OUT, "no_output"),
             code("print(avg)"), obs(err, "error", "NameError")])
    c = classify_trace(r)
    assert c["F2"] == 1 and c["name_errors"] == 1
    # the name was never assigned before: a NameError, but not lost state
    r = rec([code("print(daily.shape)"), obs("(19, 13)"), code("print(avg)"), obs(err, "error", "NameError")])
    c = classify_trace(r)
    assert c["F2"] == 0 and c["name_errors"] == 1
    # assigned in the SAME failing block only (e.g. used before assignment): not lost state either
    r = rec([code("print(avg)\navg = 1"), obs(err, "error", "NameError")])
    assert classify_trace(r)["F2"] == 0


def test_f2_without_the_message_falls_back_to_ast():
    r = rec([code("import numpy as np\nbase = np.mean(daily['steps'])"), obs(NO_OUT, "no_output"),
             code("print(base * 2)"), obs("NameError", "error", "NameError")])
    assert classify_trace(r)["F2"] == 1


def test_f3_forced_finish():
    r = rec([code("print(1)"), obs("1"), Step(kind="prompt", content="used all your steps"),
             Step(kind="forced_finish", content="Answer: 4")])
    assert classify_trace(r)["F3"] == 1
    assert classify_trace(rec([Step(kind="completion", content="Answer: 3")]))["F3"] == 0


@pytest.mark.parametrize("src,n", [
    ("if daily['steps'].iloc[-1] > 7000:\n    print('low activity')", 1),
    ("stressed = daily['sleep_minutes'].tail(3).mean() < 360\nprint(stressed)", 1),
    ("print((daily['resting_hr'] >= 65.5).sum())", 1),
    ("print((daily['steps'] > 0).sum())", 0),  # trivial literal
    ("print(len(daily) > 5)", 0),  # size, not a behavioural threshold
    ("night = subday[subday['slot_index'] < 12]\nprint(night.steps.sum())", 0),  # time-of-day filter
    ("base = daily['steps'].mean()\nprint(daily['steps'].iloc[-1] < 0.8 * base)", 0),  # derived from data
    ("print(daily['steps'].iloc[-1] >", 0),  # unparseable block: nothing to inspect
    ("THRESHOLD = 7000\nprint(daily['steps'].iloc[-1] < THRESHOLD)", 1),  # a literal behind a name
    ("thr = daily['steps'].median()\nprint(daily['steps'].iloc[-1] < thr)", 0),  # a name computed from data
    ("thr = 5\nthr = daily['steps'].median()\nprint(daily['steps'].iloc[-1] < thr)", 0),
])
def test_f4_magic_numbers(src, n):
    assert len(magic_thresholds(src)) == n


# Realistic PHIA blocks with several literal comparisons in one block: each comparison is one event, and
# reading the second one must not break (a loop variable once shadowed the literal-resolving helper).
MULTI_BRANCH = [
    ("last = daily['steps'].iloc[-1]\n"
     "if last > 10000:\n    print('very active')\nelif last < 5000:\n    print('sedentary')\n"
     "else:\n    print('moderate')", 2),
    ("sleep_h = daily['sleep_minutes'].tail(3).mean() / 60\n"
     "steps = daily['steps'].tail(3).mean()\n"
     "if sleep_h < 6 and steps < 4000:\n    stress = 5\n"
     "elif sleep_h < 7 or steps < 6000:\n    stress = 4\n"
     "elif sleep_h >= 8 and steps >= 9000:\n    stress = 2\nelse:\n    stress = 3\nprint(stress)", 6),
    ("LOW, HIGH = 5000, 10000\nSLEEP_MIN = 420\n"
     "s = daily['steps'].iloc[-1]\n"
     "flag = 'low' if s < SLEEP_MIN else 'ok'\n"
     "print(flag, daily['resting_hr'].iloc[-1] > 70, daily['sleep_minutes'].iloc[-1] <= 300)", 3),
    ("for hour in range(24):\n    if hour < 6:\n        continue\n"
     "if daily['steps'].iloc[-1] > 12000:\n    print('high')\n"
     "if (daily['steps'] > 0).all():\n    print('complete')\n"
     "if daily['sleep_minutes'].iloc[-1] < 360:\n    print('short sleep')", 2),
]


@pytest.mark.parametrize("src,n", MULTI_BRANCH)
def test_f4_multi_branch_blocks(src, n):
    assert len(magic_thresholds(src)) == n


def test_f4_multi_branch_block_in_a_trace():
    src = MULTI_BRANCH[1][0]
    r = rec([code("print(daily[['steps', 'sleep_minutes']].tail(3))"), obs("steps sleep_minutes\n8123 401"),
             code(src), obs("3")])
    assert classify_trace(r)["F4"] == 6


def test_f4_literal_read_from_an_earlier_observation_is_data_derived():
    src = "print(daily['steps'].iloc[-1] < 8234.5)"
    r = rec([code("print(daily['steps'].mean())"), obs("8234.5"), code(src), obs("True")])
    assert classify_trace(r)["F4"] == 0
    r = rec([code("print(daily['steps'].mean())"), obs("9100.2"), code(src), obs("True")])
    assert classify_trace(r)["F4"] == 1


@pytest.mark.parametrize("src,n", [
    ("print(subday['steps'].mean())", 1),
    ("print(subday.steps.sum())", 1),
    ("import numpy as np\nprint(np.mean(subday['asleep_minutes']))", 1),
    ("s = subday[subday.slot_index > 30]\nprint(s['steps'].sum())", 1),  # alias of the sub-day frame
    ("print(subday.groupby('date')['steps'].sum().mean())", 0),
    ("print(subday.resample('D', on='date')['steps'].sum().mean())", 0),
    ("print(subday[subday['date'] == '2019-11-01']['steps'].sum())", 0),  # one day: a daily total
    ("print(daily['steps'].mean())", 0),  # the daily frame is fine
    ("per_day = subday.groupby('date').sum()\nprint(per_day['steps'].mean())", 0),
    # the paper's trace names (the frames PHIA is given now): subday_df is a sub-day frame, daily_df is not
    ("print(subday_df['steps'].mean())", 1),
    ("night = subday_df[subday_df.segment == 'night']\nprint(night['steps'].sum())", 1),
    ("daily_df = subday_df.groupby('date').sum()\nprint(daily_df['steps'].mean())", 0),
    ("print(daily_df['steps'].mean())", 0),
])
def test_f5_schema_blind_aggregation(src, n):
    assert len(schema_blind_aggregations(src)) == n


def test_taxonomy_table_counts_and_rates():
    bad = [code("x = daily['steps'].mean()"), obs(NO_OUT, "no_output"), code("print(x > 7000)"),
           obs("NameError: name 'x' is not defined", "error", "NameError"), code("print(subday['steps'].mean())"),
           obs("12.5"), Step(kind="forced_finish", content="Answer: 3")]
    good = [code("print(daily['steps'].tail(3).mean())"), obs("8000.0"), Step(kind="completion", content="Answer: 2")]
    recs = [rec(bad, sample_id="a"), rec(good, sample_id="b"),
            rec(good, sample_id="c", options={"executor": "improved"})]
    t = taxonomy_table(recs, by=["dataset", "executor"])
    f = t.set_index("executor").loc["faithful"]
    assert f["n_windows"] == 2
    for k in ("F1", "F2", "F3", "F4", "F5"):
        assert f[f"{k}_events"] == 1 and f[f"{k}_per_window"] == 0.5 and f[f"{k}_window_rate"] == 0.5
    assert t.set_index("executor").loc["improved", "F1_events"] == 0
    # code_window_rate: episodes in which at least one block ran (a prose-only episode has none)
    prose = rec([Step(kind="completion", content="Answer: 3")], sample_id="d")
    t3 = taxonomy_table([*recs, prose], by=["executor"]).set_index("executor")
    assert t3.loc["faithful", "code_window_rate"] == pytest.approx(2 / 3)
    assert t3.loc["improved", "code_window_rate"] == 1
    # the same from a records frame (as experiments.run(..., keep_transcript=True) returns it)
    import pandas as pd

    frame = pd.DataFrame([r.model_dump() for r in recs])
    t2 = taxonomy_table(frame, by=["dataset", "executor"])
    pd.testing.assert_frame_equal(t, t2)


def test_failure_rates_with_participant_intervals():
    silent = [code("x = 1"), obs(NO_OUT, "no_output")]
    recs = [rec(silent * 2, sample_id="a", user="p01"), rec(silent, sample_id="b", user="p01"),
            rec([code("print(1)"), obs("1")], sample_id="c", user="p02"),
            rec([code("print(1)"), obs("1")], sample_id="e", user="p03")]
    r = failure_rates(recs, by=["executor"]).set_index("failure")
    assert list(r.index) == ["F1", "F2", "F3", "F4", "F5"] and (r["n_windows"] == 4).all()
    assert r.loc["F1", "per_window"] == pytest.approx(3 / 4)
    assert r.loc["F1", "ci_low"] <= 3 / 4 <= r.loc["F1", "ci_high"] and r.loc["F1", "ci_high"] > r.loc["F1", "ci_low"]
    assert r.loc["F2", "per_window"] == 0 and r.loc["F2", "ci_high"] == 0


def test_paper_rates_are_read_from_the_packaged_transcription():
    p = paper_rates().set_index(["dataset", "failure"])["per_window"]
    # Appendix B.2: 168 empty observations over 82 traced GLOBEM windows (printed as 2.0), 0.7 on PMData,
    # 8 of 10 traced PMData windows force-finished
    assert p[("globem", "F1")] == 2.0 and p[("pmdata", "F1")] == 0.7 and p[("pmdata", "F3")] == 0.8


# ---------------------------------------------------------------- real executor, real PMData


@pytest.mark.realdata
@pytest.mark.parametrize("executor", ["faithful", "improved"])
def test_real_executor_traces(pmdata_dir, executor):
    """A scripted model drives the REAL sandbox on a real PMData record: the detectors read the real
    executor's observation texts and fields. Faithful shows F1, F2, F3, F4, F5; improved removes F1/F2."""
    from agent_fakes import ScriptedBackend, samples_of
    from balms.agents.registry import make_agent

    tables, samples = samples_of("real", "pmdata")
    s = [x for x in samples if x.user == "p03"][3]
    script = [
        "[Act]\n```python\nbase = daily_df['steps'].mean()\n```",  # silent in faithful mode (F1)
        "[Act]\n```python\nprint(base)\n```",  # lost state in faithful mode (F2)
        "[Act]\n```python\nprint(daily_df['steps'].iloc[-1] > 7000)\n```",  # magic threshold (F4)
        "[Act]\n```python\nprint(subday_df['steps'].mean())\n```",  # sub-day mean (F5)
    ]
    be = ScriptedBackend(script, default="Answer: 3")
    r = make_agent("phia", executor=executor, max_iters=4).predict(s, tables, be)
    c = classify_trace(r)
    assert c["n_code_blocks"] == 4 and c["F3"] == 1 and c["F4"] == 1 and c["F5"] == 1
    if executor == "faithful":
        assert c["F1"] == 1 and c["F2"] == 1
    else:
        assert c["F2"] == 0
