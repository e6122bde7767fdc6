"""All cells in flight: every cell of a grid (or of several notebooks) runs at once, each server kept at its own
limit of requests in flight, instead of one cell after another.

Why: run cell by cell, only the server of the current cell works and every cell ends with a tail (its slowest
samples) during which its own server idles too; on the paper's four-GPU node the run took 10-15 times its
server-bound minimum (issue 27). Here each cell is an ordinary resumable `balms.runner.run_samples` (its lock,
its records file, its manifest: nothing about records depends on the interleaving), all started together, and
the only thing that meters the servers is `balms.models.slots`: a model call takes a slot of its server while it
is in flight, so a PHIA or RAPTOR sample running code or embedding holds none and other samples fill the server.

Limits: `cfg.server_slot_limits[url]`, else `cfg.server_slots`, for every OpenAI-compatible server the grid's
models route to; `cfg.anthropic_slots` for the Anthropic API (its retry-after pauses every call: slots.py).
Spending cap (`cfg.max_usd`, `cfg.max_gpu_hours`): balms.experiments.budget; samples the cap does not allow
are not started, the report says how far the run got. Threads: each cell runs `cfg.concurrency` samples at
once; cells are started in an order that alternates models (so every server gets work first) for as long as
the threads in use stay within `cfg.scheduler_threads`.
"""

from __future__ import annotations

import sys
import threading
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Sequence

from balms.experiments.config import ExperimentConfig
from balms.records import PredictionRecord


@dataclass
class ScheduleReport:
    """What a scheduled run did: per cell, its records (sample order) and the runner's result; the slot limits."""

    records: list[list[PredictionRecord]]
    results: list = field(default_factory=list)
    limits: dict[str, int] = field(default_factory=dict)
    stopped: str | None = None  # how far the run got when the spending cap stopped it, else None


# What a record says about the run that made it rather than about the prediction: timings, whether a call was
# answered from a cache (the first of several concurrent identical calls computes, the others hit) and how many
# RAPTOR day summaries this sample happened to write first. Everything else is the same whatever the interleaving.
RUN_FIELDS = ("latency_s", "wall_s")
RUN_STEP_META = ("latency_s", "cached", "finish_reason", "usage_unknown", "summaries_generated")


def record_content(rec: PredictionRecord) -> dict:
    """A record without its run provenance (RUN_FIELDS, RUN_STEP_META): equal across schedules and resumes."""
    d = rec.model_dump(exclude=set(RUN_FIELDS))
    for st in d["transcript"]:
        st["meta"] = {k: v for k, v in st["meta"].items() if k not in RUN_STEP_META}
    return d


def interleave(cells: Sequence, key: Callable) -> list[int]:
    """Indices of `cells` taking one per `key` in turn (first-seen key order), so every model starts early."""
    groups: dict = defaultdict(list)
    for i, c in enumerate(cells):
        groups[key(c)].append(i)
    queues = list(groups.values())
    out: list[int] = []
    while any(queues):
        for q in queues:
            if q:
                out.append(q.pop(0))
    return out


def configure_slots(cfg: ExperimentConfig, models: Sequence[str]) -> dict[str, int]:
    """Set the slot limit of every server the models route to (and of the Anthropic API); returns them."""
    from balms.models.discovery import server_urls
    from balms.models.openai_http import normalise_base_url
    from balms.models.registry import resolve_spec
    from balms.models.slots import ANTHROPIC, SLOTS

    limits: dict[str, int] = {}
    kinds = set()
    for m in models:
        try:
            kinds.add(resolve_spec(m, cfg.servers).backend)
        except Exception:  # an unknown name is reported by check_models / make_cell, not here
            continue
    if "openai" in kinds:
        overrides = {normalise_base_url(u): int(n) for u, n in cfg.server_slot_limits.items()}
        for url in server_urls(cfg.servers):
            url = normalise_base_url(url)
            limits[url] = overrides.get(url, cfg.server_slots)
    if "anthropic" in kinds:
        limits[ANTHROPIC] = cfg.anthropic_slots
    for k, n in limits.items():
        SLOTS.set_limit(k, n)
    return limits


def run_cells(cfg: ExperimentConfig, cells: Sequence, *, progress: bool = True) -> ScheduleReport:
    """Run (or resume) every cell (balms.experiments.grid.Cell) at once; records per cell in sample order. Under
    a spending cap the samples it does not allow are not started, and the report's `stopped` says how far the
    run got."""
    from balms.experiments.batching import prefetch_cell
    from balms.experiments.budget import CappedAgent, SpendingCap
    from balms.experiments.cohorts import cohort
    from balms.experiments.grid import describe_cell
    from balms.models.registry import get_backend
    from balms.runner import load_records, run_samples

    cells = list(cells)
    limits = configure_slots(cfg, list(dict.fromkeys(c.spec.model for c in cells)))
    paths = [c.spec.run_path(cfg.runs_root()) for c in cells]
    first_of: dict = {}  # the same cell asked twice (two notebooks): run once
    for i, p in enumerate(paths):
        first_of.setdefault(p, i)
    todo = [i for i in interleave(cells, lambda c: c.spec.model) if first_of[paths[i]] == i]
    results: list = [None] * len(cells)
    threads_per = [max(1, min(cfg.concurrency, len(c.samples))) for c in cells]
    budget = max(cfg.scheduler_threads, max(threads_per, default=1))
    cond = threading.Condition()
    in_use = [0]
    n_done = [0]
    cap = SpendingCap.from_cfg(cfg)
    agents = [c.agent for c in cells]
    if cap is not None:
        cap.already(r for i in todo if paths[i].exists() for r in load_records(paths[i]))
        agents = [CappedAgent(c.agent, cap, (c.spec.system, c.spec.model)) for c in cells]

    def run_one(i: int):
        cell = cells[i]
        try:
            prefetch_cell(cfg, cell)
            backend = get_backend(cell.spec.model, cache_mode=cfg.cache_mode, servers=cfg.servers)
            co = cohort(cell.spec.dataset, cfg)
            res = run_samples(agents[i], backend, cell.samples, co.tables, paths[i],
                              concurrency=threads_per[i], progress=False, spec=cell.spec,
                              manifest_extra={"profile": cfg.profile, "source": co.source, "scheduler": True})
            results[i] = res
            if progress:
                with cond:
                    n_done[0] += 1
                    k = n_done[0]
                print(f"scheduler: {k}/{len(todo)} cells done: {describe_cell(cell.spec)} "
                      f"({res.n_new} new, {res.n_errors} errors, {res.wall_s:.1f} s)", file=sys.stderr, flush=True)
            return res
        finally:
            with cond:
                in_use[0] -= threads_per[i]
                cond.notify_all()

    futures = []
    with ThreadPoolExecutor(max_workers=max(1, len(todo)), thread_name_prefix="balms-cell") as pool:
        for i in todo:
            if cap is not None and cap.n_refused:  # the cap refused a sample: start no more cells
                break
            with cond:
                while in_use[0] and in_use[0] + threads_per[i] > budget:
                    cond.wait()
                in_use[0] += threads_per[i]
            futures.append(pool.submit(run_one, i))
        errors = [f.exception() for f in futures if f.exception() is not None]
    if errors:
        raise errors[0]
    why = None
    if cap is not None and cap.n_refused:
        n_all = sum(len(c.samples) for i, c in enumerate(cells) if first_of[paths[i]] == i)
        n_done = sum(len(load_records(paths[i])) for i in todo if paths[i].exists())
        why = (f"spending cap reached ({cap.describe()}): {n_done} of {n_all} samples done, the rest not started; "
               "everything is kept and resumable: raise -p max_usd / -p max_gpu_hours and run again")
    if why and progress:
        print(f"scheduler: {why}", file=sys.stderr, flush=True)
    records = []
    for i, c in enumerate(cells):
        p = paths[i]
        by_id = {r.sample_id: r for r in load_records(p)} if p.exists() else {}
        records.append([by_id[s.sample_id] for s in c.samples if s.sample_id in by_id])
        results[i] = results[i] or results[first_of[p]]
    return ScheduleReport(records, results, limits, why)
