"""Content fingerprints of DatasetTables: stable across loads, blind to row/column order and location,
changed by any value, label or rendering catalogue change; cached and cheap."""

from __future__ import annotations

import dataclasses
import shutil
import time

import numpy as np
import pytest

from balms.data import fingerprint as fpmod
from balms.data.fingerprint import frame_digest, tables_fingerprint
from balms.data.loading import load_from_dir
from balms.data.synthetic import write_synthetic


@pytest.fixture(scope="module")
def synth_dir(tmp_path_factory):
    return write_synthetic("pmdata", tmp_path_factory.mktemp("fp") / "pmdata", seed=0, n_users=3, n_days=40)


@pytest.fixture(scope="module")
def tables(synth_dir):
    return load_from_dir("pmdata", synth_dir, source="synthetic")


def test_stable_across_loads_and_locations(tables, synth_dir, tmp_path):
    fp = tables.fingerprint()
    assert len(fp) == 16 and int(fp, 16) >= 0
    assert load_from_dir("pmdata", synth_dir, source="synthetic").fingerprint() == fp
    moved = shutil.copytree(synth_dir, tmp_path / "elsewhere")
    again = load_from_dir("pmdata", moved, source="synthetic")
    assert again.raw_dir != tables.raw_dir and again.fingerprint() == fp


def test_row_and_column_order_do_not_count(tables):
    rng = np.random.default_rng(0)
    daily = tables.daily.iloc[rng.permutation(len(tables.daily))]
    daily = daily[list(reversed(daily.columns))]
    labels = tables.labels.iloc[rng.permutation(len(tables.labels))]  # unnamed index: row numbers ignored
    assert tables_fingerprint(dataclasses.replace(tables, daily=daily, labels=labels)) == tables.fingerprint()


def _one_value_changed(df, col):
    out = df.copy()
    pos = int(np.flatnonzero(out[col].notna().to_numpy())[0])
    out.iloc[pos, out.columns.get_loc(col)] = out[col].iloc[pos] + 1
    return out


def test_changes_with_one_value_one_label_or_the_catalogue(tables):
    fp = tables.fingerprint()
    variants = {
        "daily value": dataclasses.replace(tables, daily=_one_value_changed(tables.daily, "steps")),
        "label": dataclasses.replace(tables, labels=_one_value_changed(tables.labels, "label")),
        "missing value": dataclasses.replace(tables, daily=tables.daily.assign(  # a present value made NaN
            steps=tables.daily["steps"].where(
                np.arange(len(tables.daily)) != int(np.flatnonzero(tables.daily["steps"].notna().to_numpy())[5])))),
        "channel unit": dataclasses.replace(tables, channels=[
            dataclasses.replace(c, unit="km") if c.name == "steps" else c for c in tables.channels]),
        "target scale": dataclasses.replace(tables, target=dataclasses.replace(tables.target, scale_max=9)),
    }
    if tables.subday is not None:
        col = next(c.name for c in tables.subday_channels if c.name in tables.subday.columns)
        variants["subday value"] = dataclasses.replace(tables, subday=_one_value_changed(tables.subday, col))
    fps = {k: v.fingerprint() for k, v in variants.items()}
    assert fp not in fps.values(), fps
    assert len(set(fps.values())) == len(fps), fps


def test_cached_on_the_object(tables, monkeypatch):
    t = dataclasses.replace(tables)  # fresh cache
    fp = t.fingerprint()

    def boom(df):
        raise AssertionError("recomputed")

    monkeypatch.setattr(fpmod, "frame_digest", boom)
    assert t.fingerprint() == fp and tables_fingerprint(t) == fp
    with pytest.raises(AssertionError, match="recomputed"):
        dataclasses.replace(t).fingerprint()


def test_frame_digest_edge_cases(tables):
    empty = tables.daily.iloc[:0]
    assert frame_digest(empty) != frame_digest(empty[["steps"]])  # columns count even without rows
    assert frame_digest(None) == "none"
    with pytest.raises(TypeError, match="pandas DataFrame"):
        frame_digest([1, 2])
    odd = tables.profiles.assign(tags=[["a"]] * len(tables.profiles))  # unhashable cells still hash
    assert frame_digest(odd) != frame_digest(tables.profiles)


@pytest.mark.realdata
def test_real_pmdata_stable_and_cheap(pmdata_dir):
    a = load_from_dir("pmdata", pmdata_dir)
    t0 = time.perf_counter()
    fp = a.fingerprint()
    assert time.perf_counter() - t0 < 1.0
    assert load_from_dir("pmdata", pmdata_dir).fingerprint() == fp
