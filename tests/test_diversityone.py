"""DiversityOne reader: synthetic site, a hand-made site with known answers, and malformed input."""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest

from balms.data import diversityone as d1
from balms.data.diversityone import load_diversityone
from balms.data.schema import DataError
from balms.data.synthetic import write_synthetic


@pytest.fixture(scope="module")
def synth_root(tmp_path_factory):
    return write_synthetic("diversityone", tmp_path_factory.mktemp("d1") / "diversityone", seed=0)


@pytest.fixture()
def site_copy(synth_root, tmp_path):
    dst = tmp_path / "diversityone"
    shutil.copytree(synth_root, dst)
    return dst / d1.DEFAULT_SITE


def test_reader_on_synthetic_site(synth_root):
    t = load_diversityone(synth_root, source="synthetic")
    assert t.name == "diversityone" and t.source == "synthetic"
    assert t.target.scale_min == 1 and t.target.scale_max == 5 and "6 - A6a" in t.target.description
    assert {c.name for c in t.channels} == {c.channel for c in d1.SENSOR_COLUMNS}
    assert all(c.device == "phone" for c in t.channels)
    assert len(t.users) == 12
    # Full calendar per user, no duplicate (user, date).
    assert not t.daily.index.duplicated().any()
    for u in t.users:
        days = t.daily.xs(u, level=0).index
        assert (days[1:] - days[:-1] == pd.Timedelta(days=1)).all()
    assert set(t.labels["label"].unique()) <= {1.0, 2.0, 3.0, 4.0, 5.0}
    # Sub-day slots: "HH:MM" strings consistent with slot_index, one row per (user, date, slot).
    sd = t.subday
    assert list(sd.columns[:4]) == ["user", "date", "slot", "slot_index"]
    hh, mm = sd["slot"].str[:2].astype(int), sd["slot"].str[3:].astype(int)
    assert ((hh * 2 + mm // 30) == sd["slot_index"]).all()
    assert not sd.duplicated(["user", "date", "slot_index"]).any()
    # Daily sums equal the sum of the day's slots.
    u, d = t.users[0], sd.loc[sd["user"] == t.users[0], "date"].iloc[5]
    day_total = sd.loc[(sd.user == u) & (sd.date == d), "screen_min"].sum()
    assert t.daily.loc[(u, d), "screen_min"] == pytest.approx(day_total)
    # Every filtered diary row is counted.
    for key in ("diary_prompts_unanswered", "diary_mood_out_of_range", "evening_mood_extra_answers"):
        assert key in t.dropped
    assert t.dropped["diary_prompts_unanswered"] > 0 and t.dropped["evening_mood_extra_answers"] > 0


def test_labels_recoded_and_last_evening_answer_is_kept(synth_root):
    """Recompute the label of every user-day straight from the parquet file."""
    t = load_diversityone(synth_root)
    raw = pd.read_parquet(synth_root / d1.DEFAULT_SITE / d1.TIMEDIARIES)
    ans = raw.dropna(subset=["answertimestamp", "A6a"])
    ev = ans[ans["instancetimestamp"].dt.hour >= 18].sort_values("answertimestamp")
    ev = ev.assign(date=ev["instancetimestamp"].dt.normalize())
    expect = ev.groupby(["userid", "date"])["A6a"].last().rsub(6.0)
    got = t.labels.set_index(["user", "date"])["label"]
    assert len(got) == len(expect)
    pd.testing.assert_series_equal(got.sort_index(), expect.rename_axis(["user", "date"]).rename("label").sort_index())
    assert t.dropped["evening_mood_extra_answers"] == len(ev) - len(expect)


def _tiny_site(root):
    site = root / "Site_Testcity_XX"
    (site / "Diachronic-Interactions").mkdir(parents=True)
    ts = pd.to_datetime
    diary = pd.DataFrame({
        "userid": ["u1"] * 5,
        "instancetimestamp": ts(["2020-11-16 12:00", "2020-11-16 19:00", "2020-11-16 21:30", "2020-11-16 22:00",
                                 "2020-11-17 20:00"]),
        "answertimestamp": ts(["2020-11-16 12:05", "2020-11-16 19:10", "2020-11-16 21:40", None, "2020-11-17 20:01"]),
        "tag": "timediary", "A3": "x", "A4": "y",
        "A6a": [5.0, 4.0, 1.0, np.nan, 7.0],  # noon (not evening), two evening answers, one unanswered, one bad
    })
    diary.to_parquet(site / d1.TIMEDIARIES, index=False)
    for sensor in d1.SENSORS:
        cols = sorted({c.column for c in d1.SENSOR_COLUMNS if c.sensor == sensor})
        (site / "Sensors" / sensor).mkdir(parents=True)
        df = pd.DataFrame({"userid": "u1", "timestamp": ["2020-11-16 02:00:00", "2020-11-16 09:30:00"],
                           **{c: [10.0, 20.0] for c in cols}})
        df.to_csv(site / "Sensors" / sensor / f"{sensor}_30min.csv", index=False)
    return site


def test_hand_made_site_rules(tmp_path):
    site = _tiny_site(tmp_path)
    t = load_diversityone(tmp_path)  # one site folder -> picked automatically
    assert t.labels["label"].tolist() == [5.0]  # last evening answer A6a=1 -> 6-1 = 5
    assert t.dropped == {"diary_prompts_unanswered": 1, "diary_mood_out_of_range": 1,
                         "diary_answers_not_evening": 1, "evening_mood_extra_answers": 1}
    day = t.daily.loc[("u1", pd.Timestamp("2020-11-16"))]
    assert day["screen_min"] == 30.0 and day["night_screen_min"] == 10.0 and day["battery"] == 15.0
    assert t.subday["slot"].tolist() == ["02:00", "09:30"] and t.subday["slot_index"].tolist() == [4, 19]
    assert load_diversityone(site).raw_dir == str(site)  # a site folder itself is accepted too


def test_missing_timediaries_names_the_file(site_copy):
    (site_copy / d1.TIMEDIARIES).unlink()
    with pytest.raises(DataError, match="timediaries.parquet"):
        load_diversityone(site_copy)


def test_missing_diary_column_names_file_and_field(site_copy):
    p = site_copy / d1.TIMEDIARIES
    pd.read_parquet(p).drop(columns=["A6a"]).to_parquet(p, index=False)
    with pytest.raises(DataError, match=r"timediaries\.parquet.*field 'A6a'"):
        load_diversityone(site_copy)


def test_non_numeric_mood_names_file_row_and_field(site_copy):
    p = site_copy / d1.TIMEDIARIES
    df = pd.read_parquet(p)
    df["A6a"] = [None if pd.isna(v) else str(int(v)) for v in df["A6a"]]  # a text column, as in a CSV export
    df.loc[3, "A6a"] = "good"
    df.to_parquet(p, index=False)
    with pytest.raises(DataError, match=r"timediaries\.parquet, row 3, field 'A6a'.*'good'"):
        load_diversityone(site_copy)


def test_non_numeric_sensor_value(site_copy):
    p = site_copy / "Sensors" / "screen" / "screen_30min.csv"
    df = pd.read_csv(p)
    df["screen_on_min"] = df["screen_on_min"].astype(object)
    df.loc[2, "screen_on_min"] = "lots"
    df.to_csv(p, index=False)
    with pytest.raises(DataError, match=r"screen_30min\.csv, row 2, field 'screen_on_min'"):
        load_diversityone(site_copy)


def test_missing_sensor_column(site_copy):
    p = site_copy / "Sensors" / "battery" / "battery_30min.csv"
    pd.read_csv(p).drop(columns=["battery_mean"]).to_csv(p, index=False)
    with pytest.raises(DataError, match=r"battery_30min\.csv, field 'battery_mean'"):
        load_diversityone(site_copy)


def test_duplicate_slot_and_off_grid_timestamp(site_copy):
    p = site_copy / "Sensors" / "wifi" / "wifi_30min.csv"
    df = pd.read_csv(p)
    pd.concat([df, df.iloc[[0]]]).to_csv(p, index=False)
    with pytest.raises(DataError, match=r"wifi_30min\.csv.*field 'timestamp'.*duplicate|duplicate.*wifi"):
        load_diversityone(site_copy)
    df.loc[0, "timestamp"] = "2020-11-16 08:10:00"
    df.to_csv(p, index=False)
    with pytest.raises(DataError, match=r"wifi_30min\.csv, row 0, field 'timestamp'"):
        load_diversityone(site_copy)


def test_duplicate_diary_prompt(site_copy):
    p = site_copy / d1.TIMEDIARIES
    df = pd.read_parquet(p)
    pd.concat([df, df.iloc[[7]]], ignore_index=True).to_parquet(p, index=False)
    with pytest.raises(DataError, match=r"field 'instancetimestamp'.*duplicate prompt"):
        load_diversityone(site_copy)


def test_absent_sensor_is_noted_not_fatal(site_copy):
    shutil.rmtree(site_copy / "Sensors" / "gyroscope")
    t = load_diversityone(site_copy)
    assert t.daily["rotation"].isna().all()
    assert any("gyroscope" in n for n in t.notes)


def test_site_selection_errors(tmp_path):
    with pytest.raises(DataError, match="not found"):
        load_diversityone(tmp_path / "nope")
    _tiny_site(tmp_path)
    with pytest.raises(DataError, match="site 'Paris' not found"):
        load_diversityone(tmp_path, site="Paris")
    assert load_diversityone(tmp_path, site="Testcity").raw_dir.endswith("Site_Testcity_XX")


def test_timezone_aware_timestamps_become_site_local_time(tmp_path):
    site = _tiny_site(tmp_path)
    p = site / d1.TIMEDIARIES
    df = pd.read_parquet(p)
    for c in ("instancetimestamp", "answertimestamp"):  # the same instants, stored in UTC (+8 h in Mongolia)
        df[c] = df[c].dt.tz_localize("Asia/Ulaanbaatar").dt.tz_convert("UTC")
    df.to_parquet(p, index=False)
    mn = tmp_path / "mn"
    shutil.copytree(site, mn / "Site_Ulaanbaatar_MN")
    t = load_diversityone(mn)
    assert t.labels["label"].tolist() == [5.0] and t.dropped["diary_answers_not_evening"] == 1


def test_numeric_timestamps_are_rejected(tmp_path):
    site = _tiny_site(tmp_path)
    p = site / d1.TIMEDIARIES
    df = pd.read_parquet(p)
    df["instancetimestamp"] = df["instancetimestamp"].astype("int64") // 10**6
    df.to_parquet(p, index=False)
    with pytest.raises(DataError, match=r"field 'instancetimestamp'.*expected a timestamp"):
        load_diversityone(site)
