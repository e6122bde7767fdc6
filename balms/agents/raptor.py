"""RAPTOR, adapted to two levels: sub-day leaves and one LLM-written summary node per day.

- Leaves: the user's sub-day records up to the window end (GLOBEM time-of-day segments, PMData
  half-hour slots where minute data exists, DiversityOne thirty-minute slots), one text per row with
  the canonical number format. A sub-day row whose channels are all missing is not a leaf (counted in
  the retrieval step's meta as `empty_subday_rows`). A day with no sub-day rows gets its daily row as
  its single leaf, marked "(no sub-day records; daily values used as the leaf)".
- Day node: an LLM summary of the day's leaves, generated once per (dataset, user, day, model id,
  leaves text) and cached in `cache_dir()/raptor_summaries.sqlite`; the call itself goes through the
  backend (which has its own response cache). Summary decoding uses a fixed seed (not the per-sample
  seed) so the same day gets the same summary for every sample that retrieves it.
- Retrieval on the collapsed tree: leaves and summaries are embedded together and compete; top-k (3, the
  paper's budget, as RAG) by cosine similarity to the query day (the window's most recent day, rendered by
  render_day; that day's own nodes are excluded, as in RAG).
- Prompt (`context_window=False`, default, as the paper's chunk RAG): ONLY the retrieved nodes plus the query
  day. `context_window=True` (the earlier behaviour) shows the whole query window after the nodes.
- Memory scope: "lookback" (default, RAG's default scope: the look-back days before the query day) or
  "history" (every day up to window_end). Why not "history" by default: one summary call per (user, day) of
  the whole record; a PMData day of 48 half-hour leaves is a ~1,150-token summary prompt (bench/agents.json),
  i.e. ~17 s per day with the embedded Qwen-1.5B, hours for a full cohort.
- Leaf granularity is the dataset's sub-day unit (`tables.subday_unit`: GLOBEM time-of-day segments, PMData
  half-hour slots from minute steps and sleep stages); days without sub-day rows fall back to the daily row.
  Each record says which: options `leaf_unit` and `daily_leaf_days` (days of the tree whose leaf is the daily
  row), and what was retrieved: `retrieved` (id, kind, date per node), `retrieved_texts` (verbatim) and
  `query_date`, from which the judge rebuilds the prompt's view (`balms.data.channels.agent_view`).
- `style`: "paper" (default) puts the retrieved nodes and the query into the paper's Appendix D template;
  "corrected" into our prompt. Leaves and summaries are the same in both styles.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import pandas as pd

from balms import paths
from balms.agents import paper_prompts, prompts
from balms.agents.common import Episode
from balms.agents.embeddings import DEFAULT_EMBEDDER, store_for, top_k
from balms.agents.healthllm import PromptAgentBase
from balms.agents.rag import MEMORY_SCOPES, user_history
from balms.data import render
from balms.data.channels import agent_view, select_subday_channels
from balms.data.schema import DatasetTables, Sample, Window
from balms.models.base import Backend, GenParams, Message
from balms.records import PredictionRecord

SUMMARY_PROMPT_VERSION = "v2"  # v2: leaves given as one compact table
SUMMARY_SEED = 0
NO_SUBDAY_NOTE = "(no sub-day records; daily values used as the leaf)"


def render_subday_row(row: pd.Series, channels, unit: str) -> str:
    """One sub-day record as text, numbers in the canonical format of balms.data.render."""
    ts = pd.Timestamp(row["date"])
    vals = []
    for c in channels:
        v = row.get(c.name, float("nan"))
        if pd.isna(v):
            continue
        vals.append(f"{c.label} {render.format_value(v, c.decimals)}{(' ' + c.unit) if c.unit else ''}")
    return f"{ts.date().isoformat()} {row['slot']} ({unit or 'sub-day slot'}): " + "; ".join(vals)


def user_subday(tables: DatasetTables, sample: Sample, start=None) -> pd.DataFrame:
    """The user's sub-day rows from `start` (or the beginning) to window_end, no later."""
    sd = tables.subday
    if sd is None or len(sd) == 0:
        return pd.DataFrame(columns=["user", "date", "slot", "slot_index"])
    sd = sd[sd["user"] == sample.user].copy()
    sd["date"] = pd.to_datetime(sd["date"]).dt.normalize()
    sd = sd[sd["date"] <= pd.Timestamp(sample.window_end)]
    if start is not None:
        sd = sd[sd["date"] >= pd.Timestamp(start)]
    return sd.sort_values(["date", "slot_index"])


def build_leaves(tables: DatasetTables, hist: Window) -> tuple[dict, int]:
    """Day -> list of leaf texts for every day of `hist`; and the count of all-missing sub-day rows.
    Sub-day channels follow the daily selection's devices (the wearable-only ablation has no phone leaves)."""
    s = hist.sample
    start = hist.daily.index.min() if len(hist.daily.index) else None
    sd = user_subday(tables, s, start)
    picked = select_subday_channels(tables, hist.channels)
    chans = [c for c in picked if c.name in sd.columns]
    empty = 0
    leaves: dict[pd.Timestamp, list[str]] = {ts: [] for ts in hist.daily.index}
    if len(sd) and chans:
        has_val = sd[[c.name for c in chans]].notna().any(axis=1)
        empty = int((~has_val).sum())
        for _, row in sd[has_val].iterrows():
            leaves.setdefault(row["date"], []).append(render_subday_row(row, chans, tables.subday_unit))
    for ts in list(leaves):
        if not leaves[ts]:
            leaves[ts] = [f"{render.render_day(hist, ts)} {NO_SUBDAY_NOTE}"]
    return dict(sorted(leaves.items())), empty


def day_tables(tables: DatasetTables, hist: Window) -> dict:
    """Day -> the day's sub-day rows as one compact table (header once, a line per slot, blank = missing).

    The summary prompt reads this instead of the self-describing leaf texts: the same numbers in about a
    third of the tokens, which is what makes one summary per (user, day) affordable on a CPU. Days without
    sub-day rows fall back to their leaf text (the daily row)."""
    s = hist.sample
    start = hist.daily.index.min() if len(hist.daily.index) else None
    sd = user_subday(tables, s, start)
    chans = [c for c in select_subday_channels(tables, hist.channels) if c.name in sd.columns]
    out: dict[pd.Timestamp, str] = {}
    if len(sd) and chans:
        cols = [c.name for c in chans]
        sd = sd[sd[cols].notna().any(axis=1)]
        header = "slot, " + ", ".join(render.channel_caption(c) for c in chans)
        for ts, g in sd.groupby("date", sort=True):
            lines = [header]
            for _, row in g.iterrows():
                vals = ["" if pd.isna(row[c.name]) else render.format_value(row[c.name], c.decimals) for c in chans]
                lines.append(f"{row['slot']}, " + ", ".join(vals))
            out[ts] = "\n".join(lines)
    return out


class SummaryCache:
    """SQLite cache of day summaries, keyed by (dataset, user, day, model id, leaves hash), with the usage
    (tokens, latency) of the call that wrote each one, so every sample that reuses a summary is charged for it."""

    USAGE = ("prompt_tokens", "completion_tokens", "latency_s")

    def __init__(self, db_path: Path):
        db_path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._con = sqlite3.connect(str(db_path), timeout=30, check_same_thread=False)
        self._con.execute("PRAGMA journal_mode=WAL")
        self._con.execute(
            "CREATE TABLE IF NOT EXISTS summaries (dataset TEXT, user TEXT, day TEXT, model_id TEXT, "
            "leaves_sha TEXT, summary TEXT, PRIMARY KEY (dataset, user, day, model_id, leaves_sha))")
        have = {row[1] for row in self._con.execute("PRAGMA table_info(summaries)")}
        for col, kind in zip(self.USAGE, ("INTEGER", "INTEGER", "REAL"), strict=True):
            if col not in have:  # caches written before usage was kept: those rows read back as unknown usage
                self._con.execute(f"ALTER TABLE summaries ADD COLUMN {col} {kind}")
        self._con.commit()

    def get(self, key: tuple) -> tuple[str, dict | None] | None:
        """(summary, usage or None when unknown), or None on a miss."""
        with self._lock:
            row = self._con.execute(
                "SELECT summary, prompt_tokens, completion_tokens, latency_s FROM summaries WHERE dataset=? "
                "AND user=? AND day=? AND model_id=? AND leaves_sha=?", key).fetchone()
        if row is None:
            return None
        usage = dict(zip(self.USAGE, row[1:], strict=True)) if row[3] is not None else None
        return row[0], usage

    def put(self, key: tuple, summary: str, usage: dict | None = None) -> None:
        u = usage or {}
        with self._lock:
            self._con.execute("INSERT OR REPLACE INTO summaries VALUES (?,?,?,?,?,?,?,?,?)",
                              (*key, summary, *(u.get(c) for c in self.USAGE)))
            self._con.commit()


@lru_cache(maxsize=4)
def _summary_cache(path: str) -> SummaryCache:
    return SummaryCache(Path(path))


def summary_cache() -> SummaryCache:
    return _summary_cache(str(paths.cache_dir() / "raptor_summaries.sqlite"))


def day_summary(backend: Backend, episode: Episode | None, sample: Sample, ts: pd.Timestamp,
                records: str, subday_unit: str, max_tokens: int, n_leaves: int = 0) -> tuple[str, bool]:
    """The day's summary node text; (text, generated_now). `records`: the day's compact table."""
    day = ts.date().isoformat()
    prompt = prompts.summary_prompt(day, records, subday_unit)
    sha = hashlib.sha256(f"{SUMMARY_PROMPT_VERSION}|{max_tokens}|{prompt}".encode()).hexdigest()
    key = (sample.dataset, sample.user, day, backend.model_id, sha)
    cache = summary_cache()
    got = cache.get(key)
    if got is not None:
        text, usage = got
        if episode is not None:
            if usage is None:  # written by an older version: the text is reused, its cost is unknown
                episode.log("summary", text, cached=True, usage_unknown=True, day=day, n_leaves=n_leaves)
            else:
                episode.replay("summary", text, **usage, day=day, n_leaves=n_leaves)
        return text, False
    msgs = [Message("system", prompts.SUMMARY_SYSTEM_PROMPT), Message("user", prompt)]
    params = GenParams(temperature=0.0, max_tokens=max_tokens, seed=SUMMARY_SEED)
    if episode is not None:
        comp = episode.call(msgs, params, kind="summary", log_prompt=False, day=day,
                            n_leaves=n_leaves)
    else:
        comp = backend.generate(msgs, params)
    text = comp.text.strip()
    cache.put(key, text, {c: getattr(comp, c) for c in SummaryCache.USAGE})
    return text, True


@dataclass
class RaptorAgent(PromptAgentBase):
    top_k: int = 3
    memory: str = "lookback"
    embedder: str = DEFAULT_EMBEDDER
    summary_max_tokens: int = prompts.SUMMARY_MAX_TOKENS
    context_window: bool = False  # True: the whole query window after the retrieved nodes (the earlier prompt)

    def __post_init__(self):
        self.name = "raptor"
        self._check()
        if self.memory not in MEMORY_SCOPES:
            raise ValueError(f"memory must be one of {MEMORY_SCOPES}, got {self.memory!r}")

    def options(self) -> dict:
        return {**self.base_options(), "top_k": self.top_k, "memory": self.memory,
                "embedder": self.embedder, "summary_max_tokens": self.summary_max_tokens,
                "context_window": bool(self.context_window)}

    def _answer_prompt(self, window: Window, chans, texts: list[str], query_ts: pd.Timestamp) -> str:
        if self.style == "paper":
            shown = chans if chans is not None else window.channels
            if self.context_window:
                query, header = paper_prompts.sensor_lines(window, shown), paper_prompts.SENSOR_HEADER
            else:
                query = [f"{paper_prompts.day_label(window, query_ts)}: "
                         f"{paper_prompts.day_values(window, query_ts, shown)}"]
                header = "Sensor signals (query day)."
            return paper_prompts.memory_prompt(
                window, shown, texts, cot=self.cot,
                items_header="Retrieved records (sub-day records or day summaries).",
                query=query, query_header=header, cot_format=self.cot_format)
        return prompts.memory_prompt(window, texts, cot=self.cot, context=self.context, channels=chans,
                                     memory_kind="records (sub-day records or day summaries)",
                                     query_day=None if self.context_window else render.render_day(window, query_ts))

    def _prompt(self, sample: Sample, tables: DatasetTables, backend: Backend | None,
                episode: Episode | None) -> str:
        return self._build(sample, tables, backend, episode)[0]

    def seen_window(self, sample: Sample, tables: DatasetTables, backend: Backend | None = None) -> Window:
        """The window as this agent's prompt held it: the retrieved nodes verbatim plus the query day."""
        window, _ = self.window(sample, tables)
        return agent_view(tables, window, {**self.options(), **self._build(sample, tables, backend, None)[1]})

    def _build(self, sample: Sample, tables: DatasetTables, backend: Backend | None,
               episode: Episode | None) -> tuple[str, dict]:
        """Build the tree, retrieve, and return the prompt and the per-record view options. Without a
        backend (token benchmark), summaries come from the cache when present and are otherwise left out
        of the tree."""
        window, chans = self.window(sample, tables)
        hist = user_history(tables, window, self.memory)
        query_ts = pd.Timestamp(sample.window_end)
        leaves, empty = build_leaves(tables, hist)
        compact = day_tables(tables, hist) if backend is not None else {}
        nodes: list[tuple[str, str, str]] = []  # (key, kind, text)
        fallback_days = 0
        generated = 0
        for ts, day_leaves in leaves.items():
            if ts == query_ts:
                continue
            day = ts.date().isoformat()
            base = f"{sample.dataset}/{sample.user}/{day}"
            fallback_days += int(len(day_leaves) == 1 and day_leaves[0].endswith(NO_SUBDAY_NOTE))
            for j, leaf in enumerate(day_leaves):
                nodes.append((f"{base}/leaf{j}", "leaf", leaf))
            if backend is not None:
                records = compact.get(ts) or "\n".join(day_leaves)
                summ, new = day_summary(backend, episode, sample, ts, records, tables.subday_unit,
                                        self.summary_max_tokens, n_leaves=len(day_leaves))
                generated += int(new)
                nodes.append((f"{base}/summary", "summary", f"{day} (day summary): {summ}"))
        store = store_for(self.embedder)
        mat = store.embed([(k, t) for k, _, t in nodes])
        query_text = render.render_day(window, query_ts)
        q = store.embed([(f"{sample.dataset}/{sample.user}/{query_ts.date().isoformat()}#query",
                          query_text)])[0]
        hits = top_k(q, mat, self.top_k) if nodes else []
        texts = [nodes[i][2] for i, _ in hits]
        if episode is not None:
            episode.log("retrieval", "\n".join(texts), query=query_text,
                        ids=[nodes[i][0] for i, _ in hits], kinds=[nodes[i][1] for i, _ in hits],
                        scores=[round(sc, 4) for _, sc in hits], n_candidates=len(nodes),
                        n_leaves=sum(1 for n in nodes if n[1] == "leaf"),
                        summaries_generated=generated, empty_subday_rows=empty)
        view = {"query_date": query_ts.date().isoformat(),
                "retrieved": [{"id": nodes[i][0], "kind": nodes[i][1], "date": nodes[i][0].split("/")[-2]}
                              for i, _ in hits],
                "retrieved_texts": texts, "leaf_unit": tables.subday_unit or "day (no sub-day data)",
                "daily_leaf_days": fallback_days}
        return self._answer_prompt(window, chans, texts, query_ts), view

    def predict(self, sample: Sample, tables: DatasetTables, backend: Backend) -> PredictionRecord:
        episode = Episode(backend)
        user, view = self._build(sample, tables, backend, episode)
        chans = self.window(sample, tables)[1]
        return self.answer(sample, tables, backend, episode, user,
                           {**self.options(), **self.channel_options(tables, chans), **view})

    def first_prompt(self, sample: Sample, tables: DatasetTables) -> list:
        """Estimated first prompt for token counting: the final answering prompt built from leaves only
        (summaries are not generated without a backend)."""
        return prompts.messages(self.system_prompt, self._prompt(sample, tables, None, None))
