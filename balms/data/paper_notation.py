"""The paper's notation for a window (its Appendix D template): one `[Name]: [v1, ..., vN] unit` line per
channel, oldest day first, NaN for missing, the paper's number formats (PMData resting HR to 4 decimals with
trailing zeros dropped; GLOBEM's case study at fixed decimals), the same-day self-report line, single days in
bracket notation, the user-profile block. `balms.data.agent_input` assembles a prompt's data lines from these, for
the agents' prompts and for the judge alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from balms.data.schema import Channel, Window


@dataclass(frozen=True)
class PaperChannel:
    """How the paper prints one channel: the name in brackets, the unit after the array, the number format.
    `fixed`: always `decimals` digits (GLOBEM case study: ``1.80``, ``402.0``); otherwise rounded to `decimals` with
    trailing zeros dropped (PMData resting HR: ``53.222``, ``53.7411``)."""

    name: str
    unit: str
    decimals: int
    fixed: bool = False


PAPER_CHANNELS: dict[str, dict[str, PaperChannel]] = {
    "pmdata": {
        "steps": PaperChannel("Steps", "steps", 0),
        "calories": PaperChannel("Burned Calories", "calories", 0),
        "resting_hr": PaperChannel("Resting Heart Rate", "beats/min", 4),
        "sleep_minutes_paper": PaperChannel("SleepMinutes", "minutes", 0),
        # the corrected recipe named explicitly under the paper template prints under the same name
        "sleep_minutes": PaperChannel("SleepMinutes", "minutes", 0),
    },
    "globem": {
        "screen_unlock_duration": PaperChannel("Screen Unlock Duration", "s", 1, fixed=True),
    },
}


def paper_channel(dataset: str, ch: Channel) -> PaperChannel:
    spec = PAPER_CHANNELS.get(dataset, {}).get(ch.name)
    if spec is not None:
        return spec
    # GLOBEM's case study prints fixed decimals; elsewhere the PMData rounding rule.
    return PaperChannel(ch.label, ch.unit, ch.decimals, fixed=dataset == "globem")


def format_paper(value, spec: PaperChannel) -> str:
    if value is None or pd.isna(value):
        return "NaN"
    v = float(value)
    if math.isinf(v):
        return str(v)
    if spec.decimals <= 0:
        return str(int(round(v)))
    text = f"{v:.{spec.decimals}f}"
    if spec.fixed:
        return text
    return text.rstrip("0").rstrip(".")


def _unit(spec: PaperChannel) -> str:
    return f" {spec.unit}" if spec.unit else ""


def context_lines(window: Window) -> list[str]:
    """The same-day self-report lines (`[Mood]: 3 out of 5`); a missing value is NaN, as in the arrays."""
    out = []
    for ch in window.context_channels:
        v = window.context.get(ch.name)
        out.append(f"[{ch.label}]: {format_paper(v, PaperChannel(ch.label, ch.unit, 0))}"
                   f"{(' ' + ch.unit) if ch.unit else ''}")
    return out


def channel_line(window: Window, ch: Channel) -> str:
    spec = paper_channel(window.sample.dataset, ch)
    vals = window.daily[ch.name].to_numpy() if ch.name in window.daily.columns else [float("nan")] * len(window.daily)
    return f"[{spec.name}]: [{', '.join(format_paper(v, spec) for v in vals)}]{_unit(spec)}"


def sensor_lines(window: Window, chans: list[Channel]) -> list[str]:
    return [channel_line(window, c) for c in chans]


def day_values(window: Window, ts, chans: list[Channel], daily: pd.DataFrame | None = None) -> str:
    """One day in the template's bracket notation, no label: the text RAG embeds in paper style."""
    daily = window.daily if daily is None else daily
    ts = pd.Timestamp(ts)
    row = daily.loc[ts] if ts in daily.index else None
    parts = []
    for c in chans:
        spec = paper_channel(window.sample.dataset, c)
        v = row[c.name] if row is not None and c.name in row.index else float("nan")
        parts.append(f"[{spec.name}]: {format_paper(v, spec)}{_unit(spec)}")
    return ", ".join(parts)


def day_label(window: Window, ts) -> str:
    k = (pd.Timestamp(ts).normalize() - pd.Timestamp(window.sample.window_start)).days + 1
    return f"Day {k}"


def profile_block(profile: dict) -> list[str]:
    """The template's "User profile." block; a field the dataset lacks is NaN, no block when it has none."""
    def val(key):
        v = profile.get(key)
        if v is None or (not isinstance(v, str) and pd.isna(v)):
            return None
        return v

    fields = {k: val(k) for k in ("age", "gender", "height_cm", "max_hr")}
    if all(v is None for v in fields.values()):
        return []

    def num(v):
        return "NaN" if v is None else str(int(round(float(v))))

    gender = fields["gender"] if fields["gender"] is not None else "NaN"
    return ["User profile.",
            f"The user is a {num(fields['age'])} years old {gender} with {num(fields['height_cm'])} height "
            f"with a measured maximum heart rate of {num(fields['max_hr'])} bpm."]
