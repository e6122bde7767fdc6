"""Evaluation rules: which samples are scored and what the mean predictor predicts for each.

The paper states three facts about its evaluation set: MAE is "averaged over all held-out target days"
(Section 3.2), the mean predictor "outputs the average training set label" (Section 4.1), and Table 7 counts
PHIA's predictions "across all held-out windows" as 1,640 GLOBEM windows, which is all of Table 5's GLOBEM set.
So every eligible sample was scored, and a "training set" can only mean the other samples. The rules below are
the readings of that, each a named option (`ExperimentConfig.evaluation_rule`); notebook 00 prints each one's
counts and mean-predictor MAE beside the paper's.

- `heldout30` (ours, the earlier default): within each user a seeded ``30%`` of the target days is held out and
  scored; the mean predictor is the mean label of the other ``70%``.
- `all_days_loo` (the paper profile's): every sample is scored; the mean predictor for a sample is the mean label
  of every other sample of the dataset (leave-one-out). This is the one reading under which all of Table 7's
  GLOBEM windows are "held out" and the baseline is still a "training set" average.
- `all_days_in_sample`: every sample; one mean over all of them, the scored sample included (no held-out data).
- `all_days_user_loo`: every sample of a user with >= 2; the mean of the user's other labels.
- `all_days_user_earlier`: every sample with an earlier label of the same user; the mean of those earlier labels.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from balms.data.samples import TEST_FRAC
from balms.data.schema import Sample


@dataclass(frozen=True)
class Evaluation:
    """The scored samples (sorted by user and date), the training pool, and the mean predictor per scored sample."""

    rule: str
    train: list[Sample]
    test: list[Sample]
    mean_prediction: dict[str, float]  # sample_id -> the mean predictor's (unrounded) prediction

    @property
    def train_mean(self) -> float:
        """The mean label of the training pool (for the leave-one-out rules: of every sample)."""
        return float(np.mean([s.label for s in self.train])) if self.train else float("nan")


def _sorted(samples) -> list[Sample]:
    return sorted(samples, key=lambda s: (s.user, s.target_date))


def _heldout30(samples: list[Sample], seed: int) -> Evaluation:
    from balms.data.samples import split_target_days

    train, test = split_target_days(samples, test_frac=TEST_FRAC, seed=seed)
    m = float(np.mean([s.label for s in train])) if train else float("nan")
    return Evaluation("heldout30", list(train), _sorted(test), {s.sample_id: m for s in test})


def _all_days_loo(samples: list[Sample], seed: int) -> Evaluation:
    y = np.array([s.label for s in samples], float)
    n = len(y)
    pred = (y.sum() - y) / (n - 1) if n > 1 else np.full(n, np.nan)
    keep = [(s, p) for s, p in zip(samples, pred, strict=True) if np.isfinite(p)]
    return Evaluation("all_days_loo", list(samples), _sorted(s for s, _ in keep),
                      {s.sample_id: float(p) for s, p in keep})


def _all_days_in_sample(samples: list[Sample], seed: int) -> Evaluation:
    m = float(np.mean([s.label for s in samples])) if samples else float("nan")
    return Evaluation("all_days_in_sample", list(samples), _sorted(samples), {s.sample_id: m for s in samples})


def _per_user(samples: list[Sample], earlier_only: bool, rule: str) -> Evaluation:
    by_user: dict[str, list[Sample]] = {}
    for s in samples:
        by_user.setdefault(s.user, []).append(s)
    pred: dict[str, float] = {}
    for ss in by_user.values():
        ss = sorted(ss, key=lambda s: s.target_date)
        for i, s in enumerate(ss):
            others = ss[:i] if earlier_only else ss[:i] + ss[i + 1:]
            if others:
                pred[s.sample_id] = float(np.mean([o.label for o in others]))
    return Evaluation(rule, list(samples), _sorted(s for s in samples if s.sample_id in pred), pred)


EVALUATION_RULES: dict[str, Callable[[list[Sample], int], Evaluation]] = {
    "heldout30": _heldout30,
    "all_days_loo": _all_days_loo,
    "all_days_in_sample": _all_days_in_sample,
    "all_days_user_loo": lambda s, seed: _per_user(s, False, "all_days_user_loo"),
    "all_days_user_earlier": lambda s, seed: _per_user(s, True, "all_days_user_earlier"),
}
EVALUATION_RULE_TEXT = {
    "heldout30": f"ours: a seeded {TEST_FRAC:.0%} of each user's target days is scored; the mean predictor is the "
                 "mean label of the other days",
    "all_days_loo": "the paper's (derived): every sample is scored; the mean predictor for a sample is the mean "
                    "label of every other sample of the dataset (leave-one-out)",
    "all_days_in_sample": "every sample is scored; the mean predictor is the mean label of all of them, the scored "
                          "one included",
    "all_days_user_loo": "every sample of a user with >= 2 is scored; the mean predictor is the mean of the user's "
                         "other labels",
    "all_days_user_earlier": "every sample with an earlier label of its user is scored; the mean predictor is the "
                             "mean of the user's earlier labels",
}


def evaluate(samples, rule: str, *, seed: int = 0) -> Evaluation:
    """The scored samples and the mean predictor under the named evaluation rule."""
    if rule not in EVALUATION_RULES:
        raise ValueError(f"unknown evaluation rule {rule!r}; known: {sorted(EVALUATION_RULES)}")
    samples = list(samples.samples) if hasattr(samples, "samples") else list(samples)
    return EVALUATION_RULES[rule](samples, seed)


def mean_predictor_mae(ev: Evaluation, *, rounded: bool = False) -> float:
    """MAE of the mean predictor on the scored samples (rounded: its prediction rounded to the scale)."""
    if not ev.test:
        return float("nan")
    p = np.array([ev.mean_prediction[s.sample_id] for s in ev.test])
    y = np.array([s.label for s in ev.test], float)
    return float(np.abs(y - (np.round(p) if rounded else p)).mean())
