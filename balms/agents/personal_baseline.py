"""Personal baseline (OURS, not one of the paper's systems): one prompt that gives the model the user's own
history as baselines, one model call, one parsed integer.

Why: the paper diagnoses that agents do not use the user's own history (they collapse to one answer and do not
beat the mean predictor) and stops there. This system tests the obvious fix on the same samples: the prompt holds
- the label anchor (`anchor`): the user's own mean label and its spread over their TRAINING days;
- the look-back window as deviations from the user's own training-day mean of each channel, in the dataset's
  units (`deviations`; off = the raw values, as Health-LLM shows them);
- the evaluation rule it must respect: no target-day label, no held-out day in any baseline.
The two parts are options so a study can say which one helps (both off is a Health-LLM-like prompt in our words).

Training days come from the benchmark's own split (`balms.data.samples.target_day_split`, the definition the
cohorts and the mean predictor use): a user's labels are those of their training samples; their sensing baseline
covers the days of their training samples (look-back windows and target days). Every held-out target day, the
sample's own target day among them, is excluded from both, as is the target day's same-day context (no `context`).
Like the mean predictor, the baselines use all of the user's training days, earlier and later ones; `causal=True`
keeps only days before the target day. tests/test_personal_baseline.py proves on real PMData and GLOBEM that no
held-out label and no target-day value reaches the prompt.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from balms.agents import prompts
from balms.agents.healthllm import PromptAgentBase
from balms.data import render
from balms.data.samples import TEST_FRAC, target_day_split
from balms.data.schema import Channel, DatasetTables, Sample, Window
from balms.models.base import Backend
from balms.records import PredictionRecord

PROMPT_VERSION = "pb-v1"  # bump when the prompt text changes (recorded in every record's options)
STYLE = "corrected"  # ours: our system message, the corrected PMData sleep recipe


@dataclass(frozen=True)
class ChannelBaseline:
    mean: float
    sd: float
    n_days: int  # training days with a value


@dataclass(frozen=True)
class UserBaseline:
    """A user's baselines from their training days only (what the prompt states)."""

    user: str
    label_dates: tuple  # the training target days whose labels enter the anchor
    labels: tuple
    sensing_dates: tuple  # the days whose sensing enters the channel baselines
    channels: dict = field(default_factory=dict)  # channel name -> ChannelBaseline (absent: no training value)

    @property
    def label_mean(self) -> float:
        return float(np.mean(self.labels)) if self.labels else float("nan")

    @property
    def label_sd(self) -> float:
        return float(np.std(self.labels, ddof=1)) if len(self.labels) > 1 else float("nan")

    def summary(self) -> dict:
        """JSON-able: recorded in the record's options, so a reader can check what the prompt was given."""
        return {"n_label_days": len(self.labels), "label_mean": _r(self.label_mean), "label_sd": _r(self.label_sd),
                "n_sensing_days": len(self.sensing_dates),
                "channels": {k: {"mean": _r(v.mean), "sd": _r(v.sd), "n_days": v.n_days}
                             for k, v in self.channels.items()}}


def _r(x: float, digits: int = 4):
    return None if x is None or np.isnan(x) else round(float(x), digits)


# The split of a dataset's tables, computed once per (tables content, look-back, seed) in a process.
_SPLITS: dict[tuple, tuple[dict, set]] = {}


def training_split(tables: DatasetTables, *, lookback: int | None, seed: int) -> tuple[dict, set]:
    """({user: [training samples]}, {(user, held-out target day)}) of the benchmark's split of `tables`."""
    key = (tables.fingerprint(), lookback, seed)
    if key not in _SPLITS:
        _, train, test = target_day_split(tables, lookback=lookback, seed=seed)
        by_user: dict[str, list[Sample]] = {}
        for s in train:
            by_user.setdefault(s.user, []).append(s)
        _SPLITS[key] = (by_user, {(s.user, s.target_date) for s in test})
    return _SPLITS[key]


def user_baseline(tables: DatasetTables, sample: Sample, channels: list[Channel], *, lookback: int | None = None,
                  seed: int = 0, causal: bool = False) -> UserBaseline:
    """The baselines of `sample`'s user from training days only; `sample` must be a held-out target day."""
    train_of, held = training_split(tables, lookback=lookback, seed=seed)
    if (sample.user, sample.target_date) not in held:
        raise ValueError(f"{sample.sample_id}: not a held-out target day of the benchmark's split (seed {seed}, "
                         f"look-back {lookback or 'the dataset default'}); the personal baseline is defined for the "
                         "evaluated (held-out) days only, whose labels never enter a baseline")
    held_days = {d for u, d in held if u == sample.user}
    train = [s for s in train_of.get(sample.user, []) if not causal or s.target_date < sample.target_date]
    label_dates = tuple(s.target_date for s in train)
    days = {d for s in train for d in (*s.window_dates, s.target_date)} - held_days
    if causal:
        days = {d for d in days if d < sample.target_date}
    days_ix = pd.DatetimeIndex(sorted(pd.Timestamp(d) for d in days))
    try:
        ud = tables.daily.xs(sample.user, level="user")
    except KeyError:
        ud = pd.DataFrame(columns=tables.daily.columns)
    ud = ud.reindex(index=days_ix, columns=[c.name for c in channels]).astype(float)
    chans = {}
    for c in channels:
        v = ud[c.name].dropna().to_numpy()
        if len(v):
            chans[c.name] = ChannelBaseline(float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else float("nan"),
                                            len(v))
    return UserBaseline(sample.user, label_dates, tuple(int(s.label) for s in train), tuple(sorted(days)), chans)


def _signed(value: float, decimals: int) -> str:
    if not np.isnan(value) and round(value, max(decimals, 0)) == 0:
        value = 0.0  # no "-0.0"
    text = render.format_value(value, decimals)
    return text if text == "NaN" or text.startswith("-") or float(text) == 0 else f"+{text}"


def rule_line() -> str:
    return ("Evaluation rule you must respect: the target day's own report is unknown to you and is never part of "
            "the data below; every baseline below was computed only from this user's training days, and no held-out "
            "day (a day the benchmark scores, the target day among them) enters any baseline.")


def anchor_line(b: UserBaseline, window: Window) -> str:
    t = window.target
    if not b.labels:
        return f"This user's own baseline for {t.label}: no training-day report."
    sd = f"standard deviation {b.label_sd:.2f}" if len(b.labels) > 1 else "no spread (a single report)"
    return (f"This user's own baseline for {t.label}: mean {b.label_mean:.2f}, {sd}, over {len(b.labels)} "
            f"training-day report{'s' if len(b.labels) != 1 else ''} (lowest {min(b.labels)}, highest "
            f"{max(b.labels)}).")


def deviations_block(b: UserBaseline, window: Window, channels: list[Channel]) -> str:
    s = window.sample
    n = len(window.daily.index)
    lines = [f"Daily data for the {n} days {s.window_start.isoformat()} to {s.window_end.isoformat()} (day 1 = "
             f"{s.window_start.isoformat()}, the oldest; day {n} = {s.window_end.isoformat()}, the most recent), "
             "each value shown as its deviation from this user's own training-day mean (value minus mean, in the "
             "channel's units; + above, - below the user's usual). NaN = missing."]
    for c in channels:
        vals = render.channel_values(window, c)
        cb = b.channels.get(c.name)
        if cb is None:
            raw = ", ".join(render.format_value(v, c.decimals) for v in vals)
            lines.append(f"- {render.channel_caption(c)}: no training-day value, so no baseline; raw values [{raw}]")
            continue
        sd = f"SD {render.format_value(cb.sd, c.decimals)}, " if not np.isnan(cb.sd) else ""
        devs = ", ".join(_signed(v - cb.mean, c.decimals) for v in vals)
        lines.append(f"- {render.channel_caption(c)}: user mean {render.format_value(cb.mean, c.decimals)} ({sd}"
                     f"{cb.n_days} training days); deviations [{devs}]")
    return "\n".join(lines)


@dataclass
class PersonalBaselineAgent(PromptAgentBase):
    """Ours. `anchor`: state the user's training-day label mean and spread; `deviations`: show the window as
    deviations from the user's training-day channel means (False: raw values); `causal`: baselines from training
    days before the target day only; `split_seed` / `split_lookback`: the benchmark split the baselines respect
    (the experiment's seed; the look-back its cohort was built with, None = the dataset's own)."""

    anchor: bool = True
    deviations: bool = True
    causal: bool = False
    split_seed: int = 0
    split_lookback: int | None = None
    style: str = STYLE
    context: object = False  # the target day's same-day self-report is a target-day value: never shown

    def __post_init__(self):
        self.name = "personal_baseline"
        self._check()
        if self.style != STYLE:
            raise ValueError(f"personal_baseline: style must be {STYLE!r} (ours), got {self.style!r}")
        if self.context not in (False, None):
            raise ValueError("personal_baseline: context must be False (the same-day report is a target-day value "
                             f"and never reaches this prompt), got {self.context!r}")

    def options(self) -> dict:
        return {**self.base_options(), "prompt_version": PROMPT_VERSION, "anchor": self.anchor,
                "deviations": self.deviations, "causal": self.causal, "split_seed": self.split_seed,
                "split_lookback": self.split_lookback, "test_frac": TEST_FRAC}

    def _build(self, sample: Sample, tables: DatasetTables) -> tuple[str, dict]:
        # the window from the sensor placebo's tables (issue 39) when asked; the baselines from the real tables (the
        # user's own training days: what is kept of the target user)
        window, chans = self.window(sample, self.data_for(sample, tables))
        shown = chans if chans is not None else list(tables.channels)
        b = user_baseline(tables, sample, shown, lookback=self.split_lookback, seed=self.split_seed,
                          causal=self.causal)
        parts = [prompts.task_line(window), rule_line()]
        if self.anchor:
            parts.append(anchor_line(b, window))
        parts.append(render.render_profile(window.profile))
        if self.sensors:  # False: no sensor line (the anchor and the profile only)
            parts.append(deviations_block(b, window, shown) if self.deviations else render.render_window(window, shown))
        parts += [prompts.question_line(window), prompts.answer_format(window.target, self.cot)]
        extra = {**self.channel_options(tables, chans), "user_baseline": b.summary(),
                 **self.placebo_options(sample, tables)}
        return "\n".join(parts), extra

    def predict(self, sample: Sample, tables: DatasetTables, backend: Backend) -> PredictionRecord:
        from balms.agents.common import Episode

        user, extra = self._build(sample, tables)
        return self.answer(sample, tables, backend, Episode(backend), user, {**self.options(), **extra})

    def first_prompt(self, sample: Sample, tables: DatasetTables) -> list:
        """The messages of the (only) model call, without calling a model (plan, batches, `balms prompt`)."""
        return prompts.messages(self.system_prompt, self._build(sample, tables)[0])
