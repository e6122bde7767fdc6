"""Synthetic cohorts: deterministic, read by the REAL loaders, same layout as the real files, planted
relation detectable by a simple model."""

from __future__ import annotations

import hashlib
import json
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import Ridge
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from balms.data import synthetic
from balms.data.diversityone import load_diversityone
from balms.data.globem import load_globem
from balms.data.pmdata import load_pmdata
from balms.data.samples import build_samples, split_participants, window_arrays
from balms.data.synthetic import ensure_synthetic, planted_relation, write_synthetic

LOADERS = {"pmdata": load_pmdata, "globem": load_globem, "diversityone": load_diversityone}
FITBIT_JSON = ["exercise", "resting_heart_rate", "sleep", "very_active_minutes", "moderately_active_minutes",
               "lightly_active_minutes", "sedentary_minutes", "steps"]


def _digest(root) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def cohorts(tmp_path_factory):
    """Default-size cohorts, seed 0, written once for the module."""
    root = tmp_path_factory.mktemp("synth")
    return {ds: write_synthetic(ds, root / ds, seed=0) for ds in LOADERS}


@pytest.mark.parametrize("dataset", list(LOADERS))
def test_deterministic_by_seed(dataset, tmp_path):
    small = dict(n_users=3, n_days=30)
    a = _digest(write_synthetic(dataset, tmp_path / "a", seed=7, **small))
    assert synthetic.is_synthetic(tmp_path / "a") and not synthetic.is_synthetic(tmp_path)
    b = _digest(write_synthetic(dataset, tmp_path / "b", seed=7, **small))
    c = _digest(write_synthetic(dataset, tmp_path / "c", seed=8, **small))
    assert a == b  # byte-identical, the xlsx included
    assert a.keys() == c.keys() and a != c


@pytest.mark.parametrize("dataset", list(LOADERS))
def test_read_by_the_real_loader_and_sampled(dataset, cohorts):
    tables = LOADERS[dataset](cohorts[dataset], source="synthetic")
    assert tables.source == "synthetic"
    n_users = synthetic.DEFAULT_SIZES[dataset][0]
    assert len(tables.users) == n_users
    ss = build_samples(tables)
    assert len(ss) > 10 * n_users if dataset != "globem" else len(ss) > 5 * n_users
    assert all(s.source == "synthetic" for s in ss)
    labels = {s.label for s in ss}
    assert labels <= set(range(tables.target.scale_min, tables.target.scale_max + 1)) and len(labels) >= 3
    # Realistic missingness: some channel values are missing, most are present.
    frac_missing = tables.daily[[c.name for c in tables.channels]].isna().to_numpy().mean()
    assert 0.02 < frac_missing < 0.6


def test_pmdata_planted_extras_reach_the_counted_filters(cohorts):
    """The synthetic PMData carries the real release's oddities, and the loader counts them."""
    tables = load_pmdata(cohorts["pmdata"], source="synthetic")
    ss = build_samples(tables)
    assert ss.dropped.get("out_of_range_label", 0) > 0  # stress 0
    assert tables.dropped.get("duplicate_report", 0) > 0  # two reports on a day
    missing_rhr = [u for u in tables.users if tables.daily.xs(u, level=0)["resting_hr"].isna().all()]
    assert len(missing_rhr) == 1  # one participant without resting_heart_rate.json, like p12/p13


@pytest.mark.parametrize("dataset,n_users,last_k", [("pmdata", None, 3), ("globem", 40, 7), ("diversityone", None, 3)])
def test_planted_relation_is_detectable(dataset, n_users, last_k, cohorts, tmp_path):
    """Ridge on 'last-k-days mean minus the rest of the window' per channel beats the train-mean MAE
    on held-out participants."""
    raw = cohorts[dataset] if n_users is None else write_synthetic(dataset, tmp_path / dataset, seed=0,
                                                                   n_users=n_users)
    tables = LOADERS[dataset](raw, source="synthetic")
    train, test = split_participants(build_samples(tables), test_frac=0.3, seed=0)

    def features(samples):
        X = window_arrays(tables, samples)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices -> NaN, imputed below
            return np.nanmean(X[:, -last_k:], 1) - np.nanmean(X[:, :-last_k], 1)

    f_tr, f_te = features(train), features(test)
    fill = np.nan_to_num(np.nanmean(f_tr, 0))
    f_tr, f_te = np.where(np.isnan(f_tr), fill, f_tr), np.where(np.isnan(f_te), fill, f_te)
    y_tr = np.array([s.label for s in train], float)
    y_te = np.array([s.label for s in test], float)
    model = make_pipeline(StandardScaler(), Ridge(alpha=10.0)).fit(f_tr, y_tr)
    mae_ridge = np.abs(model.predict(f_te) - y_te).mean()
    mae_mean = np.abs(y_tr.mean() - y_te).mean()
    assert mae_ridge < 0.95 * mae_mean, (mae_ridge, mae_mean)


def test_planted_relation_text():
    assert "sleep" in planted_relation("pmdata") and "resting" in planted_relation("pmdata")
    assert "screen" in planted_relation("globem") and "entropy" in planted_relation("globem")
    assert "poor night" in planted_relation("diversityone")
    with pytest.raises(ValueError, match="unknown dataset"):
        planted_relation("mimic")


# ----------------------------------------------------------------- same layout as the real data
def _key_shapes(path) -> set[tuple]:
    return {tuple(r.keys()) for r in json.loads(path.read_text())}


def test_pmdata_layout_matches_real(cohorts, pmdata_dir):
    syn = cohorts["pmdata"]
    assert not synthetic.is_synthetic(pmdata_dir)
    real_users = sorted(p for p in pmdata_dir.glob("p[0-9][0-9]") if p.is_dir())
    pd.testing.assert_index_equal(pd.read_csv(syn / "p01/pmsys/wellness.csv").columns,
                                  pd.read_csv(real_users[0] / "pmsys/wellness.csv").columns)
    pd.testing.assert_index_equal(pd.read_csv(syn / "p01/fitbit/sleep_score.csv").columns,
                                  pd.read_csv(real_users[0] / "fitbit/sleep_score.csv").columns)
    for name in FITBIT_JSON:
        real_shapes = set().union(*(_key_shapes(f) for f in sorted(pmdata_dir.glob(f"p*/fitbit/{name}.json"))[:3]))
        syn_files = sorted(syn.glob(f"p*/fitbit/{name}.json"))
        assert syn_files, name
        syn_shapes = set().union(*(_key_shapes(f) for f in syn_files))
        assert syn_shapes <= real_shapes, (name, syn_shapes - real_shapes)
    # Nested structures of sleep.json and the value record of resting_heart_rate.json.
    real_sleep = json.loads((real_users[0] / "fitbit/sleep.json").read_text())
    syn_sleep = json.loads((syn / "p01/fitbit/sleep.json").read_text())

    def level_shapes(files):
        return {(r["type"], tuple(r["levels"]), tuple(r["levels"]["summary"]))
                for f in files for r in json.loads(f.read_text())}
    real_levels = level_shapes(sorted(pmdata_dir.glob("p*/fitbit/sleep.json")))
    assert level_shapes(sorted(syn.glob("p*/fitbit/sleep.json"))) <= real_levels
    assert set(syn_sleep[0]["levels"]["data"][0]) == set(real_sleep[0]["levels"]["data"][0])
    rhr = json.loads((real_users[0] / "fitbit/resting_heart_rate.json").read_text())[0]
    assert set(json.loads((syn / "p01/fitbit/resting_heart_rate.json").read_text())[0]["value"]) == set(rhr["value"])
    # Date formats, compared as digit patterns ("2019-11-01 14:56:32" -> "9999-99-99 99:99:99").
    def shape(s):
        return "".join("9" if ch.isdigit() else ch for ch in s)
    real_ex = json.loads((real_users[0] / "fitbit/exercise.json").read_text())[0]
    syn_ex = json.loads((syn / "p01/fitbit/exercise.json").read_text())[0]
    for k in ("startTime", "lastModified", "originalStartTime"):
        assert shape(syn_ex[k]) == shape(real_ex[k]), k
    for k in ("startTime", "endTime", "dateOfSleep"):
        assert shape(syn_sleep[0][k]) == shape(real_sleep[0][k]), k
    assert shape(pd.read_csv(syn / "p01/pmsys/wellness.csv")["effective_time_frame"][0]) == shape(
        pd.read_csv(real_users[0] / "pmsys/wellness.csv")["effective_time_frame"][0])
    # participant-overview.xlsx: same two header rows.
    from openpyxl import load_workbook

    def header(path):
        rows = list(load_workbook(path, read_only=True).active.iter_rows(min_row=1, max_row=2, values_only=True))
        return [[v for v in r if v is not None] for r in rows]
    assert header(syn / "participant-overview.xlsx") == header(pmdata_dir / "participant-overview.xlsx")


def test_globem_layout_matches_real(cohorts, globem_dir):
    syn = cohorts["globem"] / "INS-W-synth_1"
    real = globem_dir / "INS-W-sample_1"
    for f in sorted((real / "FeatureData").glob("*.csv")):
        real_cols = list(pd.read_csv(f, nrows=0).columns)
        syn_cols = list(pd.read_csv(syn / "FeatureData" / f.name, nrows=0).columns)
        assert syn_cols[:2] == ["pid", "date"]
        assert set(syn_cols) <= set(real_cols), (f.name, set(syn_cols) - set(real_cols))
        pos = [real_cols.index(c) for c in syn_cols]
        assert pos == sorted(pos), f"{f.name}: columns not in the real order"
        segs = Counter(c.rsplit(":", 1)[1] for c in syn_cols[2:])
        assert {"allday", "morning", "afternoon", "evening", "night"} <= set(segs)
    for rel in ("SurveyData/dep_weekly.csv", "SurveyData/dep_endterm.csv", "SurveyData/ema.csv",
                "ParticipantsInfoData/platform.csv"):
        assert list(pd.read_csv(syn / rel, nrows=0).columns) == list(pd.read_csv(real / rel, nrows=0).columns), rel


# ----------------------------------------------------------------- ensure_synthetic
def test_ensure_synthetic_generates_once_and_regenerates_on_seed_change(tmp_path, monkeypatch):
    monkeypatch.setattr(synthetic, "synthetic_dir", lambda: tmp_path)
    p = ensure_synthetic("diversityone", seed=0)
    assert p == tmp_path / "diversityone"
    marker = json.loads((p / synthetic.MARKER).read_text())
    assert marker["seed"] == 0 and marker["fingerprint"] == synthetic.generator_fingerprint("diversityone", seed=0)
    first = _digest(p)
    stamp = (p / synthetic.MARKER).stat().st_mtime_ns
    assert ensure_synthetic("diversityone", seed=0) == p
    assert (p / synthetic.MARKER).stat().st_mtime_ns == stamp  # reused, not rewritten
    ensure_synthetic("diversityone", seed=1)
    assert json.loads((p / synthetic.MARKER).read_text())["seed"] == 1 and _digest(p) != first
    assert not [q for q in tmp_path.iterdir() if q.name.startswith(".")]  # no temp folders left behind


def _plant_sentinel(p):
    """A file the generator never writes: it survives a reuse and disappears when the folder is replaced."""
    (p / "sentinel.txt").write_text("reused")
    return p / "sentinel.txt"


def test_fingerprint_covers_writer_and_the_reader_constants_it_uses():
    assert list(synthetic.generator_sources("pmdata")) == ["balms.data.synthetic", "balms.data.synthetic_pmdata"]
    # the DiversityOne writer takes its file and column names from the reader module
    assert {"balms.data.synthetic_diversityone", "balms.data.diversityone"} <= set(
        synthetic.generator_sources("diversityone"))
    fps = {synthetic.generator_fingerprint(ds) for ds in LOADERS}
    assert len(fps) == 3 and synthetic.generator_fingerprint("pmdata", seed=1) not in fps
    assert synthetic.generator_fingerprint("pmdata", n_users=3) != synthetic.generator_fingerprint("pmdata")
    assert synthetic.generator_fingerprint("pmdata", n_users=synthetic.DEFAULT_SIZES["pmdata"][0]) == \
        synthetic.generator_fingerprint("pmdata")


def test_ensure_synthetic_regenerates_when_the_generator_source_changes(tmp_path, monkeypatch):
    monkeypatch.setattr(synthetic, "synthetic_dir", lambda: tmp_path)
    p = ensure_synthetic("diversityone")
    sentinel = _plant_sentinel(p)
    before = json.loads((p / synthetic.MARKER).read_text())["fingerprint"]
    ensure_synthetic("diversityone")
    assert sentinel.exists()  # unchanged generator: reused
    # an edited writer (here: a copy with one more line) is a different generator
    from balms.data import synthetic_diversityone

    edited = tmp_path / "edited_writer.py"
    edited.write_text(Path(synthetic_diversityone.__file__).read_text() + "\n# tweak\n")
    monkeypatch.setattr(synthetic_diversityone, "__file__", str(edited))
    ensure_synthetic("diversityone")
    assert not sentinel.exists()
    after = json.loads((p / synthetic.MARKER).read_text())["fingerprint"]
    assert after != before and after == synthetic.generator_fingerprint("diversityone")
    assert sorted(q.name for q in tmp_path.iterdir()) == ["diversityone", "edited_writer.py"]  # no temp folders


def test_ensure_synthetic_regenerates_when_a_parameter_changes(tmp_path, monkeypatch):
    monkeypatch.setattr(synthetic, "synthetic_dir", lambda: tmp_path)
    p = ensure_synthetic("diversityone")
    sentinel = _plant_sentinel(p)
    monkeypatch.setitem(synthetic.DEFAULT_SIZES, "diversityone", (5, 28))
    ensure_synthetic("diversityone")
    assert not sentinel.exists()
    assert json.loads((p / synthetic.MARKER).read_text())["n_users"] == 5
    assert load_diversityone(p, source="synthetic").daily.index.get_level_values("user").nunique() == 5


def test_ensure_synthetic_regenerates_a_cohort_with_an_old_marker(tmp_path, monkeypatch):
    """Cohorts written before fingerprints carried `generator_version: "1"`; they must not be reused."""
    monkeypatch.setattr(synthetic, "synthetic_dir", lambda: tmp_path)
    p = tmp_path / "diversityone"
    p.mkdir()
    (p / synthetic.MARKER).write_text(json.dumps({"dataset": "diversityone", "seed": 0, "generator_version": "1",
                                                  "n_users": 12, "n_days": 28, "source": "synthetic"}))
    sentinel = _plant_sentinel(p)
    assert ensure_synthetic("diversityone") == p
    assert not sentinel.exists() and "fingerprint" in json.loads((p / synthetic.MARKER).read_text())


def test_load_dataset_falls_back_to_synthetic(tmp_path, monkeypatch):
    from balms.data.loading import load_dataset

    monkeypatch.setenv("BALMS_RAW_DIR", str(tmp_path / "no_raw_here"))
    monkeypatch.setattr(synthetic, "synthetic_dir", lambda: tmp_path / "synthetic")
    tables = load_dataset("diversityone")
    assert tables.source == "synthetic" and tables.raw_dir.startswith(str(tmp_path / "synthetic"))
