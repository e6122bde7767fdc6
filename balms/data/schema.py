"""The shapes every loader produces and every agent consumes.

A loader turns one dataset's raw layout into a `DatasetTables`: a daily table (one row per user and
day, one column per channel), an optional sub-day table (one row per user, day and slot), the labels,
the same-day self-reported context, user profiles and a channel catalogue. The sample builder turns
tables into `Sample`s; `window_of` cuts the look-back window an agent is allowed to see.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Literal

import pandas as pd

Device = Literal["wearable", "phone", "self_report"]
Source = Literal["real", "synthetic"]


class DataError(ValueError):
    """Malformed raw input. The message names the file, the row or field, and what was expected."""

    def __init__(self, path, problem: str, *, field: str | None = None, row: int | str | None = None):
        where = str(path)
        if row is not None:
            where += f", row {row}"
        if field is not None:
            where += f", field '{field}'"
        super().__init__(f"{where}: {problem}")
        self.path, self.field, self.row, self.problem = path, field, row, problem


@dataclass(frozen=True)
class Channel:
    """One sensing (or context) channel: what prompts render and ablations select by."""

    name: str  # column name in the daily/sub-day table, e.g. "steps"
    label: str  # human-readable, e.g. "Steps"
    unit: str  # e.g. "steps", "bpm", "minutes", "" for unitless
    device: Device
    description: str = ""
    decimals: int = 1  # how many decimals the canonical text shows
    # "" = one definition for every prompt style; "paper" / "corrected" = this column is one of two recipes
    # for the same quantity (PMData sleep minutes), so a style selects exactly one of them, never both.
    recipe: str = ""


@dataclass(frozen=True)
class Target:
    """The label being predicted, on the dataset's native integer scale."""

    name: str  # e.g. "stress"
    label: str  # e.g. "stress level"
    scale_min: int
    scale_max: int
    description: str = ""  # e.g. "1 = very low stress, 5 = very high stress"
    higher_is: str = ""  # e.g. "more stressed"

    def in_range(self, value) -> bool:
        return value is not None and self.scale_min <= value <= self.scale_max


@dataclass
class DatasetTables:
    """Everything a dataset contributes, after loading, before sampling.

    daily:    MultiIndex (user: str, date: datetime.date normalised as pandas Timestamp), one float
              column per channel in `channels`; NaN = missing.
    subday:   columns user, date, slot (str, e.g. "08:30" or "morning"), slot_index (int, order within
              day) and one float column per channel in `subday_channels`; or None.
    labels:   columns user, date, label (float as read; the sample builder filters/rounds and counts).
    context:  MultiIndex (user, date), same-day self-reports usable as prompt context (e.g. PMData mood),
              described by `context_channels`; may be empty.
    profiles: index user; columns among age, gender, height_cm, max_hr (missing allowed).
    dropped:  loader-level filter counts, {rule: n}; never drop silently.
    """

    name: str
    source: Source
    target: Target
    daily: pd.DataFrame
    labels: pd.DataFrame
    channels: list[Channel]
    profiles: pd.DataFrame = field(default_factory=pd.DataFrame)
    context: pd.DataFrame = field(default_factory=pd.DataFrame)
    context_channels: list[Channel] = field(default_factory=list)
    subday: pd.DataFrame | None = None
    subday_channels: list[Channel] = field(default_factory=list)
    subday_unit: str = ""  # e.g. "half-hour slot", "time-of-day segment"
    dropped: dict[str, int] = field(default_factory=dict)
    raw_dir: str = ""
    notes: list[str] = field(default_factory=list)
    # Full feature catalogue where a dataset has more features than daily columns (GLOBEM): one row
    # per raw column with cohort, column, file, sensor, feature, variant, segment, device.
    catalogue: pd.DataFrame | None = None
    _fingerprint: str | None = field(default=None, init=False, repr=False, compare=False)

    def fingerprint(self) -> str:
        """Content hash of these tables, 16 hex digits (`balms.data.fingerprint.tables_fingerprint`),
        computed once. Tables are not modified after loading; derive changed ones with
        `dataclasses.replace`, which starts with an empty cache."""
        from balms.data.fingerprint import tables_fingerprint

        return tables_fingerprint(self)

    def channel(self, name: str) -> Channel:
        for c in (*self.channels, *self.context_channels, *self.subday_channels):
            if c.name == name:
                return c
        raise KeyError(f"{self.name}: no channel named {name!r}")

    @property
    def users(self) -> list[str]:
        return sorted(self.daily.index.get_level_values("user").unique())


@dataclass(frozen=True)
class Sample:
    """One prediction problem: a user, a target day, a look-back window and the gold label.

    The window is the `lookback` days `window_start`..`window_end` inclusive. By default it ends the
    day BEFORE the target day (nothing from the target day, which may postdate the self-report);
    `include_target_day=True` in the builder ends it on the target day instead.
    """

    dataset: str
    user: str
    target_date: dt.date
    label: int
    lookback: int
    window_start: dt.date
    window_end: dt.date
    source: Source = "real"

    @property
    def sample_id(self) -> str:
        return f"{self.dataset}/{self.user}/{self.target_date.isoformat()}/L{self.lookback}"

    @property
    def window_dates(self) -> list[dt.date]:
        n = (self.window_end - self.window_start).days + 1
        return [self.window_start + dt.timedelta(days=i) for i in range(n)]


@dataclass
class Window:
    """What an agent may see for one sample: never a label, never data after `sample.window_end`
    (except the explicit same-day `context`, when enabled)."""

    sample: Sample
    target: Target
    daily: pd.DataFrame  # index = window dates (Timestamp), columns = channel names, NaN = missing
    channels: list[Channel]
    profile: dict = field(default_factory=dict)
    context: dict = field(default_factory=dict)  # channel name -> value, same-day self-report
    context_channels: list[Channel] = field(default_factory=list)
    subday: pd.DataFrame | None = None  # rows of the window dates only
    subday_channels: list[Channel] = field(default_factory=list)
    subday_unit: str = ""
    # What of the window the agent's prompt actually held when it was not the plain look-back window
    # (balms.data.channels.days_view / record_window): {} = the window as is; {"kind": "days", ...} = only
    # some days (RAG/RAPTOR: retrieved days or records + the query day); {"kind": "frames", ...} = PHIA's
    # DataFrames over the full record. The renderers say so in the window's header.
    shown: dict = field(default_factory=dict)
