"""The sensor placebo: does an agent read the sensors at all? (issue 39)

A placebo cell answers on the same samples as its real cell, with everything kept (the target user's labels,
profile, same-day self-report and dates) except the sensor values of the look-back window, which are replaced, per
sample, by those of another window of the same length:
- `other_user`: a window of another user (drawn among the users with data, seeded per sample);
- `distant`: a window of the same user from a distant period (every day at least `DISTANT_GAP_DAYS` away from each
  day of the sample's own window, before or after it; never the target day). A later window is sensing from after
  the target day: a control condition, not a prediction (no label is read), so the harness's rule that a prompt
  holds nothing after the window end is knowingly set aside for these cells; each record names its donor window
  (`placebo_donor` in its options).
A donor window is drawn among those with at least as many observed days as the sample's own window (all of them
when none has); a sample with no possible donor is an error naming it, never skipped.

It is a data transform, applied to the tables an agent reads for one sample (`placebo_tables`): the sample's
window days of the target user's daily rows are dropped and the donor's rows are put in their place under the
target's dates, so no sensor value of the target's own window remains in what the agent reads of the window
(tests/test_leakage.py checks it on the real data). The user's days outside the window (a memory agent's history)
are left as they are. The placebo tables hold the target user's daily rows only (an agent reads no other user's)
and no sub-day rows: the agents that take the option (`data_transform`, recorded in the cell's key like any other
option) read none, and RAPTOR and PHIA, which would, refuse it. So each sample's tables are small: the memo of
windows (balms.data.memo) keeps a few thousand of them.
"""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import pandas as pd

from balms.data.memo import TablesMemo
from balms.data.schema import DatasetTables, Sample

TRANSFORMS = ("none", "other_user", "distant")
DISTANT_GAP_DAYS = 28  # a distant window's every day is at least this far from each day of the sample's window


def check_transform(name: str) -> str:
    if name not in TRANSFORMS:
        raise ValueError(f"data_transform must be one of {TRANSFORMS}, got {name!r}")
    return name


def _rng(sample: Sample, seed: int, mode: str) -> np.random.Generator:
    """A generator seeded by (seed, mode, sample id): the same donor on every run, a different one per sample."""
    h = hashlib.sha256(f"{seed}|{mode}|{sample.sample_id}".encode()).digest()
    return np.random.default_rng(int.from_bytes(h[:8], "little"))


def _user_daily(tables: DatasetTables, user: str) -> pd.DataFrame:
    ud = tables.daily.xs(user, level="user")
    ud.index = pd.DatetimeIndex(ud.index).normalize()
    return ud.sort_index()


_COUNTS = TablesMemo(maxsize=16)


def _window_counts(tables: DatasetTables, L: int) -> pd.DataFrame:
    """Every L-day window of every user's span: user, start, end, observed days (days with any channel's value).
    Computed once per tables and length."""
    def make() -> pd.DataFrame:
        parts = []
        for u in sorted(set(tables.daily.index.get_level_values("user"))):
            ud = _user_daily(tables, u)
            if not len(ud):
                continue
            obs = ud.notna().any(axis=1).astype(float).reindex(pd.date_range(ud.index.min(), ud.index.max()),
                                                               fill_value=0.0)
            k = obs.rolling(L).sum().dropna()
            parts.append(pd.DataFrame({"user": u, "start": k.index - pd.Timedelta(days=L - 1), "end": k.index,
                                       "observed": k.to_numpy().astype(int)}))
        return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["user", "start", "end",
                                                                                      "observed"])
    return _COUNTS.get(tables, L, make)


def donor_window(tables: DatasetTables, sample: Sample, mode: str, *, seed: int = 0) -> tuple[str, pd.Timestamp]:
    """(donor user, first day of the donor window) for one sample under `mode`, seeded."""
    check_transform(mode)
    if mode == "none":
        raise ValueError("donor_window: mode 'none' has no donor")
    L = len(sample.window_dates)
    own_start, own_end = pd.Timestamp(sample.window_start), pd.Timestamp(sample.window_end)
    users = sorted(set(tables.daily.index.get_level_values("user")))
    if sample.user not in users:
        raise ValueError(f"{tables.name}: sample {sample.sample_id}: user {sample.user!r} has no daily rows")
    own_obs = int(_user_daily(tables, sample.user).reindex(pd.date_range(own_start, own_end))
                  .notna().any(axis=1).sum())
    w = _window_counts(tables, L)
    gap = pd.Timedelta(days=DISTANT_GAP_DAYS)
    if mode == "other_user":
        cands = w[w["user"] != sample.user]
    else:
        cands = w[(w["user"] == sample.user) & ((w["end"] <= own_start - gap) | (w["start"] >= own_end + gap))]
    if not len(cands):
        where = "another user" if mode == "other_user" else f"this user at least {DISTANT_GAP_DAYS} days away"
        raise ValueError(f"{tables.name}: sample {sample.sample_id}: no {L}-day window of {where} to use as its "
                         f"{mode!r} placebo")
    good = cands[cands["observed"] >= min(own_obs, int(cands["observed"].max()))]
    pick = good.iloc[int(_rng(sample, seed, mode).integers(len(good)))]
    return str(pick["user"]), pd.Timestamp(pick["start"])


def placebo_tables(tables: DatasetTables, sample: Sample, mode: str, *, seed: int = 0) -> DatasetTables:
    """The tables an agent reads for `sample` under the placebo: the sample's user's daily rows with the window days
    replaced by the donor window's rows (`donor_window`) under the sample's own dates, no other user's rows and no
    sub-day rows (module doc); `mode` "none" returns `tables` itself."""
    if check_transform(mode) == "none":
        return tables
    donor, dstart = donor_window(tables, sample, mode, seed=seed)
    own = pd.DatetimeIndex([pd.Timestamp(d) for d in sample.window_dates])
    src = _user_daily(tables, donor).reindex(own - (own[0] - dstart))
    src.index = own
    mine = _user_daily(tables, sample.user)
    daily = pd.concat([mine[~mine.index.isin(own)], src.dropna(how="all").astype(mine.dtypes.to_dict())]).sort_index()
    daily.index = pd.MultiIndex.from_arrays([[sample.user] * len(daily), daily.index], names=tables.daily.index.names)
    return dataclasses.replace(tables, daily=daily, subday=None)
