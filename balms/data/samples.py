"""From tables to (user, target day, look-back window, label) samples, with every filter counted.

Rules, applied in this order to each label row; each rejected row is counted under its rule name in
`SampleSet.dropped` (loader-level counts such as `duplicate_report` are carried over):

- `missing_label`        the label cell is empty.
- `out_of_range_label`   outside the target scale (PMData stress 0).
- `non_integer_label`    not a whole number.
- `duplicate_label`      a second label for the same (user, date) still present after loading (last kept).
- `short_history`        the window would start before the user's record starts. The record starts at
                         the first day with any sensing (`history_from="first_sensing"`, the default for
                         every dataset), at the first label (`"first_label"`), or never (`"none"`).
- `no_sensing_in_window` not one window day has any `observed_channels` value (only when
                         `min_days_observed >= 1`).
- `too_few_observed_days` fewer than `min_days_observed` window days have one.

Named sample rules (`build_samples(tables, rule=...)`; explicit keyword arguments override a rule's values):

- `paper_stated`   only the filters Table 5's caption names (cohort selection, which is the loader's job, and
                   missing labels; out-of-range, non-integer and duplicate labels are dropped too, as invalid
                   labels). No requirement on the window: a sample may have no sensing at all.
- `healthllm_same_day` the window ENDS ON the target day (the target day's own sensing is input), it must lie
                   within the user's sensing record, >= 1 observed day. A candidate reading of the Health-LLM
                   recipe; the paper's own prompt example (p01, target 2019-11-15, resting HR of 1 Nov first)
                   ends the window the day before, so this is not the benchmark's rule.
- `balms` (default) the window ends the day before the target day (the paper's example), lies within the
                   user's sensing record (a full look-back is what a "14-day look-back" implies), and has at
                   least one observed day (an agent cannot read an empty window). Same rule for every dataset.
- `count_matched`  the earlier default, kept only to be shown: history from the first label on PMData and
                   >= half the window observed. Its threshold was chosen because it gave 1,450 PMData samples
                   against the paper's 1,448, so that match is not evidence of fidelity.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from balms.data.memo import TablesMemo
from balms.data.registry import dataset_names, get_dataset
from balms.data.schema import DatasetTables, Sample, Window

SAMPLE_RULES: dict[str, dict] = {
    "paper_stated": dict(include_target_day=False, history_from="none", min_days_observed=0),
    "healthllm_same_day": dict(include_target_day=True, history_from="first_sensing", min_days_observed=1),
    "balms": dict(include_target_day=False, history_from="first_sensing", min_days_observed=1),
    "count_matched": dict(include_target_day=False, history_from={"pmdata": "first_label"},
                          min_days_observed={"pmdata": "half"}),
}
DEFAULT_RULE = "balms"
SAMPLE_RULE_TEXT = {
    "paper_stated": "Table 5's stated filters only: cohort and missing/invalid labels; no window requirement",
    "healthllm_same_day": "window ends on the target day, full window within the sensing record, >= 1 observed day",
    "balms": "window ends the day before the target, full window within the sensing record, >= 1 observed day",
    "count_matched": "earlier default: PMData history from first label and >= half the window observed "
                     "(threshold chosen to match the paper's 1,448)",
}
# Channels whose presence makes a day "observed" (None = any daily channel).
DEFAULT_OBSERVED = {"pmdata": ["steps", "calories", "resting_hr", "sleep_minutes"]}
LOADER_FILTERS = ("duplicate_report",)


@dataclass
class SampleSet:
    dataset: str
    lookback: int
    samples: list[Sample]
    dropped: dict[str, int] = field(default_factory=dict)
    params: dict = field(default_factory=dict)
    n_label_rows: int = 0

    def __len__(self) -> int:
        return len(self.samples)

    def __iter__(self):
        return iter(self.samples)

    def to_frame(self) -> pd.DataFrame:
        cols = ["sample_id", "dataset", "user", "target_date", "label", "lookback", "window_start", "window_end",
                "source"]
        return pd.DataFrame(
            [[s.sample_id, s.dataset, s.user, s.target_date, s.label, s.lookback, s.window_start, s.window_end,
              s.source] for s in self.samples],
            columns=cols,
        )

    def label_counts(self) -> dict[int, int]:
        return dict(sorted(pd.Series([s.label for s in self.samples], dtype=int).value_counts().items()))


def _user_day_matrix(tables: DatasetTables, cols: list[str]) -> pd.Series:
    """Boolean Series (user, date): any of `cols` observed that day."""
    cols = [c for c in cols if c in tables.daily.columns]
    if not cols:
        return pd.Series(dtype=bool)
    return tables.daily[cols].notna().any(axis=1)


def build_samples(
    tables: DatasetTables,
    *,
    lookback: int | None = None,
    rule: str | None = None,
    include_target_day: bool | None = None,
    min_days_observed: int | None = None,
    history_from: str | None = None,
    observed_channels: list[str] | None = None,
) -> SampleSet:
    """Every valid (user, target day) of `tables` as a Sample, with the count of each rejected row.

    `rule` names one of `SAMPLE_RULES` (default `DEFAULT_RULE`); `include_target_day`, `min_days_observed`
    and `history_from` given explicitly override the rule's values.
    """
    name = tables.name
    L = int(lookback or (get_dataset(name).default_lookback if name in dataset_names() else 14))
    if L < 1:
        raise ValueError(f"lookback must be >= 1, got {L}")
    rule = rule or DEFAULT_RULE
    if rule not in SAMPLE_RULES:
        raise ValueError(f"unknown sample rule {rule!r}; known: {sorted(SAMPLE_RULES)}")

    def from_rule(key, given, fallback):
        if given is not None:
            return given
        v = SAMPLE_RULES[rule][key]
        return v.get(name, fallback) if isinstance(v, dict) else v

    include_target_day = bool(from_rule("include_target_day", include_target_day, False))
    hist = from_rule("history_from", history_from, "first_sensing")
    if hist not in ("first_label", "first_sensing", "none"):
        raise ValueError(f"history_from must be first_label, first_sensing or none, got {hist!r}")
    min_days_observed = from_rule("min_days_observed", min_days_observed, 1)
    if min_days_observed == "half":
        min_days_observed = math.ceil(L / 2)
    min_days_observed = int(min_days_observed)
    obs_cols = observed_channels if observed_channels is not None \
        else DEFAULT_OBSERVED.get(name, list(tables.daily.columns))
    dropped: dict[str, int] = {k: v for k, v in tables.dropped.items() if k in LOADER_FILTERS}

    lab = tables.labels[["user", "date", "label"]].copy()
    lab["date"] = pd.to_datetime(lab["date"]).dt.normalize()
    n_rows = len(lab)

    def drop(mask: pd.Series, rule: str) -> None:
        nonlocal lab
        n = int(mask.sum())
        dropped[rule] = dropped.get(rule, 0) + n
        lab = lab[~mask]

    drop(lab["label"].isna(), "missing_label")
    t = tables.target
    drop(~lab["label"].between(t.scale_min, t.scale_max), "out_of_range_label")
    drop((lab["label"] - lab["label"].round()).abs() > 1e-9, "non_integer_label")
    lab = lab.sort_values(["user", "date"], kind="stable")
    drop(lab.duplicated(["user", "date"], keep="last"), "duplicate_label")

    end_off = 0 if include_target_day else 1
    lab["window_end"] = lab["date"] - pd.Timedelta(days=end_off)
    lab["window_start"] = lab["window_end"] - pd.Timedelta(days=L - 1)

    observed = _user_day_matrix(tables, obs_cols)
    if hist == "first_label":
        labelled = tables.labels.dropna(subset=["label"]).assign(date=lambda d: pd.to_datetime(d["date"]))
        start = labelled.groupby("user")["date"].min()
    elif hist == "first_sensing":
        obs_days = observed[observed] if len(observed) else observed
        start = obs_days.reset_index().groupby("user")["date"].min() if len(obs_days) \
            else pd.Series(dtype="datetime64[ns]")
    else:
        start = None
    if start is not None:
        # short_history: the window reaches back before the user's record (the target day itself, and
        # for first_label the first report, need not be inside the window).
        st = lab["user"].map(start)
        drop(st.isna() | (lab["window_start"] < st), "short_history")

    # Observed days per window: per-user cumulative sums over a dense calendar.
    n_obs = np.zeros(len(lab), dtype=int)
    if len(observed) and len(lab):
        obs = observed.astype(int)
        users_with = set(obs.index.get_level_values(0))
        pos = {u: np.asarray(ix) for u, ix in lab.reset_index(drop=True).groupby("user").groups.items()}
        lab = lab.reset_index(drop=True)
        for u, ix in pos.items():
            if u not in users_with:
                continue
            su = obs.xs(u, level=0)
            lo = min(su.index.min(), lab.loc[ix, "window_start"].min())
            hi = max(su.index.max(), lab.loc[ix, "window_end"].max())
            dense = su.reindex(pd.date_range(lo, hi, freq="D"), fill_value=0)
            cs = np.concatenate([[0], np.cumsum(dense.to_numpy())])
            first = dense.index[0]
            e = (lab.loc[ix, "window_end"] - first).dt.days.to_numpy() + 1
            s = (lab.loc[ix, "window_start"] - first).dt.days.to_numpy()
            n_obs[ix] = cs[e] - cs[s]
    lab = lab.reset_index(drop=True)
    lab["n_obs"] = n_obs
    drop((lab["n_obs"] == 0) & (min_days_observed >= 1), "no_sensing_in_window")
    drop(lab["n_obs"] < min_days_observed, "too_few_observed_days")

    samples = [
        Sample(
            dataset=name, user=str(u), target_date=d.date(), label=int(round(y)), lookback=L,
            window_start=ws.date(), window_end=we.date(), source=tables.source,
        )
        for u, d, y, ws, we in zip(lab["user"], lab["date"], lab["label"], lab["window_start"], lab["window_end"],
                                 strict=True)
    ]
    params = dict(rule=rule, lookback=L, include_target_day=include_target_day, min_days_observed=min_days_observed,
                  history_from=hist, observed_channels=list(obs_cols))
    return SampleSet(dataset=name, lookback=L, samples=samples, dropped=dropped, params=params, n_label_rows=n_rows)


# ------------------------------------------------------------------------------------- windows
_SUBDAY = TablesMemo(maxsize=16)  # one entry per tables object: its sub-day rows split by user


def subday_rows_of(tables: DatasetTables, user: str) -> pd.DataFrame:
    """The user's sub-day rows of `tables.subday`, in table order (read only: callers filter or copy).

    Why: every sample of every cell cut its user out of the whole sub-day table (PMData: ~100k rows) several times
    (window, RAPTOR's leaves and day tables, PHIA's frames); a grid in flight spent much of its client CPU there
    (issue 27). Split once per tables object (balms.data.memo)."""
    sd = tables.subday
    if sd is None:
        return pd.DataFrame()
    per = _SUBDAY.get(tables, "by_user", lambda: dict(iter(sd.groupby("user", sort=False))))
    rows = per.get(user)
    return sd.iloc[0:0] if rows is None else rows


def window_of(tables: DatasetTables, sample: Sample, *, context: bool = True,
              channels: list[str] | None = None) -> Window:
    """The data an agent may see for `sample`: window days only, no label; same-day context if asked."""
    dates = pd.DatetimeIndex([pd.Timestamp(d) for d in sample.window_dates])
    chans = [c for c in tables.channels if channels is None or c.name in channels]
    names = [c.name for c in chans]
    try:
        ud = tables.daily.xs(sample.user, level="user")
    except KeyError:
        ud = pd.DataFrame(columns=tables.daily.columns)
    daily = ud.reindex(index=dates, columns=names).astype(float)
    daily.index.name = "date"
    profile: dict = {}
    if len(tables.profiles) and sample.user in tables.profiles.index:
        profile = {k: (None if pd.isna(v) else v) for k, v in tables.profiles.loc[sample.user].to_dict().items()}
    ctx: dict = {}
    ctx_channels = []
    if context and len(tables.context):
        key = (sample.user, pd.Timestamp(sample.target_date))
        if key in tables.context.index:
            row = tables.context.loc[key]
            ctx = {c.name: row.get(c.name) for c in tables.context_channels}
        ctx_channels = list(tables.context_channels)
    sub = None
    if tables.subday is not None:
        sd = subday_rows_of(tables, sample.user)
        m = sd["date"].between(dates[0], dates[-1])
        keep = ["user", "date", "slot", "slot_index",
                *[c.name for c in tables.subday_channels
                  if channels is None or c.name in channels or c.name in sd.columns]]
        sub = sd.loc[m, [c for c in keep if c in sd.columns]].reset_index(drop=True)
    return Window(
        sample=sample, target=tables.target, daily=daily, channels=chans, profile=profile,
        context=ctx, context_channels=ctx_channels, subday=sub,
        subday_channels=list(tables.subday_channels), subday_unit=tables.subday_unit,
    )


def window_arrays(tables: DatasetTables, samples: list[Sample], channels: list[str] | None = None) -> np.ndarray:
    """All windows at once as an array (n_samples, lookback, n_channels), NaN = missing. Fast path
    for baselines and benchmarks; same values as `window_of(...).daily`."""
    names = channels or [c.name for c in tables.channels]
    if not samples:
        return np.zeros((0, 0, len(names)))
    L = samples[0].lookback
    out = np.full((len(samples), L, len(names)), np.nan)
    by_user: dict[str, list[int]] = {}
    for i, s in enumerate(samples):
        if s.lookback != L:
            raise ValueError("window_arrays needs samples of one lookback")
        by_user.setdefault(s.user, []).append(i)
    daily = tables.daily.reindex(columns=names)
    users = set(daily.index.get_level_values(0))
    for u, ix in by_user.items():
        if u not in users:
            continue
        ud = daily.xs(u, level=0)
        ws = np.array([np.datetime64(samples[i].window_start, "D") for i in ix])
        lo = min(ud.index.min().to_datetime64().astype("datetime64[D]"), ws.min())
        hi = max(ud.index.max().to_datetime64().astype("datetime64[D]"), ws.max() + L)
        dense = ud.reindex(pd.date_range(str(lo), str(hi), freq="D")).to_numpy(dtype=float)
        off = (ws - lo).astype(int)
        out[ix] = dense[off[:, None] + np.arange(L)[None, :]]
    return out


# -------------------------------------------------------------------------------------- splits
def _as_list(x) -> list[Sample]:
    return list(x.samples) if isinstance(x, SampleSet) else list(x)


# The share of each user's target days held out for evaluation (the paper does not state its split; ours).
TEST_FRAC = 0.3


def split_target_days(sampleset_or_samples, *, test_frac: float = TEST_FRAC,
                      seed: int = 0) -> tuple[list[Sample], list[Sample]]:
    """Held-out target days: within each user, a seeded random `test_frac` of the days is test, so
    every user with >= 2 samples is in both parts (the paper's shared target-day split)."""
    samples = _as_list(sampleset_or_samples)
    rng = np.random.default_rng(seed)
    by_user: dict[str, list[int]] = {}
    for i, s in enumerate(samples):
        by_user.setdefault(s.user, []).append(i)
    test_ix: set[int] = set()
    for u in sorted(by_user):
        ix = sorted(by_user[u], key=lambda i: samples[i].target_date)
        n_test = int(round(test_frac * len(ix)))
        if len(ix) >= 2:
            n_test = min(max(n_test, 1), len(ix) - 1)
        else:
            n_test = 0
        test_ix.update(rng.choice(ix, size=n_test, replace=False).tolist() if n_test else [])
    train = [s for i, s in enumerate(samples) if i not in test_ix]
    test = [s for i, s in enumerate(samples) if i in test_ix]
    return train, test


def target_day_split(tables: DatasetTables, *, lookback: int | None = None,
                     seed: int = 0) -> tuple[SampleSet, list[Sample], list[Sample]]:
    """The benchmark's evaluation split of a dataset: its samples (default sample rule, `lookback` or the
    dataset's own) and their seeded target-day split. The one definition the cohorts (mean predictor, the
    evaluated days) and the personal-baseline agent (its training-day baselines) share."""
    ss = build_samples(tables, lookback=lookback)
    train, test = split_target_days(ss.samples, seed=seed)
    return ss, train, test


def split_participants(sampleset_or_samples, *, test_frac: float = 0.3,
                       seed: int = 0) -> tuple[list[Sample], list[Sample]]:
    """Participant-level split: a seeded random `test_frac` of the users (at least one) is test."""
    samples = _as_list(sampleset_or_samples)
    users = sorted({s.user for s in samples})
    rng = np.random.default_rng(seed)
    n_test = min(max(int(round(test_frac * len(users))), 1), max(len(users) - 1, 1)) if users else 0
    test_users = set(rng.choice(users, size=n_test, replace=False).tolist()) if n_test else set()
    return [s for s in samples if s.user not in test_users], [s for s in samples if s.user in test_users]


def sample_from_row(row: dict) -> Sample:
    """Inverse of `SampleSet.to_frame()` rows (for samples.parquet readers)."""
    def d(x):
        return pd.Timestamp(x).date() if not isinstance(x, dt.date) else x
    return Sample(dataset=row["dataset"], user=str(row["user"]), target_date=d(row["target_date"]),
                  label=int(row["label"]), lookback=int(row["lookback"]), window_start=d(row["window_start"]),
                  window_end=d(row["window_end"]), source=row.get("source", "real"))
