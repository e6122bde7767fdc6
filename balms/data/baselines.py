"""Reference baselines with MAE: mean predictor (raw and rounded), global median and mode, per-user mean, median
and mode, last observed label, ridge and gradient boosting on window summary features (mean, last, slope, missing
fraction per channel). These are the bars an agent has to clear; they see exactly the windows agents see.

Why the median and the mode: for MAE the best constant is the median, not the mean, and on a label piled on one
value (PMData stress) the mode is close to it; a per-user median or mode (training days only) is stronger still
where users differ. Ties of the mode go to the smallest label (deterministic).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from balms.data.samples import window_arrays
from balms.data.schema import DatasetTables, Sample


def summary_features(tables: DatasetTables, samples: list[Sample], channels: list[str] | None = None) -> pd.DataFrame:
    """Per channel: window mean, last observed value, least-squares slope per day, missing fraction.
    Default channels: all but the paper-recipe duplicates (PMData sleep_minutes_paper), so adding that
    recipe did not change the baselines' features."""
    names = channels or [c.name for c in tables.channels if c.recipe != "paper"]
    A = window_arrays(tables, samples, names)  # (n, L, C)
    n, L, C = A.shape if A.size else (len(samples), samples[0].lookback if samples else 0, len(names))
    obs = ~np.isnan(A)
    cnt = obs.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(cnt > 0, np.nansum(A, axis=1) / np.maximum(cnt, 1), np.nan)
        # last observed: index of the last non-NaN day
        idx = np.where(obs, np.arange(L)[None, :, None], -1).max(axis=1)
        last = np.take_along_axis(A, np.maximum(idx, 0)[:, None, :], axis=1)[:, 0, :]
        last = np.where(idx >= 0, last, np.nan)
        t = np.arange(L, dtype=float)[None, :, None]
        tm = np.where(obs, t, np.nan)
        tbar = (np.where(obs, t, 0.0).sum(axis=1) / np.maximum(cnt, 1))[:, None, :]
        dt_ = np.where(obs, tm - tbar, 0.0)
        dy = np.where(obs, A - mean[:, None, :], 0.0)
        den = (dt_ ** 2).sum(axis=1)
        slope = np.where(den > 0, (dt_ * dy).sum(axis=1) / np.where(den > 0, den, 1), np.nan)
    miss = 1.0 - cnt / max(L, 1)
    cols = {}
    for j, c in enumerate(names):
        cols[f"{c}__mean"], cols[f"{c}__last"] = mean[:, j], last[:, j]
        cols[f"{c}__slope"], cols[f"{c}__missing"] = slope[:, j], miss[:, j]
    return pd.DataFrame(cols, index=[s.sample_id for s in samples])


def _labels_before(tables: DatasetTables, samples: list[Sample]) -> np.ndarray:
    """The most recent in-range label strictly before each target day (NaN if none)."""
    t = tables.target
    lab = tables.labels.dropna(subset=["label"])
    lab = lab[lab["label"].between(t.scale_min, t.scale_max)].sort_values("date")
    out = np.full(len(samples), np.nan)
    by_user = {u: (pd.to_datetime(g["date"]).to_numpy(), g["label"].to_numpy()) for u, g in lab.groupby("user")}
    for i, s in enumerate(samples):
        if s.user not in by_user:
            continue
        d, y = by_user[s.user]
        k = np.searchsorted(d, np.datetime64(s.target_date, "ns"), side="left") - 1
        if k >= 0:
            out[i] = y[k]
    return out


def _mae(y, p) -> float:
    return float(np.mean(np.abs(np.asarray(y, float) - np.asarray(p, float)))) if len(y) else float("nan")


def _mode(y) -> float:
    """The commonest value; ties to the smallest."""
    return float(pd.Series(y, dtype=float).mode().min()) if len(y) else float("nan")


CONSTANTS = ("mean_predictor", "global_median", "global_mode")  # one prediction for every sample


def baseline_predictions(samples_train: list[Sample], samples_test: list[Sample], tables: DatasetTables,
                         *, seed: int = 0, channels: list[str] | None = None) -> dict[str, tuple[np.ndarray, str]]:
    """{baseline: (one prediction per test sample, note)}: every baseline fit on the training samples only.
    `run_baselines` scores these; the CPU study's claims table pairs them with the LLM cells sample by sample."""
    from sklearn.ensemble import GradientBoostingRegressor
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import Ridge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    tr, te = list(samples_train), list(samples_test)
    ytr = np.array([s.label for s in tr], float)
    mu = float(ytr.mean()) if len(ytr) else float("nan")
    med = float(np.median(ytr)) if len(ytr) else float("nan")
    mode = _mode(ytr)
    out = {"mean_predictor": (np.full(len(te), mu), "training-set mean label"),
           "global_median": (np.full(len(te), med), "training-set median label (the best constant for MAE)"),
           "global_mode": (np.full(len(te), mode), "training-set commonest label (ties: the smallest)")}
    by_user = pd.Series(ytr, index=[s.user for s in tr]).groupby(level=0)
    for stat, fallback, name in (("mean", mu, "mean"), ("median", med, "median"), (_mode, mode, "mode")):
        per_user = by_user.agg(stat)
        out[f"per_user_{name}"] = (np.array([per_user.get(s.user, fallback) for s in te], float),
                                   f"user's training {name}; global {name} if unseen")
    last = _labels_before(tables, te)
    out["last_observed_label"] = (np.where(np.isnan(last), mu, last),
                                  "most recent label before the target day; training mean if none")
    if len(tr) >= 5 and len(te):
        Xtr, Xte = summary_features(tables, tr, channels), summary_features(tables, te, channels)
        keep = Xtr.columns[Xtr.notna().any()]
        Xtr, Xte = Xtr[keep].to_numpy(), Xte[keep].to_numpy()
        models = {
            "ridge": make_pipeline(SimpleImputer(strategy="median"), StandardScaler(), Ridge(alpha=10.0)),
            "gradient_boosting": make_pipeline(
                SimpleImputer(strategy="median"),
                GradientBoostingRegressor(random_state=seed, n_estimators=200, max_depth=2, learning_rate=0.05,
                                          subsample=0.8)),
        }
        for name, m in models.items():
            m.fit(Xtr, ytr)
            out[name] = (m.predict(Xte), "window summary features (mean, last, slope, missing)")
    return out


def run_baselines(samples_train: list[Sample], samples_test: list[Sample], tables: DatasetTables,
                  *, seed: int = 0, channels: list[str] | None = None) -> pd.DataFrame:
    """One row per baseline: name, mae (raw prediction), mae_rounded (integer, clipped to the scale),
    prediction (for constant predictors), n_train, n_test."""
    tr, te = list(samples_train), list(samples_test)
    yte = np.array([s.label for s in te], float)
    lo, hi = tables.target.scale_min, tables.target.scale_max
    rows = []
    for name, (pred, note) in baseline_predictions(tr, te, tables, seed=seed, channels=channels).items():
        constant = float(pred[0]) if name in CONSTANTS and len(pred) else None
        rows.append(dict(baseline=name, mae=_mae(yte, pred), mae_rounded=_mae(yte, np.clip(np.round(pred), lo, hi)),
                         prediction=constant, n_train=len(tr), n_test=len(te), note=note))
    return pd.DataFrame(rows)
