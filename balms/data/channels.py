"""Which channels a prompt shows: the channel option an agent is configured with, resolved against a
dataset's tables, and the look-back window restricted to it.

It lives in the data layer so that agents (which pick channels) and judges/grounding (which rebuild the
window a record's agent saw, from the record's options) share one resolution and never import each other.
The option round-trips: `channels_option` writes it into `PredictionRecord.options["channels"]`,
`option_channels` reads it back.
"""

from __future__ import annotations

from typing import Any

from balms.data.samples import window_of
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
    if channels is None:
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


def get_window(tables: DatasetTables, sample: Sample, *, context,
               channels: list[Channel] | None) -> Window:
    """The look-back window a prompt shows (never a label, nothing after window_end): the resolved
    `channels` (None = all daily channels) and the context option applied."""
    names = None if channels is None else [c.name for c in channels]
    window = window_of(tables, sample, context=bool(context), channels=names)
    return restrict_context(window, tables, context)
