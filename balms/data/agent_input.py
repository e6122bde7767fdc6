"""What an agent's prompt shows of the data: the user profile, the sensor lines (a window's arrays, retrieved days
or records and the query day, or PHIA's DataFrames) and the same-day self-report, rendered ONCE, here.

The agents put `input_lines` into their prompts, between the task and the question; the judge reads the very same
lines as the paper's judge input (1), "the agent's input window rendered in its canonical text form", rebuilt from
the record (`balms.judges.llm_judge.judge_window_text`). So the judge sees what the agent saw: `[Mood]` and the
profile included, RAG's and RAPTOR's retrieved items in their prompt order, and for PHIA (whose prompt holds no
values) the frames it analysed: `daily_df` as per-channel arrays over its span, `subday_df`'s rows of the look-back
window.

`view` is an agent's view of its look-back window (`balms.data.channels.agent_view`); `options` are the record's
options (style, context_window, retrieved_dates / retrieved_texts and query_date, frames).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import pandas as pd

from balms.data import paper_notation as pn
from balms.data import render
from balms.data.schema import Window

SENSOR_HEADER = "Sensor signals (look-back window)."
PAPER_QUERY_HEADER = "Sensor signals (query day)."
PAPER_RAG_HEADER = "Sensor signals (retrieved days)."
PAPER_RAPTOR_HEADER = "Retrieved records (sub-day records or day summaries)."
RAG_KIND, RAPTOR_KIND = "days", "records (sub-day records or day summaries)"


def lookback_part(view: Window) -> Window:
    """The plain look-back window inside a view (a memory agent's `context_window` query shows it whole)."""
    s = view.sample
    daily = view.daily[(view.daily.index >= pd.Timestamp(s.window_start))
                       & (view.daily.index <= pd.Timestamp(s.window_end))]
    return dataclasses.replace(view, daily=daily, shown=None)


def _memory(options: Mapping) -> str | None:
    if "retrieved_texts" in options:
        return "raptor"
    return "rag" if "retrieved_dates" in options else None


def _paper_lines(view: Window, options: Mapping) -> list[str]:
    chans = view.channels
    memory = _memory(options)
    if memory is None:
        return [*pn.profile_block(view.profile), SENSOR_HEADER, *pn.sensor_lines(view, chans), *pn.context_lines(view)]
    if memory == "raptor":
        items, items_header = list(options["retrieved_texts"]), PAPER_RAPTOR_HEADER
    else:
        items = [f"{pn.day_label(view, d)}: {pn.day_values(view, d, chans)}" for d in options["retrieved_dates"]]
        items_header = PAPER_RAG_HEADER
    q = options["query_date"]
    if options.get("context_window"):
        query, query_header = pn.sensor_lines(lookback_part(view), chans), SENSOR_HEADER
    else:
        query, query_header = [f"{pn.day_label(view, q)}: {pn.day_values(view, q, chans)}"], PAPER_QUERY_HEADER
    return [*pn.profile_block(view.profile), items_header, *(items or ["(none)"]), query_header, *query,
            *pn.context_lines(view)]


def _corrected_lines(view: Window, options: Mapping) -> list[str]:
    ctx = render.render_context(view)
    tail = [ctx] if ctx else []
    memory = _memory(options)
    if memory is None:  # Health-LLM, and PHIA (whose view is its frames)
        return [render.render_profile(view.profile), render.render_window(view), *tail]
    if memory == "raptor":
        mem, kind = list(options["retrieved_texts"]), RAPTOR_KIND
    else:
        mem, kind = [render.render_day(view, d) for d in options["retrieved_dates"]], RAG_KIND
    listed = "\n".join(f"[{i + 1}] {m}" for i, m in enumerate(mem)) or "(no earlier records)"
    if options.get("context_window"):
        intro = (f"Retrieved from this person's earlier records (the {len(mem)} {kind} most similar to the most "
                 "recent day; they may overlap the window below):")
        query = ["Query window:", render.render_window(lookback_part(view))]
    else:
        intro = f"Retrieved from this person's earlier records (the {len(mem)} {kind} most similar to the query day):"
        query = ["Query day (the most recent day of the look-back window; NaN = missing):",
                 render.render_day(view, options["query_date"])]
    return [render.render_profile(view.profile), intro, listed, *query, *tail]


def mood_only_lines(view: Window, options: Mapping) -> list[str]:
    """The data lines without any sensor line (option `sensors` False, issue 39): the profile and the same-day
    self-report only, in the prompt's style."""
    if options.get("style", "corrected") == "paper":
        return [*pn.profile_block(view.profile), *pn.context_lines(view)]
    ctx = render.render_context(view)
    return [render.render_profile(view.profile), *([ctx] if ctx else [])]


def input_lines(view: Window, options: Mapping) -> list[str]:
    """The data lines of the prompt an agent with these record `options` was given for `view`."""
    if options.get("sensors") is False:
        return mood_only_lines(view, options)
    if options.get("frames") or options.get("style", "corrected") != "paper":
        return _corrected_lines(view, options)  # PHIA has no paper style: its prompt is ours
    return _paper_lines(view, options)


def input_text(view: Window, options: Mapping) -> str:
    return "\n".join(input_lines(view, options))
