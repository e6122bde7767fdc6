"""PMData loader on the real release (../shared/data/pmdata) and on a synthetic cohort."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from balms.data.pmdata import CONTEXT_CHANNELS, load_pmdata


@pytest.fixture(scope="module")
def pm(pmdata_dir):
    return load_pmdata(pmdata_dir)


def test_users_profiles_and_channels(pm):
    assert pm.users == [f"p{i:02d}" for i in range(1, 17)]
    assert pm.source == "real"
    assert pm.profiles.loc["p01", "age"] == 48 and pm.profiles.loc["p04", "gender"] == "female"
    assert np.isnan(pm.profiles.loc["p12", "max_hr"])  # blank cell in the xlsx
    assert {c.device for c in pm.channels} == {"wearable"}
    assert all(c.unit for c in pm.channels)
    assert pm.channel("mood").unit == "out of 5"


def test_resting_hr_first_day_matches_paper_prompt(pm):
    # The paper's Health-LLM example is p01; its first resting HR is 53.7411.
    assert pm.daily.loc[("p01", pd.Timestamp("2019-11-01")), "resting_hr"] == pytest.approx(53.7411, abs=1e-4)
    assert (pm.daily["resting_hr"].dropna() > 0).all()  # 0 = missing became NaN
    assert pm.daily.loc["p12", "resting_hr"].isna().all()  # no resting_heart_rate.json for p12


def test_exercise_steps_recomputed_from_raw(pm, pmdata_dir):
    rec = json.loads((pmdata_dir / "p05" / "fitbit" / "exercise.json").read_text())
    df = pd.DataFrame({"date": [r["startTime"][:10] for r in rec], "steps": [r.get("steps") for r in rec],
                       "calories": [r["calories"] for r in rec]})
    by_day = df.groupby("date")
    for day, g in list(by_day)[:20]:
        row = pm.daily.loc[("p05", pd.Timestamp(day))]
        assert row["calories"] == g["calories"].sum()
        exp = g["steps"].dropna().sum() if g["steps"].notna().any() else np.nan
        assert (np.isnan(exp) and np.isnan(row["steps"])) or row["steps"] == exp
    # a day with no session at all is missing, not zero
    session_days = set(pd.to_datetime(df["date"]))
    p05 = pm.daily.loc["p05"]
    no_session = [d for d in p05.index if d not in session_days]
    assert no_session and p05.loc[no_session, "steps"].isna().all()


def test_labels_duplicates_resolved_and_counted(pm, pmdata_dir):
    n_raw = sum(len(pd.read_csv(p)) for p in sorted(pmdata_dir.glob("p*/pmsys/wellness.csv")))
    assert len(pm.labels) + pm.dropped["duplicate_report"] == n_raw
    assert not pm.labels.duplicated(["user", "date"]).any()
    # last report of the day is kept: p03 has several reports on some days
    w = pd.read_csv(pmdata_dir / "p03" / "pmsys" / "wellness.csv")
    w["date"] = pd.to_datetime(w["effective_time_frame"]).dt.tz_localize(None).dt.normalize()
    w = w.sort_values("effective_time_frame")
    exp = w.groupby("date")["stress"].last()
    got = pm.labels[pm.labels.user == "p03"].set_index("date")["label"]
    pd.testing.assert_series_equal(got.sort_index(), exp.sort_index().astype(float), check_names=False,
                                   check_index_type=False, check_freq=False)


def test_context_same_day(pm):
    assert [c.name for c in pm.context_channels] == [c.name for c in CONTEXT_CHANNELS]
    assert pm.context.loc[("p01", pd.Timestamp("2019-11-01")), "mood"] == 3


def test_subday_half_hour_slots(pm):
    sd = pm.subday
    assert list(sd.columns[:4]) == ["user", "date", "slot", "slot_index"]
    assert sd["slot_index"].between(0, 47).all()
    assert not sd.duplicated(["user", "date", "slot_index"]).any()
    with_steps = sorted(sd.dropna(subset=["steps"])["user"].unique())
    assert with_steps == ["p03", "p10", "p13", "p14", "p16"]
    assert (sd[["asleep_minutes", "awake_minutes"]].sum(axis=1) <= 30 + 1e-9).all()
    # minute steps summed per slot add up to the daily total
    day = sd[(sd.user == "p03")].groupby("date")["steps"].sum(min_count=1).dropna()
    tot = pm.daily.loc["p03", "steps_total"].dropna()
    common = day.index.intersection(tot.index)
    assert len(common) > 50 and np.allclose(day[common], tot[common])


def test_synthetic_uses_the_same_loader(tmp_path):
    from balms.data.synthetic import write_synthetic

    raw = write_synthetic("pmdata", tmp_path / "pmdata", seed=0, n_users=3, n_days=40)
    t = load_pmdata(raw, source="synthetic")
    assert t.source == "synthetic" and len(t.users) == 3
    assert [c.name for c in t.channels] == [c.name for c in load_pmdata.__globals__["CHANNELS"]]
    assert t.daily["resting_hr"].notna().any() and t.labels["label"].notna().any()


def test_two_sleep_recipes_recomputed_from_raw(pm, pmdata_dir):
    """sleep_minutes_paper = summed `duration` of every log by start date (duplicates counted twice);
    sleep_minutes = minutesAsleep of the main sleep by dateOfSleep. Both from p05's raw file."""
    rec = json.loads((pmdata_dir / "p05" / "fitbit" / "sleep.json").read_text())
    paper: dict = {}
    for r in rec:
        day = pd.Timestamp(r["startTime"][:10])
        paper[day] = paper.get(day, 0) + r["duration"] / 60000
    got = pm.daily.loc["p05", "sleep_minutes_paper"].dropna()
    assert dict(got) == paper
    main = {}
    for r in sorted((r for r in rec if r["mainSleep"]), key=lambda r: r["timeInBed"]):
        main[pd.Timestamp(r["dateOfSleep"])] = r["minutesAsleep"]
    assert dict(pm.daily.loc["p05", "sleep_minutes"].dropna()) == main
    assert pm.channel("sleep_minutes_paper").recipe == "paper" and pm.channel("sleep_minutes").recipe == "corrected"
    assert {c.recipe for c in pm.channels if c.name not in ("sleep_minutes", "sleep_minutes_paper")} == {""}


def test_paper_sleep_recipe_counts_a_duplicated_log_twice(pm):
    # p01's 2019-11-06: logs of 364 and 366 minutes start that day, the 366 one listed twice in sleep.json.
    assert pm.daily.loc[("p01", pd.Timestamp("2019-11-06")), "sleep_minutes_paper"] == 364 + 366 + 366
    assert pm.daily.loc[("p01", pd.Timestamp("2019-11-06")), "sleep_minutes"] == 341
