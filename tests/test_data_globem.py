"""GLOBEM loader on the real public sample (both cohorts)."""

from __future__ import annotations

import pandas as pd
import pytest

from balms.data.globem import DEFAULT_CHANNELS, load_globem
from balms.data.samples import build_samples

CASE_STUDY_NAMES = ["Steps", "Sleep Minutes", "Sleep Efficiency", "Screen Unlock Duration", "Outgoing Calls",
                    "Location Entropy", "Unique BT Devices", "Wifi Scans"]


def _cohorts(globem_dir):
    return sorted(p for p in globem_dir.iterdir() if (p / "FeatureData").is_dir())


def test_every_cohort_loads_with_full_catalogue(globem_dir):
    cohorts = _cohorts(globem_dir)
    assert len(cohorts) >= 2
    for c in cohorts:
        t = load_globem(c)
        n_cols = sum(len(pd.read_csv(f, nrows=0).columns) - 2 for f in (c / "FeatureData").glob("*.csv"))
        assert len(t.catalogue) == n_cols
        assert set(t.catalogue["variant"]) == {"raw", "norm", "dis"}
        assert {"allday", "morning", "afternoon", "evening", "night"} <= set(t.catalogue["segment"])
        assert set(t.catalogue.loc[t.catalogue.sensor.isin(["steps", "slp"]), "device"]) == {"wearable"}
        assert set(t.catalogue.loc[~t.catalogue.sensor.isin(["steps", "slp"]), "device"]) == {"phone"}
        assert [ch.label for ch in t.channels] == CASE_STUDY_NAMES
        assert t.daily.notna().any().all()


def test_default_channels_are_the_allday_raw_columns(globem_dir):
    c = _cohorts(globem_dir)[0]
    t = load_globem(c)
    raw = pd.read_csv(c / "FeatureData" / "screen.csv")
    col = "f_screen:phone_screen_rapids_sumdurationunlock:allday"
    exp = raw.set_index(["pid", "date"])[col]
    exp.index = pd.MultiIndex.from_arrays([exp.index.get_level_values(0),
                                           pd.to_datetime(exp.index.get_level_values(1))])
    got = t.daily["screen_unlock_duration"]
    pd.testing.assert_series_equal(got.sort_index(), exp.sort_index(), check_names=False)


def test_labels_each_type_and_folder_of_cohorts(globem_dir):
    cohorts = _cohorts(globem_dir)
    by_label = {}
    for c in cohorts:
        t = load_globem(c, label="auto")
        ss = build_samples(t)
        assert len(ss) > 0 and ss.dropped["missing_label"] >= 0
        assert all(t.target.scale_min <= s.label <= t.target.scale_max for s in ss)
        by_label[t.target.scale_max] = len(ss)
    assert set(by_label) == {3, 6}  # feel_anxious (0-3) and phq4_anxiety_EMA (0-6) both produce samples
    both = load_globem(globem_dir)
    assert both.profiles["cohort"].nunique() == len(cohorts)
    assert not both.profiles.index.duplicated().any()
    assert both.target.scale_max == 3 and both.dropped.get("cohort_without_feel_anxious", 0) >= 1
    ema = load_globem(globem_dir, label="phq4_anxiety_EMA")
    assert ema.target.scale_max == 6 and len(build_samples(ema)) > 0


def test_subday_segments_and_more_channels(globem_dir):
    c = _cohorts(globem_dir)[0]
    t = load_globem(c, channels=["phone_screen_rapids_countepisodeunlock"])
    assert "screen_rapids_countepisodeunlock" in t.daily.columns
    assert list(t.subday.sort_values("slot_index")["slot"].unique()) == ["morning", "afternoon", "evening", "night"]
    full = load_globem(c, channels=["all"])
    n_raw_allday = ((full.catalogue.variant == "raw") & (full.catalogue.segment == "allday")).sum()
    assert full.daily.shape[1] == n_raw_allday
    with pytest.raises(Exception, match="not in the catalogue"):
        load_globem(c, channels=["no_such_feature"])
    assert len(DEFAULT_CHANNELS) == 8
