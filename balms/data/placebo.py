"""The sensor placebo: does an agent read the sensors at all? (issue 39)

A placebo cell answers on the same samples as its real cell, with everything kept (the target user's labels,
profile, same-day self-report and dates) except the sensor values of the look-back window, which are replaced, per
sample, by those of another window of the same length:
- `other_user`: a window of another user (drawn among the users with data, seeded per sample);
- `distant`: a window of the same user from a distant period (every day at least `DISTANT_GAP_DAYS` away from each
  day of the sample's own window, before or after it; never the target day).
A donor window is drawn among those with at least as many observed days as the sample's own window (all of them
when none has); a sample with no possible donor is an error naming it, never skipped.

It is a data transform, applied to the tables an agent reads for one sample (`placebo_tables`): the sample's
window days of the target user's daily rows (and sub-day rows) are dropped and the donor's rows are put in their
place under the target's dates, so no sensor value of the target's own window remains in what any agent reads of
the window (tests/test_leakage.py checks it on the real data). Days outside the window (a memory agent's history,
PHIA's frames before the window) are left as they are. The agents take it as the option `data_transform`, which is
recorded in the cell's key like any other option.
"""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import pandas as pd

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


def _observed_days(ud: pd.DataFrame) -> pd.Series:
    """Per calendar day of a user's span: 1 if any channel has a value (a day with no row counts 0)."""
    if not len(ud):
        return pd.Series(dtype=float)
    idx = pd.date_range(ud.index.min(), ud.index.max(), freq="D")
    return ud.notna().any(axis=1).astype(float).reindex(idx, fill_value=0.0)


def _user_daily(tables: DatasetTables, user: str) -> pd.DataFrame:
    ud = tables.daily.xs(user, level="user")
    ud.index = pd.DatetimeIndex(ud.index).normalize()
    return ud.sort_index()


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
    pool = [u for u in users if u != sample.user] if mode == "other_user" else [sample.user]
    cands: list[tuple[str, pd.Timestamp, int]] = []
    gap = pd.Timedelta(days=DISTANT_GAP_DAYS)
    for u in pool:
        obs = _observed_days(_user_daily(tables, u))
        if len(obs) < L:
            continue
        counts = obs.rolling(L).sum().dropna()  # indexed by the window's last day
        for end, k in counts.items():
            start = end - pd.Timedelta(days=L - 1)
            if mode == "distant" and not (end <= own_start - gap or start >= own_end + gap):
                continue
            cands.append((u, start, int(k)))
    if not cands:
        where = "another user" if mode == "other_user" else f"this user at least {DISTANT_GAP_DAYS} days away"
        raise ValueError(f"{tables.name}: sample {sample.sample_id}: no {L}-day window of {where} to use as its "
                         f"{mode!r} placebo")
    best = max(k for *_, k in cands)
    good = [c for c in cands if c[2] >= min(own_obs, best)]
    u, start, _ = good[int(_rng(sample, seed, mode).integers(len(good)))]
    return u, start


def placebo_tables(tables: DatasetTables, sample: Sample, mode: str, *, seed: int = 0) -> DatasetTables:
    """`tables` with the sample's window days of its user's daily (and sub-day) rows replaced by the donor window's
    rows (`donor_window`), under the sample's own dates; `mode` "none" returns `tables` itself."""
    if check_transform(mode) == "none":
        return tables
    donor, dstart = donor_window(tables, sample, mode, seed=seed)
    own = pd.DatetimeIndex([pd.Timestamp(d) for d in sample.window_dates])
    shift = own[0] - dstart
    src = _user_daily(tables, donor).reindex(own - shift)
    src.index = pd.MultiIndex.from_arrays([[sample.user] * len(own), own], names=tables.daily.index.names)
    src = src.dropna(how="all")
    dates = pd.DatetimeIndex(tables.daily.index.get_level_values(1)).normalize()
    users = tables.daily.index.get_level_values(0)
    drop = (users == sample.user) & dates.isin(own)
    daily = pd.concat([tables.daily[~drop], src.astype(tables.daily.dtypes.to_dict())]).sort_index()
    changes: dict = {"daily": daily}
    sd = tables.subday
    if sd is not None and len(sd):
        d = pd.to_datetime(sd["date"]).dt.normalize()
        mine = (sd["user"] == sample.user) & d.isin(own)
        theirs = (sd["user"] == donor) & d.isin(own - shift)
        moved = sd[theirs].assign(user=sample.user, date=(d[theirs] + shift).astype(sd["date"].dtype))
        changes["subday"] = pd.concat([sd[~mine], moved], ignore_index=True)
    return dataclasses.replace(tables, **changes)
