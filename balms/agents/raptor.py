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
  the whole record; a PMData day of 48 half-hour leaves is a summary prompt of over a thousand tokens
  (bench/agents.json measures it), so hours of embedded-model time for a full cohort.
- Leaf granularity is the dataset's sub-day unit (`tables.subday_unit`: GLOBEM time-of-day segments, PMData
  half-hour slots from minute steps and sleep stages); days without sub-day rows fall back to the daily row.
  Each record says which: options `leaf_unit` and `daily_leaf_days` (days of the tree whose leaf is the daily
  row), and what was retrieved: `retrieved` (id, kind, date per node), `retrieved_texts` (verbatim) and
  `query_date`, from which the judge rebuilds the prompt's view (`balms.data.channels.agent_view`).
- `style`: "paper" (default) puts the retrieved nodes and the query into the paper's Appendix D template;
  "corrected" into our prompt. Leaves and summaries are the same in both styles.
"""

from __future__ import annotations

import concurrent.futures
import functools
import hashlib
import threading
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from balms import paths
from balms.agents import paper_prompts, prompts
from balms.agents.common import Episode
from balms.agents.embeddings import DEFAULT_EMBEDDER, store_for, top_k
from balms.agents.healthllm import PromptAgentBase
from balms.agents.rag import MEMORY_SCOPES, user_history
from balms.data import render
from balms.data.agent_input import input_lines
from balms.data.channels import agent_view, select_subday_channels
from balms.data.memo import TablesMemo
from balms.data.samples import subday_rows_of
from balms.data.schema import DatasetTables, Sample, Window
from balms.models.base import Backend, GenParams, Message
from balms.records import PredictionRecord
from balms.stores import Readers, one_per_key, open_db
from balms.threads import Pool

SUMMARY_PROMPT_VERSION = "v2"  # v2: leaves given as one compact table
SUMMARY_SEED = 0
SUMMARY_THREADS = 128  # day summaries in flight at once per model, all its samples together (slots meter servers)
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
    sd = subday_rows_of(tables, sample.user).copy()
    sd["date"] = pd.to_datetime(sd["date"]).dt.normalize()
    sd = sd[sd["date"] <= pd.Timestamp(sample.window_end)]
    if start is not None:
        sd = sd[sd["date"] >= pd.Timestamp(start)]
    return sd.sort_values(["date", "slot_index"])


_TREES = TablesMemo(maxsize=512)  # leaves and day tables: every backbone's RAPTOR cell builds the same


def _hist_key(kind: str, hist: Window) -> tuple:
    """What a memory window's leaves and day tables depend on: its sample, days and channels."""
    idx = hist.daily.index
    return (kind, hist.sample, len(idx), idx.min() if len(idx) else None, idx.max() if len(idx) else None,
            tuple(c.name for c in hist.channels), tuple(hist.daily.columns))


def build_leaves(tables: DatasetTables, hist: Window) -> tuple[dict, int]:
    """Day -> list of leaf texts for every day of `hist`; and the count of all-missing sub-day rows.
    Sub-day channels follow the daily selection's devices (the wearable-only ablation has no phone leaves).
    Shared by every cell (balms.data.memo): read only."""
    return _TREES.get(tables, _hist_key("leaves", hist), lambda: _build_leaves(tables, hist))


def _build_leaves(tables: DatasetTables, hist: Window) -> tuple[dict, int]:
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
    sub-day rows fall back to their leaf text (the daily row). Shared by every cell: read only."""
    return _TREES.get(tables, _hist_key("days", hist), lambda: _day_tables(tables, hist))


def _day_tables(tables: DatasetTables, hist: Window) -> dict:
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


@functools.lru_cache(maxsize=None)
def summary_pool(model_id: str) -> Pool:
    """One pool per model for every sample's day summaries, its threads started at once (balms.threads): a pool
    per sample started eight threads per RAPTOR sample, hundreds at once when all cells are in flight. Per model,
    and the oldest sample's summaries first: with one first-come first-served pool for every model, a slow
    model's summaries queued behind a fast model's and its servers idled for a quarter of the run (issue 27,
    bench-scale at 16 servers). A summary never submits to it, so a full pool only queues."""
    return Pool(SUMMARY_THREADS, "balms-raptor")


class SummaryCache:
    """SQLite cache of day summaries, keyed by (dataset, user, day, model id, leaves hash), with the usage
    (tokens, latency) of the call that wrote each one, so every sample that reuses a summary is charged for it."""

    USAGE = ("prompt_tokens", "completion_tokens", "latency_s")

    def __init__(self, db_path: Path):
        self._lock = threading.Lock()
        # created with every column; caches written before usage was kept get the columns added (their rows read
        # back as unknown usage); atomic under concurrent first use (balms.stores)
        self._con = open_db(db_path, [
            "CREATE TABLE IF NOT EXISTS summaries (dataset TEXT, user TEXT, day TEXT, model_id TEXT, "
            "leaves_sha TEXT, summary TEXT, prompt_tokens INTEGER, completion_tokens INTEGER, latency_s REAL, "
            "PRIMARY KEY (dataset, user, day, model_id, leaves_sha))"],
            add_columns={"summaries": dict(zip(self.USAGE, ("INTEGER", "INTEGER", "REAL"), strict=True))})
        self._memory: dict[tuple, tuple[str, dict | None]] = {}
        self._readers = Readers(db_path)  # reads never wait behind a write (balms.stores)

    def get(self, key: tuple) -> tuple[str, dict | None] | None:
        """(summary, usage or None when unknown), or None on a miss. Summaries this process wrote or read come
        from memory (every sample of a user reads the same days; all cells in flight queued on the lock)."""
        hit = self._memory.get(key)
        if hit is not None:
            return hit[0], (dict(hit[1]) if hit[1] is not None else None)
        with self._readers.connection() as con:
            row = con.execute(
                "SELECT summary, prompt_tokens, completion_tokens, latency_s FROM summaries WHERE dataset=? "
                "AND user=? AND day=? AND model_id=? AND leaves_sha=?", key).fetchone()
        if row is None:
            return None
        usage = dict(zip(self.USAGE, row[1:], strict=True)) if row[3] is not None else None
        self._memory[key] = (row[0], usage)
        return row[0], (dict(usage) if usage is not None else None)

    def put(self, key: tuple, summary: str, usage: dict | None = None) -> None:
        u = usage or {}
        with self._lock:
            self._con.execute("INSERT OR REPLACE INTO summaries VALUES (?,?,?,?,?,?,?,?,?)",
                              (*key, summary, *(u.get(c) for c in self.USAGE)))
            self._con.commit()
        # as read back: a usage without latency is unknown
        self._memory[key] = (summary, {c: u.get(c) for c in self.USAGE} if u.get("latency_s") is not None else None)


@one_per_key
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
    if episode is not None:  # the step says what a replay from this cache will say: the stripped text (issue 37)
        episode.transcript[-1].content = text
    cache.put(key, text, {c: getattr(comp, c) for c in SummaryCache.USAGE})
    return text, True


@dataclass
class RaptorAgent(PromptAgentBase):
    top_k: int = 3
    memory: str = "lookback"
    embedder: str = DEFAULT_EMBEDDER
    summary_max_tokens: int = prompts.SUMMARY_MAX_TOKENS
    context_window: bool = False  # True: the whole query window after the retrieved nodes (the earlier prompt)
    sensor_test = False  # refuses the sensor test options (see __post_init__)

    def __post_init__(self):
        self.name = "raptor"
        self._check()
        if (self.data_transform, self.sensors, self.format_example) != ("none", True, "paper"):
            # its day summaries are cached per (user, day, model): a placebo would read the real days' summaries
            raise ValueError("raptor: the sensor test options (data_transform, sensors, format_example) are not "
                             "supported (its cached day summaries would carry the real days)")
        if self.memory not in MEMORY_SCOPES:
            raise ValueError(f"memory must be one of {MEMORY_SCOPES}, got {self.memory!r}")

    def options(self) -> dict:
        return {**self.base_options(), "top_k": self.top_k, "memory": self.memory,
                "embedder": self.embedder, "summary_max_tokens": self.summary_max_tokens,
                "context_window": bool(self.context_window)}

    def _answer_prompt(self, tables: DatasetTables, window: Window, chans, view: dict) -> str:
        """The answering prompt; its data lines are rendered from the view the record describes (`agent_view`,
        `agent_input.input_lines`), exactly as the judge renders them."""
        opts = {"style": self.style, "context_window": bool(self.context_window), **view}
        lines = input_lines(agent_view(tables, window, opts), opts)
        if self.style == "paper":
            return paper_prompts.prompt_around(window, chans if chans is not None else window.channels, lines,
                                               cot=self.cot, cot_format=self.cot_format)
        return prompts.prompt_around(window, lines, cot=self.cot)

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
        days = {ts: day_leaves for ts, day_leaves in leaves.items() if ts != query_ts}
        store = store_for(self.embedder)
        summaries = ({} if backend is None else
                     self._summaries(backend, episode, sample, tables, days, compact, store))
        nodes: list[tuple[str, str, str]] = []  # (key, kind, text)
        fallback_days = 0
        generated = 0
        for ts, day_leaves in days.items():
            day = ts.date().isoformat()
            base = f"{sample.dataset}/{sample.user}/{day}"
            fallback_days += int(len(day_leaves) == 1 and day_leaves[0].endswith(NO_SUBDAY_NOTE))
            for j, leaf in enumerate(day_leaves):
                nodes.append((f"{base}/leaf{j}", "leaf", leaf))
            if ts in summaries:
                summ, new = summaries[ts]
                generated += int(new)
                nodes.append((f"{base}/summary", "summary", f"{day} (day summary): {summ}"))
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
        return self._answer_prompt(tables, window, chans, view), view

    def _summaries(self, backend: Backend, episode: Episode | None, sample: Sample, tables: DatasetTables,
                   days: dict, compact: dict, store) -> dict:
        """Day -> (summary, generated now). The days' summaries are independent calls: they go out together
        (on the model's pool, `summary_pool`, first come first served) while this thread embeds the leaves,
        and each day's steps join the transcript in day order, so the record does not depend on which call
        finished first. A day another sample's call is already making is not asked again: this sample waits
        for it without holding a pool thread, then reads it from the cache as a later sample would."""
        subs = {ts: Episode(backend) if episode is not None else None for ts in days}
        records = {ts: compact.get(ts) or "\n".join(days[ts]) for ts in days}

        def one(ts):
            return day_summary(backend, subs[ts], sample, ts, records[ts], tables.subday_unit,
                               self.summary_max_tokens, n_leaves=len(days[ts]))

        pool = summary_pool(backend.model_id)
        futures = {ts: pool.submit_once((sample.dataset, sample.user, ts, records[ts], tables.subday_unit,
                                         self.summary_max_tokens), 0, one, ts) for ts in days}
        # the leaves' embeddings (cached by text) are computed meanwhile, off the servers' critical path
        store.embed([(f"{sample.dataset}/{sample.user}/{ts.date().isoformat()}/leaf{j}", leaf)
                     for ts, day_leaves in days.items() for j, leaf in enumerate(day_leaves)])
        out = {}
        for ts, (f, mine) in futures.items():
            if mine:
                out[ts] = f.result()
            else:  # another sample's call for the same day: once it ends, this sample's own step (from the cache)
                concurrent.futures.wait([f])
                out[ts] = one(ts)
        if episode is not None:
            for ts in days:
                episode.absorb(subs[ts])
        return out

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
