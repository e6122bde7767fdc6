"""Cohorts: a dataset's tables, its samples and the evaluation rule's scored samples, loaded once per process.

The evaluation samples are a seeded subset of the scored target days (`ExperimentConfig.evaluation_rule`,
balms.data.evaluation), identical for every system and backbone; the mean predictor is the rule's (the training
days' mean, or a leave-one-out mean) on those same samples.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import warnings
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from balms.data.evaluation import Evaluation, evaluate
from balms.data.schema import DatasetTables, Sample
from balms.experiments.config import ExperimentConfig


class SampleCountWarning(UserWarning):
    """More evaluation samples were asked for than a dataset has: all of them are used."""


@dataclass
class Cohort:
    """A dataset's tables, all its samples, and the evaluation rule's training pool and scored samples."""

    dataset: str
    tables: DatasetTables
    sampleset: object  # balms.data.samples.SampleSet
    evaluation: Evaluation

    @property
    def train(self) -> list[Sample]:
        return self.evaluation.train

    @property
    def test(self) -> list[Sample]:
        return self.evaluation.test

    @property
    def mean_prediction(self) -> dict[str, float]:
        """The mean predictor's prediction per scored sample id (a constant under `heldout30`)."""
        return self.evaluation.mean_prediction

    @property
    def source(self) -> str:
        return self.tables.source

    def mean_for(self, sample_ids) -> dict[str, float]:
        """The mean predictor's prediction for each given sample id under THIS cohort's evaluation, matched on the
        target day (any look-back). Which cohort drew a cell's samples is `mean_predictions`' question."""
        by_target = {k.rsplit("/L", 1)[0]: v for k, v in self.mean_prediction.items()}
        out = {}
        for sid in sample_ids:
            key = str(sid).rsplit("/L", 1)[0]
            if key not in by_target:
                raise KeyError(f"{self.dataset}: sample {sid!r} is not scored under evaluation rule "
                               f"{self.evaluation.rule!r}")
            out[sid] = by_target[key]
        return out

    @property
    def train_mean(self) -> float:
        return self.evaluation.train_mean

    @property
    def fingerprint(self) -> str:
        """Content hash of the tables the prompts read (a changed dataset re-runs its cells)."""
        return self.tables.fingerprint()

    def eval_samples(self, n: int, seed: int, base: int | None = None) -> list[Sample]:
        """n seeded test samples (0 = all), sorted by user and date, identical for every system/backbone.

        Nested: the samples are the first n of one seeded order, whose first `base` (the profile's n_samples;
        default n) are the seeded draw of `base` samples and the rest a seeded permutation of the others. So a
        cell with fewer samples evaluates a subset of a larger cell's, and the two compare paired on it."""
        pool = sorted(self.test, key=lambda s: (s.user, s.target_date))
        if n > len(pool):  # one profile's n_samples serves datasets of different sizes: clamped, and said
            warnings.warn(f"{self.dataset}: {n} evaluation samples asked for, {len(pool)} eligible under evaluation "
                          f"rule {self.evaluation.rule!r}: all {len(pool)} used", SampleCountWarning, stacklevel=2)
        if n and n < len(pool):
            pick = sample_order(len(pool), base if base is not None else n, seed)[:n]
            pool = [pool[i] for i in sorted(pick)]
        return pool


def sample_order(n_pool: int, base: int, seed: int) -> np.ndarray:
    """Indices 0..n_pool-1 in the seeded evaluation order: a draw of `base` (0 = all), then the rest permuted."""
    first = np.random.default_rng(seed).choice(n_pool, size=min(base, n_pool) if base else n_pool, replace=False)
    rest = np.random.default_rng([seed, 1]).permutation(np.setdiff1d(np.arange(n_pool), first))
    return np.concatenate([first, rest]).astype(int)


@lru_cache(maxsize=None)
def _cohort(dataset: str, lookback: int | None, raw_root: str | None, seed: int, rule: str) -> Cohort:
    from balms.data.loading import load_dataset
    from balms.data.samples import build_samples

    tables = load_dataset(dataset, Path(raw_root) if raw_root else None)
    ss = build_samples(tables, lookback=lookback)
    return Cohort(dataset, tables, ss, evaluate(ss, rule, seed=seed))


def cohort(dataset: str, cfg: ExperimentConfig | None = None, lookback: int | None = None) -> Cohort:
    cfg = cfg or ExperimentConfig()
    return _cohort(dataset, lookback, cfg.raw_root, cfg.seed, cfg.evaluation_rule)


def mean_predictions(cfg: ExperimentConfig, dataset: str, sample_ids, lookbacks) -> dict[str, float]:
    """The mean predictor's prediction for each of one cell's samples, under the evaluation that drew them: the first
    cohort of `lookbacks` (`balms.experiments.cells.draw_lookbacks`: where the declared cells draw) that scores every
    one of them (a sweep's samples are drawn at its longest look-back, whose held-out days differ from the default
    look-back's). No such cohort is an error naming the samples."""
    ids = list(sample_ids)
    for lookback in lookbacks:
        co = cohort(dataset, cfg, lookback)
        try:
            return co.mean_for(ids)
        except KeyError:
            continue
    raise KeyError(f"{dataset}: samples {ids[:3]}{'...' if len(ids) > 3 else ''} are not all scored under evaluation "
                   f"rule {cfg.evaluation_rule!r} at any look-back the profile draws at ({list(lookbacks)})")


def with_lookback(sample: Sample, lookback: int) -> Sample:
    """The same target day and window end, with a different look-back length (Figure 5's design)."""
    if lookback < 1:
        raise ValueError(f"look-back {lookback!r}: expected >= 1 day")
    start = sample.window_end - dt.timedelta(days=lookback - 1)
    return dataclasses.replace(sample, lookback=lookback, window_start=start)


def mean_predictor_rows(cfg: ExperimentConfig, datasets=None) -> pd.DataFrame:
    """The paper's reference baseline on the same evaluation samples (the evaluation rule's mean), raw and rounded,
    and beside it the best constant for MAE (issue 39): the median label of the evaluation rule's training samples."""
    out = []
    for d in datasets or cfg.datasets:
        co = cohort(d, cfg)
        ev = co.eval_samples(cfg.n_for(d), cfg.seed, cfg.n_samples)
        y = np.array([s.label for s in ev], dtype=float)
        m = np.array([co.mean_prediction[s.sample_id] for s in ev], dtype=float)
        med = float(np.median([s.label for s in co.train])) if co.train else np.nan
        out.append({"dataset": d, "source": co.source, "n": len(ev), "train_mean": co.train_mean,
                    "evaluation_rule": co.evaluation.rule,
                    "mae_raw_mean": float(np.abs(y - m).mean()) if len(y) else np.nan,
                    "mae_rounded_mean": float(np.abs(y - np.round(m)).mean()) if len(y) else np.nan,
                    "train_median": med, "mae_train_median": float(np.abs(y - med).mean()) if len(y) else np.nan})
    return pd.DataFrame(out)
