"""A system from another package: the agent sees only each channel's weekly means over the look-back window.

Registered through the `balms.systems` entry point (pyproject.toml), so balms lists it, validates it in profiles,
runs it in every notebook that runs `systems`, prices it in `balms plan` and shows it as "Weekly means (ours)".
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from balms.agents.common import Episode, build_record, parse_for, per_sample_seed
from balms.agents.registry import SystemSpec
from balms.data.channels import get_window, resolve_channels
from balms.models.base import GenParams, Message

PROMPT_VERSION = "weekly-means-1"


def weekly_means(daily: pd.DataFrame) -> pd.DataFrame:
    """Each channel's mean per calendar week (Monday start) of the window; missing days do not count."""
    by_week = daily.groupby(pd.DatetimeIndex(daily.index).to_period("W-SUN"))
    return by_week.mean(numeric_only=True)


@dataclass
class WeeklyMeansAgent:
    cot: bool = False
    max_tokens: int = 16
    temperature: float = 0.0
    seed: int = 0
    name: str = field(default="weekly_means", init=False)

    def options(self) -> dict:
        return {"max_tokens": self.max_tokens, "temperature": self.temperature, "seed": self.seed,
                "prompt_version": PROMPT_VERSION}

    def first_prompt(self, sample, tables) -> list[Message]:
        window = get_window(tables, sample, context=False, channels=resolve_channels(tables, None))
        weeks = weekly_means(window.daily)
        lines = []
        for ch in window.channels:
            if ch.name in weeks:
                vals = ", ".join(f"week of {w.start_time.date()}: {v:.{ch.decimals}f}" if pd.notna(v) else
                                 f"week of {w.start_time.date()}: missing" for w, v in weeks[ch.name].items())
                lines.append(f"- {ch.label} ({ch.unit or 'unitless'}): {vals}")
        t = tables.target
        ask = ("Think step by step, then end with 'Answer: <integer>'." if self.cot
               else "Reply with 'Answer: <integer>' only.")
        user = (f"Weekly means of a person's sensing over the {sample.lookback} days before the day in question:\n"
                + "\n".join(lines) + f"\n\nPredict their {t.label} on the next day, an integer from "
                f"{t.scale_min} to {t.scale_max} ({t.description}). {ask}")
        return [Message("system", "You are a careful health-data analyst."), Message("user", user)]

    def predict(self, sample, tables, backend):
        episode = Episode(backend)
        params = GenParams(temperature=self.temperature, max_tokens=self.max_tokens,
                           seed=per_sample_seed(sample, self.seed))
        comp = episode.call(self.first_prompt(sample, tables), params)
        parsed = parse_for(tables, comp.text)
        return build_record(system=self.name, cot=self.cot, sample=sample, tables=tables, backend=backend,
                            episode=episode, options=self.options(), raw_answer=comp.text, parsed=parsed)


SYSTEM = SystemSpec("weekly_means", WeeklyMeansAgent, "Weekly means",
                    "one call; the prompt holds each channel's weekly means of the look-back window", paper=False,
                    batchable=True)
