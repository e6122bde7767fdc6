"""Baselines: MAEs recomputed by hand, features equal to the windows agents see."""

from __future__ import annotations

import numpy as np
import pytest

from balms.data.baselines import run_baselines, summary_features
from balms.data.pmdata import load_pmdata
from balms.data.samples import build_samples, split_target_days, window_of


@pytest.fixture(scope="module")
def setup(pmdata_dir):
    t = load_pmdata(pmdata_dir)
    ss = build_samples(t)
    return t, ss, split_target_days(ss, seed=0)


def test_mean_predictor_and_rows(setup):
    t, ss, (tr, te) = setup
    res = run_baselines(tr, te, t).set_index("baseline")
    assert list(res.index) == ["mean_predictor", "per_user_mean", "last_observed_label", "ridge", "gradient_boosting"]
    ytr = np.array([s.label for s in tr], float)
    yte = np.array([s.label for s in te], float)
    assert res.loc["mean_predictor", "prediction"] == pytest.approx(ytr.mean())
    assert res.loc["mean_predictor", "mae"] == pytest.approx(np.abs(yte - ytr.mean()).mean())
    assert res.loc["mean_predictor", "mae_rounded"] == pytest.approx(np.abs(yte - round(ytr.mean())).mean())
    assert res["mae"].notna().all() and (res["mae"] < 1.5).all()
    print("\n" + res[["mae", "mae_rounded"]].round(3).to_string())


def test_last_observed_label_uses_only_the_past(setup):
    t, ss, (tr, te) = setup
    res = run_baselines(tr, te, t).set_index("baseline")
    lab = t.labels.dropna()
    lab = lab[lab.label.between(1, 5)]
    errs = []
    for s in te:
        prev = lab[(lab.user == s.user) & (lab.date < np.datetime64(s.target_date))]
        expected = prev.sort_values("date").label.iloc[-1] if len(prev) else np.mean([x.label for x in tr])
        errs.append(abs(s.label - expected))
    assert res.loc["last_observed_label", "mae"] == pytest.approx(np.mean(errs))


def test_summary_features_match_window(setup):
    t, ss, _ = setup
    s = ss.samples[123]
    f = summary_features(t, [s]).iloc[0]
    w = window_of(t, s).daily
    sl = w["sleep_minutes"]
    assert f["sleep_minutes__mean"] == pytest.approx(sl.mean())
    assert f["sleep_minutes__last"] == pytest.approx(sl.dropna().iloc[-1])
    assert f["sleep_minutes__missing"] == pytest.approx(sl.isna().mean())
    x = np.arange(len(sl))[sl.notna().to_numpy()]
    assert f["sleep_minutes__slope"] == pytest.approx(np.polyfit(x, sl.dropna().to_numpy(), 1)[0])
