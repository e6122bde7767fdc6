"""The ONE canonical text rendering of a look-back window.

Health-LLM prompts, RAG/RAPTOR memories, the LLM judge and the grounding checker all call these
functions, so a number the judge or checker looks up is exactly the number the agent was shown.
Day numbering: day 1 is the oldest day of the window, day L the most recent.
"""

from __future__ import annotations

import math

import pandas as pd

from balms.data.schema import Channel, Window


def format_value(value, decimals: int = 1) -> str:
    """A number as shown to models: NaN for missing, integers without decimals."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or pd.isna(value):
        return "NaN"
    v = float(value)
    if decimals <= 0 or v.is_integer():
        return str(int(round(v)))
    return f"{v:.{decimals}f}"


def channel_caption(ch: Channel) -> str:
    return f"{ch.label} ({ch.unit})" if ch.unit else ch.label


def channel_values(window: Window, ch: Channel) -> list:
    if ch.name not in window.daily.columns:
        return [float("nan")] * len(window.daily.index)
    return list(window.daily[ch.name].to_numpy())


def render_channel_line(window: Window, ch: Channel) -> str:
    vals = ", ".join(format_value(v, ch.decimals) for v in channel_values(window, ch))
    return f"- {channel_caption(ch)}: [{vals}]"


def day_number(window: Window, date) -> int:
    """A date's day number on the window's numbering (day 1 = window_start; <= 0 before the window)."""
    return (pd.Timestamp(date).normalize() - pd.Timestamp(window.sample.window_start)).days + 1


def view_head(window: Window) -> str | None:
    """The header of a window that is an agent's partial or extended view (`Window.shown`), saying what the
    agent's prompt held; None for the plain look-back window."""
    shown = window.shown or {}
    kind = shown.get("kind")
    if not kind:
        return None
    if kind == "days":
        q = shown["query_date"]
        days = ", ".join(f"day {day_number(window, d)} = {d}" + (" (query day)" if d == q else "")
                         for d in shown["dates"])
        n = len(shown["dates"])
        head = (f"The agent's prompt held only {'these' if n != 1 else 'this'} {n} day{'s' if n != 1 else ''} "
                "of the user's record "
                f"(day numbering: day 1 = {window.sample.window_start.isoformat()}), oldest first: {days}. "
                "Each array below lists the values of these days in this order. NaN = missing.")
        if n == 1:
            head = head.replace("oldest first: ", "").replace("of these days in this order", "of that day")
        if "items" in shown:
            items = [f"- {t}" for t in shown["items"]] or ["- (none)"]
            head = "\n".join([head.replace("held only", "held the daily values of only"),
                              "It also held these retrieved records, verbatim:", *items])
        return head
    if kind == "frames":
        idx = window.daily.index
        first, last = idx[0].date().isoformat(), idx[-1].date().isoformat()
        head = (f"The agent analysed its full record as DataFrames: {len(idx)} days {first} to {last} "
                f"(day 1 = {first}, the oldest; day {len(idx)} = {last}, the most recent; the look-back window "
                f"is the last {window.sample.lookback} days). NaN = missing.")
        sub = {k: v for k, v in (shown.get("frames") or {}).items() if "unit" in v}
        for name, f in sub.items():
            listed = ("its rows of the look-back window are listed after the arrays" if window.subday is not None
                      else "not listed here")
            head += (f" It also had `{name}` ({f['rows']} rows, one per {f['unit']}, {f['start']} to {f['end']}; "
                     "columns " + ", ".join(f["columns"]) + f"); {listed}.")
        return head
    raise ValueError(f"unknown window view kind {kind!r}")


def subday_rows(window: Window) -> list[str]:
    """A PHIA view's `subday_df` rows of the look-back window (`Window.subday`, columns date, segment and the
    sub-day channels), one line per row in the frame's order; empty for any other window."""
    sd = window.subday
    if (window.shown or {}).get("kind") != "frames" or sd is None or not len(sd):
        return []
    s = window.sample
    rows = sd[(sd["date"] >= pd.Timestamp(s.window_start)) & (sd["date"] <= pd.Timestamp(s.window_end))]
    known = {c.name: c for c in window.subday_channels}
    cols = [c for c in sd.columns if c not in ("date", "segment")]
    out = [f"`subday_df` rows of the look-back window ({s.window_start.isoformat()} to {s.window_end.isoformat()}): "
           f"{len(rows)} of its {len(sd)} rows. NaN = missing.",
           "date, segment, " + ", ".join(channel_caption(known[c]) if c in known else c for c in cols)]
    for r in rows.to_dict("records"):
        vals = [format_value(r[c], known[c].decimals if c in known else 1) for c in cols]
        out.append(f"{pd.Timestamp(r['date']).date().isoformat()}, {r['segment']}, " + ", ".join(vals))
    return out


def render_window(window: Window, channels: list[Channel] | None = None) -> str:
    """Per-channel arrays over the window, oldest day first; the canonical window text. A PHIA view also lists
    its sub-day frame's rows of the look-back window."""
    chans = channels if channels is not None else window.channels
    s = window.sample
    view = view_head(window)
    if view is not None:
        return "\n".join([view, *(render_channel_line(window, c) for c in chans), *subday_rows(window)])
    head = (
        f"Daily data for the {len(window.daily.index)} days {s.window_start.isoformat()} to "
        f"{s.window_end.isoformat()} (day 1 = {s.window_start.isoformat()}, the oldest; "
        f"day {len(window.daily.index)} = {s.window_end.isoformat()}, the most recent). NaN = missing."
    )
    return "\n".join([head, *(render_channel_line(window, c) for c in chans)])


def render_profile(profile: dict) -> str:
    """The user-profile line; only the fields that are known."""
    parts = []
    if profile.get("age") is not None and not pd.isna(profile.get("age")):
        parts.append(f"age {format_value(profile['age'], 0)}")
    if profile.get("gender"):
        parts.append(f"gender {profile['gender']}")
    if profile.get("height_cm") is not None and not pd.isna(profile.get("height_cm")):
        parts.append(f"height {format_value(profile['height_cm'], 0)} cm")
    if profile.get("max_hr") is not None and not pd.isna(profile.get("max_hr")):
        parts.append(f"maximum heart rate {format_value(profile['max_hr'], 0)} bpm")
    return ("User profile: " + ", ".join(parts) + ".") if parts else "User profile: not available."


def render_context(window: Window) -> str:
    """Same-day self-reported context (e.g. PMData mood "3 out of 5"), empty when disabled/absent."""
    lines = []
    for ch in window.context_channels:
        v = window.context.get(ch.name)
        if v is None or pd.isna(v):
            continue
        unit = f" {ch.unit}" if ch.unit else ""  # context units read like "out of 5"
        lines.append(f"On the target day the user reported {ch.label.lower()} {format_value(v, 0)}{unit}.")
    return " ".join(lines)


def render_day(window: Window, date, channels: list[Channel] | None = None) -> str:
    """One day as a line of text (the unit RAG embeds and retrieves)."""
    chans = channels if channels is not None else window.channels
    ts = pd.Timestamp(date)
    row = window.daily.loc[ts] if ts in window.daily.index else None
    vals = []
    for c in chans:
        v = row[c.name] if row is not None and c.name in row.index else float("nan")
        vals.append(f"{c.label} {format_value(v, c.decimals)}{(' ' + c.unit) if c.unit else ''}")
    return f"{ts.date().isoformat()} ({ts.day_name()}): " + "; ".join(vals)
