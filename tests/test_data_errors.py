"""Malformed raw input -> DataError naming the file and the field. Broken copies live in tmp_path."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from balms.data.globem import load_globem
from balms.data.pmdata import load_pmdata
from balms.data.schema import DataError


@pytest.fixture()
def pm_copy(pmdata_dir, tmp_path):
    """PMData with two participants, copied so it can be broken."""
    root = tmp_path / "pmdata"
    root.mkdir()
    shutil.copy(pmdata_dir / "participant-overview.xlsx", root)
    for u in ("p01", "p02"):
        shutil.copytree(pmdata_dir / u, root / u)
    assert len(load_pmdata(root).users) == 2  # the unbroken copy loads
    return root


@pytest.fixture()
def gl_copy(globem_dir, tmp_path):
    """One GLOBEM cohort with two feature files, copied so it can be broken."""
    src = sorted(p for p in globem_dir.iterdir() if (p / "FeatureData").is_dir())[0]
    dst = tmp_path / src.name
    (dst / "FeatureData").mkdir(parents=True)
    for f in ("steps.csv", "call.csv"):
        shutil.copy(src / "FeatureData" / f, dst / "FeatureData" / f)
    shutil.copytree(src / "SurveyData", dst / "SurveyData")
    assert len(load_globem(dst).labels) > 0
    return dst


def _raises(fn, *must_contain):
    with pytest.raises(DataError) as ei:
        fn()
    msg = str(ei.value)
    for s in must_contain:
        assert s in msg, msg
    return ei.value


def test_missing_file(pm_copy):
    (pm_copy / "p02" / "pmsys" / "wellness.csv").unlink()
    _raises(lambda: load_pmdata(pm_copy), "p02", "wellness.csv", "missing")


def test_truncated_json(pm_copy):
    p = pm_copy / "p01" / "fitbit" / "exercise.json"
    p.write_text(p.read_text()[:5000])
    _raises(lambda: load_pmdata(pm_copy), "p01", "exercise.json", "JSON")


def test_missing_column(pm_copy):
    p = pm_copy / "p01" / "pmsys" / "wellness.csv"
    pd.read_csv(p).drop(columns=["stress"]).to_csv(p, index=False)
    e = _raises(lambda: load_pmdata(pm_copy), "wellness.csv", "'stress'")
    assert e.field == "stress"


def test_unexpected_column(pm_copy, gl_copy):
    p = pm_copy / "p01" / "pmsys" / "wellness.csv"
    pd.read_csv(p).assign(anxiety=1).to_csv(p, index=False)
    _raises(lambda: load_pmdata(pm_copy), "wellness.csv", "'anxiety'", "unexpected")
    g = gl_copy / "FeatureData" / "call.csv"
    df = pd.read_csv(g)
    pd.concat([df, pd.DataFrame({"calls_total": 1}, index=df.index)], axis=1).to_csv(g, index=False)
    _raises(lambda: load_globem(gl_copy), "call.csv", "'calls_total'", "unexpected")


def test_non_numeric_value(pm_copy, gl_copy):
    p = pm_copy / "p02" / "pmsys" / "wellness.csv"
    w = pd.read_csv(p, dtype=str)
    w.loc[4, "stress"] = "high"
    w.to_csv(p, index=False)
    e = _raises(lambda: load_pmdata(pm_copy), "p02", "wellness.csv", "'stress'", "row 6", "'high'")
    assert e.row == 6
    j = pm_copy / "p01" / "fitbit" / "very_active_minutes.json"
    rec = json.loads(j.read_text())
    rec[3]["value"] = "lots"
    j.write_text(json.dumps(rec))
    _raises(lambda: load_pmdata(pm_copy), "very_active_minutes.json", "'value'", "'lots'")
    g = gl_copy / "FeatureData" / "steps.csv"
    df = pd.read_csv(g, dtype=str)
    col = "f_steps:fitbit_steps_intraday_rapids_sumsteps:allday"
    df.loc[2, col] = "many"
    df.to_csv(g, index=False)
    _raises(lambda: load_globem(gl_copy), "steps.csv", col, "'many'")


def test_duplicate_dates(pm_copy, gl_copy):
    j = pm_copy / "p01" / "fitbit" / "resting_heart_rate.json"
    rec = json.loads(j.read_text())
    rec.append(dict(rec[5]))
    j.write_text(json.dumps(rec))
    _raises(lambda: load_pmdata(pm_copy), "resting_heart_rate.json", "duplicate date", "'dateTime'")
    g = gl_copy / "FeatureData" / "call.csv"
    df = pd.read_csv(g)
    pd.concat([df, df.iloc[[7]]]).to_csv(g, index=False)
    _raises(lambda: load_globem(gl_copy), "call.csv", "duplicate (pid, date)", "'date'")


def test_unreadable_xlsx(pm_copy):
    (pm_copy / "participant-overview.xlsx").write_bytes(b"PK\x03\x04 this is not a workbook")
    _raises(lambda: load_pmdata(pm_copy), "participant-overview.xlsx", "unreadable xlsx")


def test_missing_label_file_globem(gl_copy):
    (gl_copy / "SurveyData" / "dep_weekly.csv").unlink()
    (gl_copy / "SurveyData" / "ema.csv").unlink()
    _raises(lambda: load_globem(gl_copy), "SurveyData", "no label found")
    _raises(lambda: load_globem(gl_copy, label="feel_anxious"), "dep_weekly.csv", "missing")
