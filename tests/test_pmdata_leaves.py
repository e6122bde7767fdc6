"""RAPTOR's PMData leaves from every sub-day series the release has: minute heart_rate.json and calories.json (in the
release's format) become half-hour leaves beside steps.json's and the sleep stages; a copy without a file says so."""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import datetime

import numpy as np
import pandas as pd
import pytest

from balms.data.pmdata import MINUTE_FILES, load_pmdata, subday_leaf_table
from balms.data.schema import DataError
from balms.data.synthetic_pmdata import START, write_pmdata


@pytest.fixture()
def release(tmp_path):
    """A small synthetic release (our generator, the release's layout), p01 given minute heart rate and calories
    written as the release writes them."""
    write_pmdata(tmp_path, np.random.default_rng(0), n_users=2, n_days=40)
    assert START.isoformat() < "2019-11-02"  # the minute samples below fall inside the release's days
    users = sorted(p.name for p in tmp_path.iterdir() if p.is_dir())
    fit = tmp_path / users[0] / "fitbit"
    hr = [{"dateTime": "2019-11-02 08:00:07", "value": {"bpm": 60, "confidence": 1}},
          {"dateTime": "2019-11-02 08:10:12", "value": {"bpm": 70, "confidence": 2}},
          {"dateTime": "2019-11-02 08:10:12", "value": {"bpm": 70, "confidence": 2}},  # repeated as in the release
          {"dateTime": "2019-11-02 08:31:00", "value": {"bpm": 90, "confidence": 3}}]
    cal = [{"dateTime": "2019-11-02 08:00:00", "value": "1.5"}, {"dateTime": "2019-11-02 08:01:00", "value": "2.25"},
           {"dateTime": "2019-11-02 09:00:00", "value": "1"}]
    (fit / "heart_rate.json").write_text(json.dumps(hr))
    (fit / "calories.json").write_text(json.dumps(cal))
    return tmp_path, users


def test_minute_heart_rate_and_calories_become_half_hour_leaves(release):
    root, users = release
    t = load_pmdata(root)
    assert {"heart_rate", "calories_slot"} <= {c.name for c in t.subday_channels}
    sd = t.subday[(t.subday["user"] == users[0]) & (t.subday["date"] == pd.Timestamp("2019-11-02"))].set_index("slot")
    assert sd.loc["08:00", "heart_rate"] == pytest.approx(65) and sd.loc["08:30", "heart_rate"] == 90
    assert sd.loc["08:00", "calories_slot"] == pytest.approx(3.75) and sd.loc["09:00", "calories_slot"] == 1
    leaves = subday_leaf_table(t).set_index("user")
    assert leaves.loc[users[0], "heart_rate"] == 2 and leaves.loc[users[0], "calories_slot"] == 2
    assert leaves.loc[users[1], "heart_rate"] == 0
    assert "heart_rate.json" in leaves.loc[users[1], "minute files absent"]
    assert any(n.startswith(f"{users[1]}: heart_rate.json absent") for n in t.notes)
    assert t.dropped.get("repeated_heart_rate.json") == 1  # the repeated sample, counted


def test_a_malformed_heart_rate_file_names_the_row(release):
    root, users = release
    (root / users[0] / "fitbit" / "heart_rate.json").write_text(json.dumps([{"dateTime": "2019-11-02 08:00:07",
                                                                             "value": 61}]))
    with pytest.raises(DataError, match="bpm"):
        load_pmdata(root)


def test_a_copy_without_minute_files_keeps_its_leaves(pmdata_tables):
    """The data copy here lacks heart_rate.json and calories.json for everyone: no such channel, nothing changed."""
    names = [c.name for c in pmdata_tables.subday_channels]
    assert "heart_rate" not in names and "calories_slot" not in names
    leaves = subday_leaf_table(pmdata_tables)
    assert (leaves["minute files absent"].str.contains("heart_rate.json")).all()


def test_real_steps_json_leaves_are_its_half_hours(pmdata_tables, pmdata_dir):
    """The users whose folders hold steps.json (the copy keeps it for five) get one steps leaf per half hour their
    minute file covers, counted here straight from the raw JSON."""
    leaves = subday_leaf_table(pmdata_tables).set_index("user")
    have = sorted(p.parent.parent.name for p in pmdata_dir.glob("p*/fitbit/steps.json"))
    assert have and sorted(leaves.index[leaves["steps"] > 0]) == have
    for u in have:
        slots = defaultdict(float)
        for r in json.loads((pmdata_dir / u / "fitbit" / "steps.json").read_text()):
            t = datetime.strptime(r["dateTime"], "%Y-%m-%d %H:%M:%S")
            slots[t.replace(minute=t.minute // 30 * 30, second=0)] += 0  # presence of a slot
        assert leaves.loc[u, "steps"] == len(slots), u
    assert set(MINUTE_FILES) == {"steps.json", "heart_rate.json", "calories.json"}


def test_leaf_units_are_the_papers(pmdata_tables):
    """Section 2.3.3 / Appendix A: "half-hour slots on PMData and four time-of-day segments on GLOBEM"."""
    from balms.fidelity import paper_passage

    text = paper_passage("raptor")
    assert "half-hour slots on PMData" in text and "four time-of-day segments on GLOBEM" in text
    assert pmdata_tables.subday_unit == "half-hour slot"
    assert set(pmdata_tables.subday["slot_index"]) <= set(range(48))
