"""Prompt styles of the prompt-based agents (Health-LLM, RAG, RAPTOR) and the channels each style uses.

- "paper" (default): the paper's Appendix D template and the paper's PMData channel recipe
  (sleep = `sleep_minutes_paper`, the Health-LLM recipe with its duplicate-log quirk).
- "corrected": our prompts (true scale, dates, our system message) and the corrected recipe
  (sleep = `sleep_minutes`, minutes asleep of the night's main sleep).

A style never swaps a channel the caller named: an explicit channel list is used as given. Only the
default set, "all" and device selections follow the style, by dropping the columns of the other recipe
(`Channel.recipe`), so a prompt never shows both definitions of one quantity.
"""

from __future__ import annotations

from balms.data.schema import Channel, DatasetTables

STYLES = ("paper", "corrected")
DEFAULT_STYLE = "paper"

# The paper's prompt channels per dataset (PMData: its four Health-LLM channels with the paper's sleep recipe).
# The corrected style uses balms.agents.common.DEFAULT_PROMPT_CHANNELS.
PAPER_PROMPT_CHANNELS = {"pmdata": ["steps", "calories", "resting_hr", "sleep_minutes_paper"]}


def check_style(style: str) -> str:
    if style not in STYLES:
        raise ValueError(f"style must be one of {STYLES}, got {style!r}")
    return style


def _explicit(channels) -> bool:
    from balms.agents.common import DEVICES

    if channels is None or channels == "all":
        return False
    return not (isinstance(channels, str) and channels in DEVICES)


def prompt_channels(tables: DatasetTables, channels, style: str) -> list[Channel] | None:
    """The channels a prompt of `style` shows for the `channels` option (None = every daily channel)."""
    from balms.agents.common import resolve_channels

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
