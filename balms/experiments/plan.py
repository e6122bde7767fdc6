"""`balms plan`: what a profile will cost before any model call: calls, tokens, GPU hours, Claude dollars.

Why: the paper profile runs five backbones and a 70B judge over every test sample; a researcher must know the
bill (GPU hours per model, Claude at list price and through the Batches API) before starting it.

How:
- `enumerate_cells(cfg)`: the cells notebooks 01-07 run, from the config alone, in notebook order; a cell two
  notebooks share (same dataset, system, model, CoT, look-back, options) runs once (response cache, run files)
  and is counted under the first notebook that runs it (so 06 costs nothing: it re-reads 01/02's cells).
- Prompt tokens are counted on the real first prompts of the data present (each agent's `first_prompt`), on
  `per_cell` evenly spaced samples per cell, and scaled to the cell's sample count. Tokens: the model's own
  tokenizer when its files are in the local Hugging Face cache (never downloaded), else chars/4 (+4 per message).
- RAG/RAPTOR retrieval in the plan ranks memory with a stand-in hash embedding unless `embed=True`: the prompt
  length depends on how long the top-k retrieved texts are, not on which are picked, and the real embedder
  would embed every user's whole history (minutes on a CPU).
- Output tokens are at each call's budget (an upper bound; `typical` scales them, see ASSUMPTIONS).
- PHIA: upper bound max_iters + 1 calls per sample (the forced finish), each step re-sending the conversation
  (the first prompt, every earlier step at its budget and an observation); `typical`: TYPICAL_PHIA_CALLS calls.
- RAPTOR: one summary call per (user, memory day) and summary set (dataset, model, channels), shared by
  every RAPTOR cell that uses that set (zero-shot, CoT, look-backs with memory=history).
- Judge (07): one call per CoT rationale of the judged systems (window + rationale + rubric).
- GPU hours: (prompt / prefill tok/s + output / decode tok/s) x GPUs per server, per model size class
  (THROUGHPUT: stated, overridable); vLLM prefix caching (PHIA's repeated prefixes) would lower it.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field

from balms.experiments.cells import NOTEBOOKS, options_json
from balms.experiments.config import ExperimentConfig
from balms.experiments.throughput import THROUGHPUT, size_class  # noqa: F401  (the plan's names too)

TYPICAL_PHIA_CALLS = 4  # code, code, answer (+ one nudge or forced finish): what small backbones mostly do
TYPICAL_OUTPUT_SHARE = 0.5  # CoT, PHIA steps, summaries and judge verdicts stop well before their budget


@dataclass(frozen=True)
class Typical:
    """How the models behave in the `typical` estimate (the upper bound assumes every budget spent): PHIA calls per
    episode, the share of the budget a CoT / PHIA step / summary / judge reply uses, and that of a zero-shot
    answer. Defaults: what small backbones mostly do; a benchmark whose stand-in servers answer by rule passes
    the rule's own numbers (bench/bench_scale.py), so the plan's other estimates are checked alone."""

    phia_calls: int = TYPICAL_PHIA_CALLS
    output_share: float = TYPICAL_OUTPUT_SHARE
    answer_share: float = 1.0


PHIA_OBSERVATION_TOKENS = {"upper": 1000, "typical": 150}  # sandbox bound 4,000 chars; a printed number or table
ASSUMPTIONS = [
    "cells shared by notebooks run once and count under the first notebook (06 re-reads 01/02 cells)",
    "output tokens at each call's max_tokens budget (upper bound); 'typical' takes zero-shot answers at budget and "
    f"{TYPICAL_OUTPUT_SHARE:.0%} of the CoT / PHIA step / summary / judge budgets",
    "PHIA: upper bound max_iters + 1 calls per sample (forced finish), each re-sending the conversation with "
    f"earlier steps at budget and {PHIA_OBSERVATION_TOKENS['upper']}-token observations; typical {TYPICAL_PHIA_CALLS} "
    f"calls with {PHIA_OBSERVATION_TOKENS['typical']}-token observations",
    "RAPTOR: one summary call per (user, memory day) per (dataset, model, channel set), reused across its cells",
    "RAG/RAPTOR prompts built with a stand-in hash embedding for retrieval (same top-k sizes, not the same texts)"
    " unless --embed; RAPTOR answer prompts from leaves only (summaries do not exist before the run)",
    "judge: one call per CoT rationale of judge_systems (geval mode: one one-token call per rubric dimension); "
    "rationale at the backbone's CoT budget (upper bound)",
    "GPU hours = (prompt/prefill + output/decode tokens per second) x GPUs of one server, per size class; "
    "no prefix caching credit",
    "Claude: list price; with anthropic_batch, Health-LLM and RAG cells (one call per sample) go through the "
    "Message Batches API at half price, RAPTOR summaries and PHIA steps stay direct at list price",
]


# ---------------------------------------------------------------------------------------------- cells ---
@dataclass(frozen=True)
class PlanCell:
    """One cell a notebook runs: agents (system = healthllm/rag/raptor/phia) or the judge (system = judge)."""

    notebook: str
    dataset: str
    system: str
    model: str
    cot: bool = False
    lookback: int | None = None  # None: the dataset's default look-back
    options: str = "{}"  # extra agent options as sorted JSON (an ablation's channels, PHIA's executor)
    judged_model: str | None = None  # judge cells: whose CoT rationales
    key: str | None = None  # agent cells: the CellSpec key that names the run file (the notebooks run exactly these)

    @property
    def extra(self) -> dict:
        return json.loads(self.options)


def enumerate_cells(cfg: ExperimentConfig, built: dict | None = None) -> list[PlanCell]:
    """Every cell the profile's notebooks declare (balms.experiments.cells), each once under the first notebook that
    runs it (same cell key), then notebook 07's judge cells. `built`, when given, receives each agent cell's
    runnable form (samples, agent, spec) keyed by its PlanCell, so the estimate reads exactly what will run."""
    from balms.experiments.grid import declared_builds

    cells: list[PlanCell] = []
    for decl, cell, first in declared_builds(cfg):
        if first:
            pc = PlanCell(decl.notebook, decl.dataset, decl.system, decl.model, decl.cot, cell.spec.lookback,
                          decl.options, key=cell.spec.key())
            cells.append(pc)
            if built is not None:
                built[pc] = cell
        if decl.notebook == "07_rationale_quality":  # the judge grades this CoT cell's rationales, wherever it ran
            jc = PlanCell(decl.notebook, decl.dataset, "judge", cfg.judge_model, True,
                          options=options_json({"system": decl.system}), judged_model=decl.model)
            cells.append(jc)
            if built is not None:
                built[jc] = cell
    return cells


# ------------------------------------------------------------------------------------------- tokens ---
@dataclass
class TokenCounter:
    """Tokens of a text for one model: its tokenizer when cached locally, else chars/4."""

    model: str
    method: str
    _tok: object = None

    def count(self, text: str, n_messages: int = 1) -> int:
        if self._tok is not None:
            return len(self._tok.encode(text)) + 4 * n_messages
        return math.ceil(len(text) / 4) + 4 * n_messages


def token_counter(model: str) -> TokenCounter:
    """The model's own tokenizer if its files are in the local Hugging Face cache; else chars/4."""
    from balms.models.registry import UnknownModelError, spec

    try:
        s = spec(model)
    except UnknownModelError:
        return TokenCounter(model, "chars/4 (model not in the registry)")
    if s.backend not in ("openai", "vllm-local"):
        why = "no public tokenizer" if s.backend == "anthropic" else "embedded GGUF"
        return TokenCounter(model, f"chars/4 ({why})")
    try:
        from huggingface_hub import try_to_load_from_cache

        hit = try_to_load_from_cache(s.model_id, "tokenizer.json") or try_to_load_from_cache(
            s.model_id, "tokenizer_config.json"
        )
    except Exception:  # noqa: BLE001 - no hub library or no cache: approximate
        hit = None
    if not isinstance(hit, str):
        return TokenCounter(model, "chars/4 (tokenizer not in the local HF cache)")
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(s.model_id, local_files_only=True)
    except Exception as exc:  # noqa: BLE001
        return TokenCounter(model, f"chars/4 (tokenizer failed to load: {type(exc).__name__})")
    return TokenCounter(model, f"{s.model_id} tokenizer", tok)


# ------------------------------------------------------------------------------------------ estimate ---
@dataclass
class Usage:
    calls: float = 0
    prompt_tokens: float = 0
    output_tokens: float = 0
    batchable: bool = False  # single-call cells (Health-LLM, RAG): what anthropic_batch sends as batches

    def __post_init__(self):
        self.batch_prompt = self.prompt_tokens if self.batchable else 0.0
        self.batch_output = self.output_tokens if self.batchable else 0.0

    def add(self, other: Usage, k: float = 1.0) -> None:
        self.calls += other.calls * k
        self.prompt_tokens += other.prompt_tokens * k
        self.output_tokens += other.output_tokens * k
        self.batch_prompt += other.batch_prompt * k
        self.batch_output += other.batch_output * k


@dataclass
class CellEstimate:
    cell: PlanCell
    n_samples: int
    upper: Usage
    typical: Usage
    prompt_tokens_first: float  # mean tokens of the first prompt (sampled)
    sampled: int  # prompts actually built and counted


@dataclass
class Plan:
    profile: str
    cells: list[CellEstimate] = field(default_factory=list)
    token_counting: dict[str, str] = field(default_factory=dict)
    throughput: dict = field(default_factory=dict)
    data_sources: dict[str, str] = field(default_factory=dict)
    per_cell: int = 3
    embed: bool = False

    def _money(self, model: str, u: Usage) -> dict:
        from balms.models.pricing import price_of
        from balms.models.registry import UnknownModelError, spec

        try:
            s = spec(model)
        except UnknownModelError:
            s = None
        out = {
            "calls": round(u.calls),
            "prompt_tokens": round(u.prompt_tokens),
            "output_tokens": round(u.output_tokens),
            "gpu_hours": 0.0,
            "claude_usd": 0.0,
            "claude_batch_usd": 0.0,
        }
        if s is not None and s.backend == "anthropic":
            pin, pout = price_of(s.model_id)
            usd = (u.prompt_tokens * pin + u.output_tokens * pout) / 1e6
            batchable = (u.batch_prompt * pin + u.batch_output * pout) / 1e6
            out["claude_usd"], out["claude_batch_usd"] = round(usd, 2), round(usd - batchable / 2, 2)
        elif s is None or s.backend in ("openai", "vllm-local"):
            t = self.throughput[size_class(model)]
            sec = u.prompt_tokens / t["prefill"] + u.output_tokens / t["decode"]
            out["gpu_hours"] = round(sec * t["gpus"] / 3600, 2)
        return out

    def table(self, which: str = "upper") -> dict:
        """{"notebooks": {nb: {model: totals}}, "backbones": {model: totals}, "total": totals}."""
        per_nb: dict[str, dict[str, Usage]] = {}
        per_model: dict[str, Usage] = {}
        for ce in self.cells:
            u = getattr(ce, which)
            per_nb.setdefault(ce.cell.notebook, {}).setdefault(ce.cell.model, Usage()).add(u)
            per_model.setdefault(ce.cell.model, Usage()).add(u)
        nbs = {nb: {m: self._money(m, u) for m, u in d.items()} for nb, d in per_nb.items()}
        models = {m: self._money(m, u) for m, u in per_model.items()}
        total = {
            k: round(sum(v[k] for v in models.values()), 2)
            for k in ("calls", "prompt_tokens", "output_tokens", "gpu_hours", "claude_usd", "claude_batch_usd")
        }
        for k in ("calls", "prompt_tokens", "output_tokens"):
            total[k] = int(total[k])
        for nb in NOTEBOOKS:  # every notebook appears, 06 with nothing new
            nbs.setdefault(nb, {})
        return {"notebooks": {nb: nbs[nb] for nb in NOTEBOOKS if nb in nbs}, "backbones": models, "total": total}

    def to_dict(self) -> dict:
        up = self.table("upper")
        return {
            "profile": self.profile,
            **up,
            "typical": self.table("typical"),
            "token_counting": self.token_counting,
            "throughput_tokens_per_s": self.throughput,
            "data_sources": self.data_sources,
            "prompts_sampled_per_cell": self.per_cell,
            "retrieval_embedding": "real (all-MiniLM-L6-v2)" if self.embed else "stand-in hash embedding",
            "n_cells": len(self.cells),
            # every cell priced, with the key of the run file it writes (agent cells): exactly what the notebooks run
            "cells": [{"notebook": ce.cell.notebook, "dataset": ce.cell.dataset, "system": ce.cell.system,
                       "model": ce.cell.model, "cot": ce.cell.cot, "lookback": ce.cell.lookback,
                       "options": ce.cell.extra, "judged_model": ce.cell.judged_model, "key": ce.cell.key,
                       "n_samples": ce.n_samples, "calls_upper": round(ce.upper.calls)} for ce in self.cells],
            "assumptions": ASSUMPTIONS,
        }


class _HashEmbed:
    """Deterministic unit vectors from each item's key and text: retrieval picks arbitrary top-k texts in the plan
    without loading the embedder or writing to the embedding cache."""

    def __call__(self, store, items):
        import hashlib

        import numpy as np

        if not items:
            return np.zeros((0, 0), dtype=np.float32)
        rows = []
        for key, text in items:
            v = np.frombuffer(hashlib.sha256(f"{key}|{text}".encode()).digest(), dtype=np.uint8).astype(np.float32)
            v -= 127.5
            rows.append(v / np.linalg.norm(v))
        return np.vstack(rows)


def _evenly(seq: list, k: int) -> list:
    if len(seq) <= k:
        return list(seq)
    return [seq[round(i * (len(seq) - 1) / max(k - 1, 1))] for i in range(k)]


def _msgs_text(msgs) -> tuple[str, int]:
    return "\n".join(m.content for m in msgs), len(msgs)


def build_plan(
    cfg: ExperimentConfig, *, per_cell: int = 3, embed: bool = False, throughput: dict | None = None, progress=None,
    typical: Typical = Typical(),
) -> Plan:
    """Enumerate the profile's cells and estimate each on sampled real prompts (see the module doc)."""
    import contextlib
    from unittest import mock

    from balms.agents import prompts as P
    from balms.agents.rag import user_history
    from balms.agents.raptor import day_tables
    from balms.agents.registry import get_system
    from balms.data.agent_input import input_text
    from balms.data.channels import get_window, resolve_channels
    from balms.experiments.cohorts import cohort
    from balms.judges import geval
    from balms.judges.rubric import DIMENSIONS, build_messages
    from balms.models.budgets import budget_for

    tp = {k: dict(v) for k, v in THROUGHPUT.items()}
    for k, v in (throughput or {}).items():
        tp.setdefault(k, {}).update(v)
    plan = Plan(cfg.profile, throughput=tp, per_cell=per_cell, embed=embed)
    built: dict = {}
    cells = enumerate_cells(cfg, built)
    cohorts = {d: cohort(d, cfg) for d in sorted({c.dataset for c in cells})}
    plan.data_sources = {d: co.source for d, co in cohorts.items()}
    models = sorted({c.model for c in cells})
    counters = {m: token_counter(m) for m in models}
    plan.token_counting = {m: c.method for m, c in counters.items()}
    prompt_cache: dict = {}  # (dataset, system, cot, lookback, options) -> [(text, n_messages)]
    summary_sets_seen: set = set()

    patch = (
        contextlib.nullcontext()
        if embed
        else mock.patch(
            "balms.agents.embeddings.EmbeddingStore.embed", new=lambda self, items: _HashEmbed()(self, items)
        )
    )
    with patch:
        for i, cell in enumerate(cells):
            if progress:
                progress(i, len(cells), cell)
            d = cell.dataset
            co = cohorts[d]
            cnt = counters[cell.model]
            if cell.system == "judge":
                judged_system = cell.extra["system"]
                samples, agent = built[cell].samples, built[cell].agent  # the CoT cell it grades
                n = len(samples)
                rat_tokens = (
                    budget_for(cell.judged_model, "cot", cfg)
                    if judged_system != "phia"
                    else budget_for(cell.judged_model, "phia_step", cfg)
                )
                pk = ("judge", d, judged_system)
                if pk not in prompt_cache:
                    got = []
                    for s in _evenly(samples, per_cell):
                        # the judge's window text: the data lines of the agent's prompt (of its look-back window)
                        win = agent.window(s, co.tables)[0] if hasattr(agent, "window") else get_window(
                            co.tables,
                            s,
                            context=True,
                            channels=resolve_channels(co.tables, getattr(agent, "channels", None)),
                        )
                        inputs = dict(window_text=input_text(win, agent.options()), gold=s.label,
                                      predicted=s.label, rationale="")
                        if cfg.judge_mode == "geval":  # one question per dimension, all on one shared prefix
                            prefix = geval.shared_prefix(**inputs)
                            got += [_msgs_text(geval.dimension_messages(prefix, dim)) for dim in DIMENSIONS]
                        else:
                            got.append(_msgs_text(build_messages(**inputs, justify=cfg.judge_justify)))
                    prompt_cache[pk] = got
                texts = prompt_cache[pk]
                p0 = sum(cnt.count(t, k) for t, k in texts) / max(len(texts), 1)  # per call
                # geval: a call per dimension answering one token; paper: one call per rationale at the judge budget
                per = len(DIMENSIONS) if cfg.judge_mode == "geval" else 1
                out = 1 if per > 1 else budget_for(cell.model, "judge", cfg)
                up = Usage(n * per, n * per * (p0 + rat_tokens), n * per * out)
                ty = Usage(n * per, n * per * (p0 + rat_tokens * typical.output_share),
                           n * per * out * (1 if per > 1 else typical.output_share))
                plan.cells.append(CellEstimate(cell, n, up, ty, p0, len(texts)))
                continue
            samples, agent = built[cell].samples, built[cell].agent
            n = len(samples)
            pk = (d, cell.system, cell.cot, cell.lookback, cell.options)
            if pk not in prompt_cache:  # RAPTOR renders every leaf of the history per prompt: fewer of those
                k = max(1, per_cell // 2) if get_system(cell.system).cost == "raptor" else per_cell
                prompt_cache[pk] = [_msgs_text(agent.first_prompt(s, co.tables)) for s in _evenly(samples, k)]
            texts = prompt_cache[pk]
            p0 = sum(cnt.count(t, k) for t, k in texts) / max(len(texts), 1)
            cost = get_system(cell.system).cost
            if cost == "phia":
                step = budget_for(cell.model, "phia_step", cfg)
                up_calls = int(cfg.phia_max_iters) + 1
                ty_calls = min(typical.phia_calls, up_calls)

                def conv(calls, out_per_step, obs, p0=p0):
                    return sum(p0 + k * (out_per_step + obs) for k in range(calls))

                up = Usage(
                    n * up_calls, n * conv(up_calls, step, PHIA_OBSERVATION_TOKENS["upper"]), n * up_calls * step
                )
                half = step * typical.output_share
                ty = Usage(
                    n * ty_calls, n * conv(ty_calls, half, PHIA_OBSERVATION_TOKENS["typical"]), n * ty_calls * half
                )
            else:
                out = budget_for(cell.model, "cot" if cell.cot else "zs", cfg)
                single = get_system(cell.system).batchable
                up = Usage(n, n * p0, n * out, single)
                ty = Usage(n, n * p0, n * out * (typical.output_share if cell.cot else typical.answer_share), single)
            if cost == "raptor":
                mem_lb = cell.lookback if cfg.raptor_memory == "lookback" else None
                chans = cell.extra.get("channels")
                skey = (d, cell.model, json.dumps(chans), cfg.raptor_memory, mem_lb)
                if skey not in summary_sets_seen:
                    summary_sets_seen.add(skey)
                    su, st = _summaries(
                        cfg,
                        co,
                        samples,
                        agent,
                        cnt,
                        budget_for(cell.model, "raptor_summary", cfg),
                        per_cell,
                        user_history,
                        day_tables,
                        P,
                        typical.output_share,
                    )
                    up.add(su)
                    ty.add(st)
            plan.cells.append(CellEstimate(cell, n, up, ty, p0, len(texts)))
    return plan


def _summaries(cfg, co, samples, agent, cnt, budget, per_cell, user_history, day_tables, P,
               share: float) -> tuple[Usage, Usage]:
    """RAPTOR day summaries of one summary set: distinct (user, memory day) x the mean summary prompt; `typical`
    at `share` of the budget (Typical.output_share)."""
    import dataclasses

    import pandas as pd

    from balms.data.channels import get_window, resolve_channels
    from balms.data.schema import Window

    days: set = set()
    tables = co.tables
    by_user: dict[str, list] = {}
    for s in samples:
        by_user.setdefault(s.user, []).append(s)
    for user, ss in by_user.items():
        if cfg.raptor_memory == "history":
            ud = pd.DatetimeIndex(tables.daily.xs(user, level="user").index).normalize()
            last = max(pd.Timestamp(s.window_end) for s in ss)
            days |= {(user, t) for t in ud[ud <= last]}
        else:
            for s in ss:
                days |= {(user, t) for t in pd.date_range(s.window_start, s.window_end, freq="D")}
    n_days = len(days)
    chans = resolve_channels(tables, agent.channels)
    texts = []
    for s in _evenly(samples, max(1, per_cell // 2 + 1)):
        win = get_window(tables, s, context=agent.context, channels=chans)
        hist = user_history(tables, win, cfg.raptor_memory)
        for ts in _evenly(list(hist.daily.index), 3):  # a few days; day_tables over one day each (fast)
            one = Window(
                sample=dataclasses.replace(s, window_end=ts.date()),
                target=hist.target,
                daily=hist.daily.loc[[ts]],
                channels=hist.channels,
                profile=hist.profile,
            )
            dt_ = day_tables(tables, one)
            if ts in dt_:
                texts.append(
                    P.SUMMARY_SYSTEM_PROMPT
                    + "\n"
                    + P.summary_prompt(ts.date().isoformat(), dt_[ts], tables.subday_unit)
                )
    p = sum(cnt.count(t, 2) for t in texts) / len(texts) if texts else 0
    up = Usage(n_days, n_days * p, n_days * budget)
    return up, Usage(n_days, n_days * p, n_days * budget * share)


# ------------------------------------------------------------------------------------------------ CLI ---
def servers_by_model(entries: list[str]) -> dict[str, int]:
    """`--servers`: each entry `MODEL=N` (N servers of a registry model) or a server URL (asked for what it
    serves: /v1/models, as routing does); -> {model name: number of servers}."""
    from balms.models.discovery import discover
    from balms.models.registry import MODELS

    by_id = {s.model_id: name for name, s in MODELS.items()}
    out: dict[str, int] = {}
    urls = []
    for e in (x.strip() for x in entries if x.strip()):
        m = re.fullmatch(r"([^=]+)=(\d+)", e)
        if m and "://" not in e:
            if m.group(1) not in MODELS:
                raise ValueError(f"--servers {e!r}: unknown model {m.group(1)!r}; known: {', '.join(MODELS)}")
            out[m.group(1)] = out.get(m.group(1), 0) + int(m.group(2))
        else:
            urls.append(e)
    for info in discover(urls) if urls else []:
        if not info.models:
            raise ValueError(f"--servers: {info.url} answered no model list ({info.error or 'empty'})")
        for mid in info.models:
            name = by_id.get(mid, mid)
            out[name] = out.get(name, 0) + 1
    return out


# The drain after the busiest server's work: its last requests, each as long as one request in a full batch. The
# scheduler runs the chains of dependent calls (RAPTOR, PHIA) first and single calls fill the servers while the
# last chains drain, so one request time is left, not the last sample's whole chain (bench-scale: the busiest
# server drained for 4, 7 and 17 s at 4, 8 and 16 servers, whose requests took 4, 8 and 16 s)
TAIL_CALLS = 1


def schedule_hours(backbones: dict[str, dict], servers: dict[str, int], throughput: dict, *,
                   slots: int = 16, tail_calls: int = TAIL_CALLS) -> dict:
    """Wall hours with the scheduler (balms.experiments.scheduler) on `servers` ({model: n servers}): every
    server busy until its model's work is done (GPU-hours / GPUs per server / servers), then a drain of
    `tail_calls` request times, each as long as one request in a batch of `slots` (a server's requests in
    flight): the run lasts as long as the busiest model's. Claude runs over the API beside them."""
    from balms.models.registry import UnknownModelError, spec

    per_model, tails, missing = {}, {}, []
    for m, v in backbones.items():
        try:
            kind = spec(m).backend
        except UnknownModelError:
            kind = "openai"
        if kind not in ("openai", "vllm-local"):
            continue
        if not servers.get(m):
            missing.append(m)
            continue
        t = throughput[size_class(m)]
        calls = v.get("calls") or 0
        one = slots * ((v.get("prompt_tokens", 0) / t["prefill"] + v.get("output_tokens", 0) / t["decode"]) / calls
                       if calls else 0.0)  # seconds one request spends in service
        tails[m] = tail_calls * one / 3600
        per_model[m] = v["gpu_hours"] / t["gpus"] / servers[m] + tails[m]
    if missing:
        raise ValueError(f"no server given for {', '.join(missing)} (--servers MODEL=N or URLs serving it)")
    hours = max(per_model.values(), default=0.0)
    return {"hours": round(hours, 3), "per_model_hours": {m: round(h, 3) for m, h in per_model.items()},
            "tail_hours": {m: round(h, 3) for m, h in tails.items()},
            "servers": servers, "utilisation": {m: round((h - tails[m]) / hours, 3) if hours else 0.0
                                                for m, h in per_model.items()}}


def format_plan(d: dict) -> str:
    """The plan as text: per notebook and backbone, totals, then how it was counted."""

    def row(name, v):
        return (
            f"  {name:<34} {v['calls']:>11,} {v['prompt_tokens']:>15,} {v['output_tokens']:>13,} "
            f"{v['gpu_hours']:>9,.1f} {v['claude_usd']:>10,.2f} {v['claude_batch_usd']:>10,.2f}"
        )

    head = (
        f"  {'':<34} {'calls':>11} {'prompt tokens':>15} {'output tokens':>13} {'GPU h':>9} {'Claude $':>10} "
        f"{'batch $':>10}"
    )
    lines = [
        f"balms plan: profile {d['profile']!r}, {d['n_cells']} cells (data: "
        + ", ".join(f"{k} {v}" for k, v in d["data_sources"].items())
        + ")",
        "",
        "UPPER BOUND",
        head,
    ]
    for nb, models in d["notebooks"].items():
        lines.append(f" {nb}" + ("" if models else "  (no new cells: re-reads earlier notebooks' cells)"))
        for m, v in models.items():
            lines.append(row(m, v))
    lines += ["", " per backbone / judge", head]
    for m, v in d["backbones"].items():
        lines.append(row(m, v))
    lines.append(row("TOTAL (upper bound)", d["total"]))
    lines.append(row("TOTAL (typical)", d["typical"]["total"]))
    lines += [
        "",
        "token counting: " + "; ".join(f"{m}: {v}" for m, v in d["token_counting"].items()),
        f"prompts counted: {d['prompts_sampled_per_cell']} sampled per cell, scaled to each cell's samples; "
        f"retrieval: {d['retrieval_embedding']}",
        "throughput (tokens/s per server, GPUs per server): "
        + "; ".join(
            f"{k}: prefill {v['prefill']:g}, decode {v['decode']:g}, {v['gpus']:g} GPU"
            for k, v in d["throughput_tokens_per_s"].items()
        ),
        "assumptions:",
    ]
    lines += [f"  - {a}" for a in d["assumptions"]]
    if d.get("schedule"):
        sch = d["schedule"]
        lines += ["", "on the given servers, all cells in flight (balms.experiments.scheduler): "
                  f"{sch['upper']['hours']:,.2f} h upper bound, {sch['typical']['hours']:,.2f} h typical "
                  "(the busiest model's GPU time over its servers, then its last samples' chain of calls; Claude "
                  "runs beside them)"]
        lines += [f"  {m:<34} {n} server(s): {sch['upper']['per_model_hours'][m]:,.2f} h upper, "
                  f"{sch['typical']['per_model_hours'][m]:,.2f} h typical" for m, n in sch["upper"]["servers"].items()
                  if m in sch["upper"]["per_model_hours"]]
    return "\n".join(lines)


def format_markdown(d: dict, judge_model: str | None = None) -> str:
    """The plan's per-backbone table as Markdown (the runbook's, generated: `balms plan --markdown`)."""
    def mt(x):
        return f"{x / 1e6:,.1f} M"

    def row(name, v):
        gpu = f"{v['gpu_hours']:,.1f}" if v["gpu_hours"] else ""
        usd = (f"{v['claude_usd']:,.2f}", f"{v['claude_batch_usd']:,.2f}") if v["claude_usd"] else ("", "")
        return f"| {name} | {v['calls']:,} | {mt(v['prompt_tokens'])} | {mt(v['output_tokens'])} | {gpu} | " \
               f"{usd[0]} | {usd[1]} |"

    lines = [f"`balms plan --profile {d['profile']}`: {d['n_cells']} cells; data: "
             + ", ".join(f"{k} {v}" for k, v in d["data_sources"].items()) + "; tokens: "
             + "; ".join(sorted({v.split(" (")[0] for v in d["token_counting"].values()})) + ".",
             "", "| | calls | prompt tokens | output tokens | GPU h | Claude $ | Claude $ (batch) |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    lines += [row(m + (" (judge)" if m == judge_model else ""), v) for m, v in d["backbones"].items()]
    lines += [row("**total, upper bound**", d["total"]), row("**total, typical**", d["typical"]["total"])]
    return "\n".join(lines)


def _parse_throughput(items: list[str]) -> dict:
    """`CLASS=prefill:decode[:gpus]`, e.g. `70b=1500:200:2`."""
    out = {}
    for it in items or []:
        m = re.fullmatch(r"(\w+)=(\d+(?:\.\d+)?):(\d+(?:\.\d+)?)(?::(\d+))?", it.strip())
        if not m:
            raise SystemExit(f"--throughput expects CLASS=prefill:decode[:gpus] (e.g. 70b=1500:200:2), got {it!r}")
        v = {"prefill": float(m.group(2)), "decode": float(m.group(3))}
        if m.group(4):
            v["gpus"] = int(m.group(4))
        out[m.group(1).lower()] = v
    return out


def _cmd(args) -> int:
    import sys
    import time

    from balms.experiments.config import ConfigError, load, parse_cli_overrides

    try:
        cfg = load(args.profile, **parse_cli_overrides(args.set))
    except ConfigError as exc:
        print(f"balms plan: {exc}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()

    def progress(i, n, cell):
        if args.progress and i % 20 == 0:
            print(
                f"  planning cell {i + 1}/{n} ({cell.notebook} {cell.dataset} {cell.system} {cell.model})",
                file=sys.stderr,
                flush=True,
            )

    plan = build_plan(
        cfg, per_cell=args.per_cell, embed=args.embed, throughput=_parse_throughput(args.throughput), progress=progress
    )
    d = plan.to_dict()
    if args.servers:
        try:
            srv = servers_by_model(args.servers.split(","))
            d["schedule"] = {w: schedule_hours(t["backbones"], srv, plan.throughput, slots=cfg.server_slots)
                             for w, t in (("upper", d), ("typical", d["typical"]))}
        except ValueError as exc:
            print(f"balms plan: {exc}", file=sys.stderr)
            return 2
    d["planning_s"] = round(time.perf_counter() - t0, 1)
    if args.json:
        print(json.dumps(d, indent=2))
    elif args.markdown:
        print(format_markdown(d, cfg.judge_model))
    else:
        print(format_plan(d))
        print(f"(planned in {d['planning_s']} s, no model called)")
    return 0


def register(sub) -> None:
    """`balms plan --profile NAME [--json]`."""
    p = sub.add_parser("plan", help="calls, tokens, GPU hours and Claude cost of a profile, before any model call")
    p.add_argument("--profile", default="demo")
    p.add_argument("--set", default="", help="overrides as '-p name value ...' (make's P)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--markdown", action="store_true", help="the per-backbone table as Markdown (the runbook's)")
    p.add_argument("--per-cell", type=int, default=3, help="prompts built and counted per cell (then scaled)")
    p.add_argument("--embed", action="store_true", help="retrieve with the real embedder (slow on a CPU)")
    p.add_argument(
        "--throughput",
        action="append",
        default=[],
        help="CLASS=prefill:decode[:gpus] tokens/s per server (classes: 7b, 14b, 70b, small)",
    )
    p.add_argument("--progress", action="store_true", help="print planning progress to stderr")
    p.add_argument("--servers", default="", help="comma-separated MODEL=N or server URLs: wall hours on them with "
                   "the scheduler (profile's servers: --servers with their URLs)")
    p.set_defaults(func=_cmd)
