"""Which channels a prompt shows: the channel option an agent is configured with, resolved against a
dataset's tables, and the look-back window restricted to it.

It lives in the data layer so that agents (which pick channels) and judges/grounding (which rebuild the
window a record's agent saw, from the record's options) share one resolution and never import each other.
The option round-trips: `channels_option` writes it into `PredictionRecord.options["channels"]`,
`option_channels` reads it back.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pandas as pd

from balms.data.memo import TablesMemo
from balms.data.samples import subday_rows_of, window_of
from balms.data.schema import Channel, DatasetTables, Sample, Window

DEVICES = ("wearable", "phone", "self_report")

# The paper's prompt channels where it names them (PMData: the Health-LLM recipe's four channels);
# other datasets use every daily channel of their tables (GLOBEM's loader already keeps a compact set).
DEFAULT_PROMPT_CHANNELS = {"pmdata": ["steps", "calories", "resting_hr", "sleep_minutes"]}
# Same-day context the paper puts in the prompt (PMData: mood "N out of 5"); others: all context channels.
DEFAULT_CONTEXT_CHANNELS = {"pmdata": ["mood"]}


def resolve_channels(tables: DatasetTables, channels) -> list[Channel] | None:
    """Channel selection option -> Channel objects (None = every daily channel of the tables).

    `channels` may be None (the dataset's default prompt set, DEFAULT_PROMPT_CHANNELS, else all),
    "all", a device name ("wearable" for the GLOBEM Fitbit-only ablation, "phone"), or a list of
    channel names (unknown names are an error naming the dataset).
    """
    if channels is None or channels == "default":  # "default": how records and specs write None (channels_option)
        default = DEFAULT_PROMPT_CHANNELS.get(tables.name)
        have = {c.name for c in tables.channels}
        if default and all(n in have for n in default):
            return [tables.channel(n) for n in default]
        return None
    if channels == "all":
        return None
    if isinstance(channels, str):
        if channels in DEVICES:
            picked = [c for c in tables.channels if c.device == channels]
            if not picked:
                raise ValueError(f"{tables.name}: no channel with device {channels!r}")
            return picked
        channels = [channels]
    return [tables.channel(n) for n in channels]


def select_subday_channels(tables: DatasetTables, chans: list[Channel] | None) -> list[Channel]:
    """Sub-day channels matching the daily selection: those of the selected devices (so the GLOBEM
    Fitbit-only ablation drops phone segments too); all when nothing is selected."""
    if chans is None:
        return list(tables.subday_channels)
    devices = {c.device for c in chans}
    return [c for c in tables.subday_channels if c.device in devices]


def channels_option(channels) -> Any:
    """The JSON-able form of the channel option, for PredictionRecord.options ("default" for None)."""
    if channels is None:
        return "default"
    if isinstance(channels, str):
        return channels
    return list(channels)


def option_channels(option) -> Any:
    """Inverse of `channels_option`: a record's `options["channels"]` -> the option `resolve_channels`
    takes (absent or "default" -> None)."""
    return None if option in (None, "default") else option


def restrict_context(window: Window, tables: DatasetTables, context) -> Window:
    """Keep only the context channels the prompt uses: `context` True = the dataset default
    (DEFAULT_CONTEXT_CHANNELS, else all), False = none, a list of names = those."""
    if context is False or context is None:
        window.context, window.context_channels = {}, []
        return window
    names = DEFAULT_CONTEXT_CHANNELS.get(tables.name) if context is True else list(context)
    if names is not None:
        window.context_channels = [c for c in window.context_channels if c.name in names]
        window.context = {k: v for k, v in window.context.items() if k in names}
    return window


_WINDOWS = TablesMemo(maxsize=2048)  # every system and backbone of a grid asks for the same windows


def get_window(tables: DatasetTables, sample: Sample, *, context,
               channels: list[Channel] | None) -> Window:
    """The look-back window a prompt shows (never a label, nothing after window_end): the resolved
    `channels` (None = all daily channels) and the context option applied. Shared (balms.data.memo): read only."""
    names = None if channels is None else [c.name for c in channels]

    def make() -> Window:
        return restrict_context(window_of(tables, sample, context=bool(context), channels=names), tables, context)

    key = (sample, repr(context), None if names is None else tuple(names))
    return _WINDOWS.get(tables, key, make)


# ------------------------------------------------------------------------------------------ prompt styles --
# Prompt styles of the prompt-based agents (Health-LLM, RAG, RAPTOR) decide which channels a prompt shows:
# "paper" (default) takes the paper's PMData recipe (sleep = `sleep_minutes_paper`, the Health-LLM recipe with
# its duplicate-log quirk); "corrected" the corrected one (sleep = `sleep_minutes`, the night's main sleep).
# A style never swaps a channel the caller named: an explicit list is used as given. Only the default set,
# "all" and device selections follow the style, by dropping the other recipe's columns (`Channel.recipe`), so
# a prompt never shows both definitions of one quantity. The judge rebuilds windows with the same rule.
STYLES = ("paper", "corrected")
DEFAULT_STYLE = "paper"

# The paper's prompt channels per dataset (PMData: its four Health-LLM channels with the paper's sleep recipe).
# The corrected style uses DEFAULT_PROMPT_CHANNELS.
PAPER_PROMPT_CHANNELS = {"pmdata": ["steps", "calories", "resting_hr", "sleep_minutes_paper"]}


def check_style(style: str) -> str:
    if style not in STYLES:
        raise ValueError(f"style must be one of {STYLES}, got {style!r}")
    return style


def _explicit(channels) -> bool:
    if channels is None or channels in ("all", "default"):
        return False
    return not (isinstance(channels, str) and channels in DEVICES)


def prompt_channels(tables: DatasetTables, channels, style: str) -> list[Channel] | None:
    """The channels a prompt of `style` shows for the `channels` option (None = every daily channel)."""
    check_style(style)
    if channels is None and style == "paper":
        default = PAPER_PROMPT_CHANNELS.get(tables.name)
        have = {c.name for c in tables.channels}
        if default:
            missing = [n for n in default if n not in have]
            if missing:
                raise ValueError(f"{tables.name}: the paper style needs channel(s) {missing}, which these tables "
                                 f"lack (load them with the current loader), or use style='corrected'")
            return [tables.channel(n) for n in default]
    chans = resolve_channels(tables, channels)
    if _explicit(channels):
        return chans
    other = "corrected" if style == "paper" else "paper"
    pool = list(tables.channels) if chans is None else chans
    kept = [c for c in pool if c.recipe != other]
    return chans if len(kept) == len(pool) else kept


def recipe_of(chans: list[Channel] | None, tables: DatasetTables) -> str:
    """Which recipe the shown channels follow: "paper", "corrected", "both" (an explicit mix) or "" (no
    channel of the dataset has two recipes)."""
    pool = list(tables.channels) if chans is None else chans
    got = sorted({c.recipe for c in pool if c.recipe})
    return {0: "", 1: got[0] if got else ""}.get(len(got), "both")


# ------------------------------------------------------------------------------------------ agents' views --
# What an agent's prompt held, when it is not the plain look-back window. Agents build their view with these
# functions and record the inputs in the record's options; the judge rebuilds the view from those options with
# the same functions (balms.judges.llm_judge.window_for_record), so both sides see one thing.


# PHIA's DataFrames, built here so the agent and the judge (which renders the frames the agent had) share them
DAILY_FRAME, SUBDAY_FRAME = "daily_df", "subday_df"  # the paper's trace names


FRAME_SPANS = ("record", "lookback")  # PHIA's frames: the user's record up to window_end, or the look-back only
SLEEP_RECIPES = ("corrected", "paper")  # PMData sleep in PHIA's frames


def user_frames(tables: DatasetTables, window: Window, chans: list[Channel] | None,
                span: str = "record") -> dict[str, pd.DataFrame]:
    """The DataFrames PHIA sees: sensing channels only, dates <= window_end (and >= window_start with
    span="lookback"), no labels, no context."""
    if span not in FRAME_SPANS:
        raise ValueError(f"frame_span must be one of {FRAME_SPANS}, got {span!r}")
    s = window.sample
    end = pd.Timestamp(s.window_end)
    start = pd.Timestamp(s.window_start) if span == "lookback" else pd.Timestamp.min
    if s.user not in tables.daily.index.get_level_values("user"):
        raise ValueError(f"{tables.name}: user {s.user!r} has no daily rows")
    daily = tables.daily.xs(s.user, level="user").copy()
    daily.index = pd.DatetimeIndex(daily.index).normalize()
    daily = daily[(daily.index >= start) & (daily.index <= end)].sort_index()
    cols = [c.name for c in window.channels if c.name in daily.columns]
    daily = daily[cols]
    daily.index.name = "date"
    frames = {DAILY_FRAME: daily.reset_index()}
    sd = tables.subday
    if sd is not None and len(sd):
        sd = subday_rows_of(tables, s.user).copy()
        sd["date"] = pd.to_datetime(sd["date"]).dt.normalize()
        sd = sd[(sd["date"] >= start) & (sd["date"] <= end)]
        sub_cols = [c.name for c in select_subday_channels(tables, chans) if c.name in sd.columns]
        if len(sd) and sub_cols:
            frames[SUBDAY_FRAME] = (sd.sort_values(["date", "slot_index"])[["date", "slot", *sub_cols]]
                                    .rename(columns={"slot": "segment"}).reset_index(drop=True))
    return frames


def frames_option(frames: dict[str, pd.DataFrame], subday_unit: str = "") -> dict:
    """Per record: each frame's name, first and last date, rows and columns, so the judge can rebuild the
    span PHIA analysed (`balms.judges.llm_judge.window_for_record`)."""
    out = {}
    for name, df in frames.items():
        dates = pd.to_datetime(df["date"]) if len(df) else pd.Series([], dtype="datetime64[ns]")
        out[name] = {"start": dates.min().date().isoformat() if len(df) else None,
                     "end": dates.max().date().isoformat() if len(df) else None,
                     "rows": int(len(df)), "columns": [str(c) for c in df.columns],
                     **({"unit": subday_unit or "sub-day slot"} if name == SUBDAY_FRAME else {})}
    return out


def _user_daily(tables: DatasetTables, sample: Sample):
    if sample.user not in tables.daily.index.get_level_values("user"):
        raise ValueError(f"{tables.name}: user {sample.user!r} has no daily rows")
    ud = tables.daily.xs(sample.user, level="user").copy()
    ud.index = pd.DatetimeIndex(ud.index).normalize()
    return ud


def days_view(tables: DatasetTables, window: Window, dates, *, query_date, items=None, ids=None) -> Window:
    """The window restricted to the days a memory agent's prompt held: `dates` (retrieved days, or the days
    of retrieved records) plus `query_date`, oldest first. `items`: retrieved texts shown verbatim (RAPTOR
    leaves and day summaries), which the renderers list; `ids` their node ids. Never a day after window_end."""
    s = window.sample
    idx = pd.DatetimeIndex(sorted({pd.Timestamp(d).normalize() for d in [*dates, query_date]}))
    late = [d.date().isoformat() for d in idx if d > pd.Timestamp(s.window_end)]
    if late:
        raise ValueError(f"{s.sample_id}: view dates {late} are after the window end {s.window_end}")
    daily = _user_daily(tables, s).reindex(index=idx, columns=[c.name for c in window.channels]).astype(float)
    daily.index.name = "date"
    shown = {"kind": "days", "dates": [d.date().isoformat() for d in idx],
             "query_date": pd.Timestamp(query_date).date().isoformat()}
    if items is not None:
        shown["items"] = list(items)
        shown["ids"] = list(ids or [])
    return dataclasses.replace(window, daily=daily, subday=None, shown=shown)


def record_window(tables: DatasetTables, window: Window, start, *, frames: dict | None = None,
                  subday: pd.DataFrame | None = None) -> Window:
    """PHIA's view: the user's full record from `start` (the daily frame's first day) to window_end, one
    row per calendar day (NaN where the record has none), the window's channels. `frames`: the record's
    frame description (names, spans, columns), which the renderers name in the header; `subday`: the
    `subday_df` frame itself (its rows of the look-back window are rendered)."""
    s = window.sample
    idx = pd.date_range(pd.Timestamp(start).normalize(), pd.Timestamp(s.window_end), freq="D")
    if not len(idx):
        raise ValueError(f"{s.sample_id}: record start {start} is after the window end {s.window_end}")
    daily = _user_daily(tables, s).reindex(index=idx, columns=[c.name for c in window.channels]).astype(float)
    daily.index.name = "date"
    return dataclasses.replace(window, daily=daily, subday=subday, shown={"kind": "frames", "frames": frames or {}})


def agent_view(tables: DatasetTables, window: Window, options: dict) -> Window:
    """The view an agent's record options describe, over its look-back `window`: PHIA (`frames`) -> the
    full-record span of its daily frame; RAPTOR (`retrieved_texts`) -> the retrieved records verbatim plus
    the query day (the whole window with `context_window`); RAG (`retrieved_dates`) -> the retrieved days
    plus the query day (plus the window with `context_window`); anything else (Health-LLM, records written
    before views were recorded) -> the window as is."""
    frames = options.get("frames")
    if frames:
        daily = next((f for n, f in frames.items() if "unit" not in f), None)
        if daily is None or not daily.get("start"):
            raise ValueError(f"{window.sample.sample_id}: options.frames has no daily frame span: {frames}")
        sub = frames.get(SUBDAY_FRAME)
        had = user_frames(tables, window, window.channels).get(SUBDAY_FRAME) if sub else None
        if had is not None:  # the sub-day frame over the span the record says PHIA was given
            had = had[(had["date"] >= pd.Timestamp(sub["start"])) & (had["date"] <= pd.Timestamp(sub["end"]))]
        return record_window(tables, window, daily["start"], frames=frames, subday=had)
    if "retrieved_texts" not in options and "retrieved_dates" not in options:
        return window
    if "query_date" not in options:
        raise ValueError(f"{window.sample.sample_id}: retrieval options without a query_date")
    whole = [d.date().isoformat() for d in window.daily.index] if options.get("context_window") else []
    if "retrieved_texts" in options:
        return days_view(tables, window, whole, query_date=options["query_date"],
                         items=options["retrieved_texts"], ids=[r.get("id") for r in options.get("retrieved", [])])
    dates = sorted({*options["retrieved_dates"], *whole})
    if dates == whole:  # the prompt showed the whole window (look-back memory, context_window): the plain window
        return window
    return days_view(tables, window, dates, query_date=options["query_date"])
