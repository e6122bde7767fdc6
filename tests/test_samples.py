"""Samples, windows and splits on real PMData/GLOBEM: paper counts, no leakage, determinism."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from balms.data.pmdata import load_pmdata
from balms.data.samples import build_samples, split_participants, split_target_days, window_arrays, window_of

PAPER_N, PAPER_MAE = 1448, 0.48


@pytest.fixture(scope="module")
def pm(pmdata_dir):
    return load_pmdata(pmdata_dir)


@pytest.fixture(scope="module")
def pm_samples(pm):
    return build_samples(pm)


def test_pmdata_count_and_mean_predictor_beside_paper(pm, pm_samples):
    ss = pm_samples
    assert ss.params["rule"] == "balms"
    # accounting: every label row is either a sample or counted under exactly one rule
    builder_drops = sum(v for k, v in ss.dropped.items() if k != "duplicate_report")
    assert len(ss) + builder_drops == ss.n_label_rows == len(pm.labels)
    y = np.array([s.label for s in ss], float)
    tr, te = split_target_days(ss, seed=0)
    ytr, yte = np.array([s.label for s in tr], float), np.array([s.label for s in te], float)
    mae_split = np.abs(yte - ytr.mean()).mean()
    print(f"\nPMData samples {len(ss)} (paper {PAPER_N}); dropped by rule {ss.dropped}")
    print(f"mean-predictor MAE: held-out days {mae_split:.3f}, all samples {np.abs(y - y.mean()).mean():.3f} "
          f"(paper {PAPER_MAE})")
    assert ss.dropped["out_of_range_label"] >= 1  # stress 0 in the release
    assert ss.dropped["too_few_observed_days"] == 0  # min 1 observed day: only empty windows go
    assert abs(mae_split - PAPER_MAE) < 0.06


def test_named_rules_nest_and_are_counted(pm, pm_samples):
    rules = {r: build_samples(pm, rule=r) for r in ("paper_stated", "healthllm_same_day", "count_matched")}
    stated, same_day, tuned = rules["paper_stated"], rules["healthllm_same_day"], rules["count_matched"]
    for ss in (*rules.values(), pm_samples):
        assert len(ss) + sum(v for k, v in ss.dropped.items() if k != "duplicate_report") == len(pm.labels)
    # the stated filters only: no window rule drops anything
    assert not any(stated.dropped.get(k) for k in ("short_history", "no_sensing_in_window", "too_few_observed_days"))
    assert len(stated) > len(pm_samples) > len(tuned)
    # the earlier default is kept only to be shown: its threshold was chosen to land on 1,450 (paper 1,448)
    assert len(tuned) == 1450 and tuned.params["min_days_observed"] == 7
    assert all(s.window_end == s.target_date for s in same_day)
    assert all(s.window_end < s.target_date for s in pm_samples)
    # explicit options override the rule
    assert build_samples(pm, rule="paper_stated", min_days_observed=1).dropped["no_sensing_in_window"] > 0
    with pytest.raises(ValueError, match="unknown sample rule"):
        build_samples(pm, rule="tuned")


def test_window_has_no_label_no_future(pm, pm_samples):
    for s in pm_samples.samples[::97]:
        w = window_of(pm, s)
        assert w.daily.index.max() < pd.Timestamp(s.target_date)
        assert len(w.daily) == s.lookback and "label" not in w.daily.columns and "stress" not in w.daily.columns
        assert "stress" not in w.context and set(w.context) == {"mood", "fatigue", "readiness", "sleep_quality"}
        if w.subday is not None and len(w.subday):
            assert w.subday["date"].max() < pd.Timestamp(s.target_date)
        assert window_of(pm, s, context=False).context == {}
    s = build_samples(pm, include_target_day=True).samples[0]
    assert window_of(pm, s).daily.index.max() == pd.Timestamp(s.target_date)


def test_window_arrays_match_window_of(pm, pm_samples):
    sm = pm_samples.samples[::50]
    A = window_arrays(pm, sm)
    for i, s in enumerate(sm):
        np.testing.assert_array_equal(window_of(pm, s).daily.to_numpy(), A[i])


def test_lookback_parameter(pm):
    for L in (7, 28):
        ss = build_samples(pm, lookback=L)
        assert all(s.lookback == L and len(s.window_dates) == L for s in ss)


def test_splits_deterministic_and_disjoint(pm_samples):
    a = split_target_days(pm_samples, seed=0)
    b = split_target_days(pm_samples, seed=0)
    c = split_target_days(pm_samples, seed=1)
    ids = lambda xs: [s.sample_id for s in xs]  # noqa: E731
    assert ids(a[0]) == ids(b[0]) and ids(a[1]) != ids(c[1])
    assert not set(ids(a[0])) & set(ids(a[1])) and len(a[0]) + len(a[1]) == len(pm_samples)
    assert abs(len(a[1]) / len(pm_samples) - 0.3) < 0.02
    assert {s.user for s in a[1]} <= {s.user for s in a[0]}
    tr, te = split_participants(pm_samples, seed=0)
    assert not {s.user for s in tr} & {s.user for s in te} and len(tr) + len(te) == len(pm_samples)
    assert [s.sample_id for s in split_participants(pm_samples, seed=0)[1]] == ids(te)


def test_globem_samples(globem_dir):
    from balms.data.globem import load_globem

    t = load_globem(globem_dir)
    ss = build_samples(t)
    assert len(ss) > 0 and ss.dropped["missing_label"] > 0  # BDI2-only rows in dep_weekly are counted
    w = window_of(t, ss.samples[0])
    assert len(w.daily) == 14 and w.daily.index.max() < pd.Timestamp(ss.samples[0].target_date)
    assert set(w.subday["slot"]) <= {"morning", "afternoon", "evening", "night"}
