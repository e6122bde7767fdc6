"""Baselines: MAEs recomputed by hand, features equal to the windows agents see."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from balms.data.baselines import baseline_predictions, run_baselines, summary_features
from balms.data.pmdata import load_pmdata
from balms.data.samples import build_samples, split_target_days, window_of
from balms.data.schema import Sample


def _s(user: str, day: int, label: int) -> Sample:
    d = dt.date(2020, 1, day)
    return Sample("toy", user, d, label, 1, d - dt.timedelta(days=1), d - dt.timedelta(days=1))


def test_median_and_mode_baselines_by_hand():
    """Training: user a 1, 1, 4; user b 5 (global 1, 1, 4, 5: mean 2.75, median 2.5, mode 1). Held out: a 2, b 4,
    c 3 (c unseen: the global statistic). Every MAE below is worked out by hand."""
    tr = [_s("a", 1, 1), _s("a", 2, 1), _s("a", 3, 4), _s("b", 1, 5)]
    te = [_s("a", 10, 2), _s("b", 10, 4), _s("c", 10, 3)]
    toy = SimpleNamespace(target=SimpleNamespace(scale_min=1, scale_max=5),
                          labels=pd.DataFrame({"user": [], "date": pd.to_datetime([]), "label": []}))
    pred = {k: list(v) for k, (v, _) in baseline_predictions(tr, te, toy).items()}
    assert pred["global_median"] == [2.5, 2.5, 2.5] and pred["global_mode"] == [1, 1, 1]
    assert pred["per_user_median"] == [1, 5, 2.5] and pred["per_user_mode"] == [1, 5, 1]
    assert pred["per_user_mean"] == [2, 5, 2.75]
    res = run_baselines(tr, te, toy).set_index("baseline")
    assert res.loc["global_median", "mae"] == pytest.approx((0.5 + 1.5 + 0.5) / 3)
    assert res.loc["global_median", "mae_rounded"] == pytest.approx((0 + 2 + 1) / 3)  # 2.5 rounds to 2 (half to even)
    assert res.loc["global_mode", "mae"] == pytest.approx((1 + 3 + 2) / 3)
    assert res.loc["per_user_median", "mae"] == pytest.approx((1 + 1 + 0.5) / 3)
    assert res.loc["per_user_mode", "mae"] == pytest.approx((1 + 1 + 2) / 3)
    assert res.loc["global_median", "prediction"] == 2.5 and res.loc["global_mode", "prediction"] == 1
    assert np.isnan(res.loc["per_user_median", "prediction"])  # not a constant
    # a tied mode goes to the smallest label
    tied = baseline_predictions([_s("a", 1, 4), _s("a", 2, 2), _s("a", 3, 4), _s("a", 4, 2)], te[:1], toy)
    assert tied["global_mode"][0][0] == 2 and tied["per_user_mode"][0][0] == 2


@pytest.fixture(scope="module")
def setup(pmdata_dir):
    t = load_pmdata(pmdata_dir)
    ss = build_samples(t)
    return t, ss, split_target_days(ss, seed=0)


def test_mean_predictor_and_rows(setup):
    t, ss, (tr, te) = setup
    res = run_baselines(tr, te, t).set_index("baseline")
    assert list(res.index) == ["mean_predictor", "global_median", "global_mode", "per_user_mean", "per_user_median",
                               "per_user_mode", "last_observed_label", "ridge", "gradient_boosting"]
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
