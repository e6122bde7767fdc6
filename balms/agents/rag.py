"""Chunk RAG: day-level memory of the same user, retrieved by sentence-embedding similarity.

Design, as the paper describes it (Section 2.3.3, Appendix A), with the old behaviour kept as options:
- Memory (`memory="lookback"`, default) = the days of the look-back window before the query day, each
  rendered as one text and embedded once per (user, day, text, embedding model) in the SQLite cache.
  `memory="history"` = every day of the user up to the window end (our earlier default). Nothing after
  `window_end` and no label ever enters the memory (the daily table holds no labels).
- Query = the window's most recent day (window_end); top-k (3) days by cosine similarity of
  all-MiniLM-L6-v2 embeddings.
- Prompt (`context_window=False`, default) = ONLY the top-k retrieved days plus the query day, so its
  size does not grow with the look-back. `context_window=True` = retrieved days + the whole query
  window (our earlier prompt).
- Each record's options carry `retrieved_dates` and `query_date`; the judge rebuilds the prompt's view from
  them (`balms.data.channels.agent_view`): only those days, not the whole look-back window.
- `style="paper"`: days are embedded and shown in the Appendix D bracket notation (`[Steps]: 4664 steps,
  ...`) inside the paper's template, labelled "Day k" on the window's numbering; `style="corrected"`:
  `render.render_day` lines with their dates inside our prompt.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from balms.agents import paper_prompts, prompts
from balms.agents.common import Episode
from balms.agents.embeddings import DEFAULT_EMBEDDER, store_for, top_k
from balms.agents.healthllm import PromptAgentBase
from balms.data import render
from balms.data.agent_input import input_lines
from balms.data.channels import agent_view
from balms.data.schema import DatasetTables, Sample, Window
from balms.models.base import Backend
from balms.records import PredictionRecord

MEMORY_SCOPES = ("history", "lookback")


def user_history(tables: DatasetTables, window: Window, scope: str = "history") -> Window:
    """A Window over the user's days up to window_end (all history, or the look-back only), with the
    window's channels, so `render.render_day` renders memory days exactly like the prompt does."""
    if scope not in MEMORY_SCOPES:
        raise ValueError(f"memory scope must be one of {MEMORY_SCOPES}, got {scope!r}")
    s = window.sample
    if scope == "lookback":
        daily = window.daily
    else:
        if s.user not in tables.daily.index.get_level_values("user"):
            raise ValueError(f"{tables.name}: user {s.user!r} has no daily rows")
        daily = tables.daily.xs(s.user, level="user")
        daily.index = pd.DatetimeIndex(daily.index).normalize()
        daily = daily[daily.index <= pd.Timestamp(s.window_end)]
        cols = [c.name for c in window.channels if c.name in daily.columns]
        daily = daily[cols].sort_index()
    return Window(sample=s, target=window.target, daily=daily, channels=window.channels,
                  profile=window.profile)


def day_key(sample: Sample, ts) -> str:
    return f"{sample.dataset}/{sample.user}/{pd.Timestamp(ts).date().isoformat()}"


def day_text(hist: Window, ts, style: str) -> str:
    """One memory day as embedded and shown: the paper's bracket notation (no date) or render_day."""
    if style == "paper":
        return paper_prompts.day_values(hist, ts, hist.channels)
    return render.render_day(hist, ts)


def retrieve_days(tables: DatasetTables, window: Window, *, k: int, scope: str,
                  embedder: str = DEFAULT_EMBEDDER, style: str = "corrected") -> dict:
    """Top-k memory days for the query day; returns texts, dates, scores and the query text."""
    s = window.sample
    hist = user_history(tables, window, scope)
    query_ts = pd.Timestamp(s.window_end)
    query_text = day_text(window, query_ts, style)
    cands = [ts for ts in hist.daily.index if ts != query_ts]
    texts = [day_text(hist, ts, style) for ts in cands]
    store = store_for(embedder)
    mat = store.embed([(day_key(s, ts), t) for ts, t in zip(cands, texts, strict=True)])
    q = store.embed([(day_key(s, query_ts) + "#query", query_text)])[0]
    hits = top_k(q, mat, k) if cands else []
    return {
        "query": query_text,
        "query_date": query_ts.date().isoformat(),
        "texts": [texts[i] for i, _ in hits],
        "dates": [cands[i].date().isoformat() for i, _ in hits],
        "scores": [round(sc, 4) for _, sc in hits],
        "n_candidates": len(cands),
    }


def rag_prompt(tables: DatasetTables, window: Window, chans, got: dict | None, *, style: str, cot: bool,
               context_window: bool, cot_format: str = "paper", format_example: str = "paper") -> str:
    """The answering prompt from a retrieval result (`retrieve_days`): the prompt's data lines are rendered from the
    view the record will describe (`agent_view`, `agent_input.input_lines`), exactly as the judge renders them.
    `got` None: no sensor line at all (option `sensors` False; then the prompt equals Health-LLM's)."""
    if got is None:
        lines = input_lines(window, {"style": style, "sensors": False})
    else:
        opts = {"style": style, "context_window": bool(context_window), **RAGAgent.view_options(got)}
        lines = input_lines(agent_view(tables, window, opts), opts)
    if style == "paper":
        return paper_prompts.prompt_around(window, chans if chans is not None else window.channels, lines, cot=cot,
                                           cot_format=cot_format, format_example=format_example)
    return prompts.prompt_around(window, lines, cot=cot)


@dataclass
class RAGAgent(PromptAgentBase):
    top_k: int = 3
    memory: str = "lookback"
    embedder: str = DEFAULT_EMBEDDER
    context_window: bool = False  # True: the prompt also holds the whole query window (our earlier prompt)

    def __post_init__(self):
        self.name = "rag"
        self._check()
        if self.memory not in MEMORY_SCOPES:
            raise ValueError(f"memory must be one of {MEMORY_SCOPES}, got {self.memory!r}")

    def options(self) -> dict:
        return {**self.base_options(), "top_k": self.top_k, "memory": self.memory,
                "embedder": self.embedder, "context_window": bool(self.context_window)}

    @staticmethod
    def view_options(got: dict | None) -> dict:
        """Per record: the days the prompt held (retrieved + query day), so the judge rebuilds that view."""
        return {} if got is None else {"retrieved_dates": list(got["dates"]), "query_date": got["query_date"]}

    def seen_window(self, sample: Sample, tables: DatasetTables) -> Window:
        """The window as this agent's prompt held it (retrieved days + query day, or more with context_window)."""
        tables = self.data_for(sample, tables)
        window, _ = self.window(sample, tables)
        if not self.sensors:
            return window
        got = retrieve_days(tables, window, k=self.top_k, scope=self.memory, embedder=self.embedder, style=self.style)
        return agent_view(tables, window, {**self.options(), **self.view_options(got)})

    def _prompt(self, sample: Sample, tables: DatasetTables,
                episode: Episode | None) -> tuple[str, list | None, dict | None]:
        tables = self.data_for(sample, tables)  # the sensor placebo's tables (issue 39), else `tables`
        window, chans = self.window(sample, tables)
        if not self.sensors:  # no sensor line: nothing to retrieve
            return rag_prompt(tables, window, chans, None, style=self.style, cot=self.cot,
                              context_window=self.context_window, cot_format=self.cot_format,
                              format_example=self.format_example), chans, None
        got = retrieve_days(tables, window, k=self.top_k, scope=self.memory, embedder=self.embedder,
                            style=self.style)
        if episode is not None:
            episode.log("retrieval", "\n".join(got["texts"]), query=got["query"], dates=got["dates"],
                        scores=got["scores"], n_candidates=got["n_candidates"])
        return rag_prompt(tables, window, chans, got, style=self.style, cot=self.cot,
                          context_window=self.context_window, cot_format=self.cot_format,
                          format_example=self.format_example), chans, got

    def predict(self, sample: Sample, tables: DatasetTables, backend: Backend) -> PredictionRecord:
        episode = Episode(backend)
        user, chans, got = self._prompt(sample, tables, episode)
        return self.answer(sample, tables, backend, episode, user,
                           {**self.options(), **self.channel_options(tables, chans), **self.view_options(got),
                            **self.placebo_options(sample, tables)})

    def first_prompt(self, sample: Sample, tables: DatasetTables) -> list:
        return prompts.messages(self.system_prompt, self._prompt(sample, tables, None)[0])
