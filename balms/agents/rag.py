"""Chunk RAG: day-level memory of the same user, retrieved by sentence-embedding similarity.

Design (documented choices):
- Memory = every day of the same user up to the window end (the day before the target day), each
  rendered by `render.render_day` with the window's channels; the query day itself is excluded.
  Nothing after `window_end` and no label ever enters the memory (the daily table holds no labels).
  `memory="lookback"` restricts the memory to the look-back window (an option for the look-back
  scaling experiment; it is recorded in the options).
- Query = the window's most recent day (window_end), rendered the same way; top-k (3) days by cosine
  similarity of all-MiniLM-L6-v2 embeddings (cached per user, day, embedding model).
- Prompt = retrieved days + the full query window (canonical text) + context + question.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from balms.agents import prompts
from balms.agents.common import Episode
from balms.agents.embeddings import DEFAULT_EMBEDDER, store_for, top_k
from balms.agents.healthllm import PromptAgentBase
from balms.data import render
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


def retrieve_days(tables: DatasetTables, window: Window, *, k: int, scope: str,
                  embedder: str = DEFAULT_EMBEDDER) -> dict:
    """Top-k memory days for the query day; returns texts, dates, scores and the query text."""
    s = window.sample
    hist = user_history(tables, window, scope)
    query_ts = pd.Timestamp(s.window_end)
    query_text = render.render_day(window, query_ts)
    cands = [ts for ts in hist.daily.index if ts != query_ts]
    texts = [render.render_day(hist, ts) for ts in cands]
    store = store_for(embedder)
    mat = store.embed([(day_key(s, ts), t) for ts, t in zip(cands, texts, strict=True)])
    q = store.embed([(day_key(s, query_ts) + "#query", query_text)])[0]
    hits = top_k(q, mat, k) if cands else []
    return {
        "query": query_text,
        "texts": [texts[i] for i, _ in hits],
        "dates": [cands[i].date().isoformat() for i, _ in hits],
        "scores": [round(sc, 4) for _, sc in hits],
        "n_candidates": len(cands),
    }


@dataclass
class RAGAgent(PromptAgentBase):
    top_k: int = 3
    memory: str = "history"
    embedder: str = DEFAULT_EMBEDDER

    def __post_init__(self):
        self.name = "rag"
        if self.memory not in MEMORY_SCOPES:
            raise ValueError(f"memory must be one of {MEMORY_SCOPES}, got {self.memory!r}")

    def options(self) -> dict:
        return {**self.base_options(), "top_k": self.top_k, "memory": self.memory,
                "embedder": self.embedder}

    def _prompt(self, sample: Sample, tables: DatasetTables, episode: Episode | None) -> str:
        window, chans = self.window(sample, tables)
        got = retrieve_days(tables, window, k=self.top_k, scope=self.memory, embedder=self.embedder)
        if episode is not None:
            episode.log("retrieval", "\n".join(got["texts"]), query=got["query"], dates=got["dates"],
                        scores=got["scores"], n_candidates=got["n_candidates"])
        return prompts.memory_prompt(window, got["texts"], cot=self.cot, context=self.context,
                                     channels=chans, memory_kind="days")

    def predict(self, sample: Sample, tables: DatasetTables, backend: Backend) -> PredictionRecord:
        episode = Episode(backend)
        user = self._prompt(sample, tables, episode)
        return self.answer(sample, tables, backend, episode, user, self.options())

    def first_prompt(self, sample: Sample, tables: DatasetTables) -> list:
        return prompts.messages(self.system_prompt, self._prompt(sample, tables, None))
