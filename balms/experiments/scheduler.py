"""All cells in flight: every sample of a grid (or of several notebooks) on one bounded pool per model, each
server kept at its own limit of requests in flight (balms.models.slots), instead of one cell after another.

Each cell keeps its own resumable run file, lock and manifest (balms.runner.CellRun); nothing about its records
depends on the interleaving. A model's samples go into its pool all at once in a static order: samples with
several calls (RAPTOR, PHIA) first, whose chains make a run's tail, then sample by sample across the model's cells.
A model's pool has SAMPLES_PER_SLOT threads per slot of its servers (a sample that embeds or runs code holds
none); embedded models (LOCAL_BACKENDS) share one pool of `cfg.concurrency`, cell after cell: this machine is
their server. Stops: Ctrl-C, or a cell whose every sample failed (balms.experiments.errors.check_cell, unless
`cfg.allow_errors`): no sample or call starts after it, finished records are kept (balms.models.slots.drive).
The spending cap (`cfg.max_usd`, `cfg.max_gpu_hours`, balms.experiments.budget) starts only the samples it
allows. Claude's single-call cells with `cfg.anthropic_batch`: their Message Batches, all cells' requests
submitted together, are fetched on a thread of their own, each cell's samples waiting for its model's batches.
Retrieval samples wait for their embeddings, computed ahead on a thread of their own (`embedding_stage`) while the
other samples' calls go on.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Sequence

from balms.cellspec import describe_cell
from balms.experiments.config import ExperimentConfig
from balms.models.slots import STOP, NotStarted
from balms.records import PredictionRecord
from balms.runfile import cell_records


@dataclass
class ScheduleReport:
    """What a scheduled run did: per cell, its records (sample order) and the runner's result; the slot limits."""

    records: list[list[PredictionRecord]]
    results: list = field(default_factory=list)
    limits: dict[str, int] = field(default_factory=dict)
    stopped: str | None = None  # how far the run got when the spending cap stopped it, else None


# Samples at once per slot of a model's servers: enough that a server never waits for a sample's own CPU work
# (its window, RAPTOR's leaves, PHIA's code) before the next request; few enough that the client does not spread
# its CPU over hundreds of half-built samples while the servers idle (issue 27).
SAMPLES_PER_SLOT = 2
LOCAL_BACKENDS = ("llamacpp", "vllm-local")  # models run inside this process: this machine is their server


def configure_slots(cfg: ExperimentConfig, models: Sequence[str]) -> dict[str, int]:
    """Set the slot limit of every server the models route to (and of the Anthropic API); returns them. The
    servers are asked what they serve once, here, before any cell starts (every backend then routes from it)."""
    from balms.models.discovery import discover, server_urls
    from balms.models.openai_http import normalise_base_url
    from balms.models.slots import ANTHROPIC, SLOTS

    kinds = {cfg.backend_kind(m) for m in models}
    limits: dict[str, int] = {}
    if "openai" in kinds:
        overrides = {normalise_base_url(u): int(n) for u, n in cfg.server_slot_limits.items()}
        urls = [normalise_base_url(u) for u in server_urls(cfg.servers)]
        discover(urls)
        limits = {u: overrides.get(u, cfg.server_slots) for u in urls}
    if "anthropic" in kinds:
        limits[ANTHROPIC] = cfg.anthropic_slots
    for k, n in limits.items():
        SLOTS.set_limit(k, n)
    return limits


def model_slots(cfg: ExperimentConfig, model: str, limits: dict[str, int]) -> int | None:
    """The slots of the servers `model` routes to (None: not metered, e.g. a stand-in or embedded)."""
    from balms.models.discovery import servers_for
    from balms.models.registry import resolve_spec
    from balms.models.slots import ANTHROPIC

    kind = cfg.backend_kind(model)
    if kind == "anthropic":
        return limits.get(ANTHROPIC)
    if kind != "openai":
        return None
    urls = [u for u in limits if u != ANTHROPIC]
    return sum(limits[u] for u in servers_for(resolve_spec(model, cfg.servers).model_id, urls)) or None


def embedding_stage(todo: Sequence, cells: Sequence, runs: dict) -> dict:
    """Embeddings off the critical path: one thread embeds, in the samples' static order (`todo`: (cell index,
    sample) pairs), what each retrieval sample (an agent with an `embedder`: RAG, RAPTOR) will ask for: its agent's
    `first_prompt` embeds its memory days or leaves and its query into the text-keyed embedding cache
    (balms.agents.embeddings) without calling a model. Once per agent configuration and sample, however many
    backbones run it: concurrent cells of several backbones each embedded the same texts. The calls of every other
    sample go on meanwhile. Returns {(cell index, sample id): (Event set once that sample's embeddings are in,
    [seconds the stage spent on them])}: a sample's latency counts that time, as it would have paid it alone."""
    from balms.runfile import _agent_options

    firsts: dict = {}
    ready: dict = {}
    for i, s in todo:
        agent = cells[i].agent
        key = (type(agent).__name__, repr(sorted(_agent_options(agent).items())), s.sample_id)
        ev, _, _, took = firsts.setdefault(key, (threading.Event(), i, s, [0.0]))
        ready[(i, s.sample_id)] = (ev, took)

    def work() -> None:
        try:
            for ev, i, s, took in firsts.values():
                if STOP.is_set():
                    return
                t0 = time.perf_counter()
                with contextlib.suppress(Exception):  # the sample then embeds (and fails, if it must) itself
                    cells[i].agent.first_prompt(s, runs[i].tables)
                took[0] = time.perf_counter() - t0
                ev.set()
        finally:
            for ev, *_ in firsts.values():
                ev.set()

    if firsts:
        threading.Thread(target=work, daemon=True, name="balms-embed").start()
    return ready


def _wait(ev: threading.Event) -> bool:
    """Wait for `ev`; False if the run stopped first."""
    while not ev.wait(0.2):
        if STOP.is_set():
            return False
    return True


def schedule_cells(cfg: ExperimentConfig, cells: Sequence, *, progress: bool = True) -> ScheduleReport:
    """Run (or resume) every cell (balms.experiments.grid.Cell) at once; records per cell in sample order (see the
    module doc). A failed cell's error is raised once the samples in flight have ended; under a spending cap the
    report's `stopped` says how far the run got.

    Cells another process is running (its lock is held: two notebooks at once) are left to it and run after the
    others, once their locks are free: by then their records are on disk (or their calls in the cache), so this
    process neither waits for the other's whole run nor repeats its calls. Locks are taken in path order (no two
    processes can each hold a lock the other waits for)."""
    from balms.experiments.budget import SpendingCap

    cells = list(cells)
    limits = configure_slots(cfg, list(dict.fromkeys(c.spec.model for c in cells)))
    paths = [c.spec.run_path(cfg.runs_root()) for c in cells]
    first_of: dict = {}  # the same cell asked twice (two notebooks): run once
    todo = [i for i, p in enumerate(paths) if first_of.setdefault(p, i) == i]
    cap = None if cfg.max_usd is None and cfg.max_gpu_hours is None else SpendingCap(cfg.max_usd, cfg.max_gpu_hours)
    where = os.environ.get("BALMS_NOTEBOOK")
    tag = f"[{where}] scheduler" if where else "scheduler"
    results: list = [None] * len(cells)
    busy = _run_locked(cfg, cells, paths, todo, limits, cap, results, tag, progress=progress, wait=False)
    if busy:
        _run_locked(cfg, cells, paths, busy, limits, cap, results, tag, progress=progress, wait=True)
    why = None
    if cap is not None and cap.n_refused:
        n_all = sum(len(cells[i].samples) for i in todo)
        n_kept = sum(len(cell_records(paths[i], cells[i])) for i in todo)
        why = (f"spending cap reached ({cap.describe()}): {n_kept} of {n_all} samples done, the rest not started; "
               "everything is kept and resumable: raise -p max_usd / -p max_gpu_hours and run again")
        if progress:
            print(f"{tag}: {why}", file=sys.stderr, flush=True)
    return ScheduleReport([cell_records(paths[i], c) for i, c in enumerate(cells)],
                          [results[i] or results[first_of[paths[i]]] for i in range(len(cells))], limits, why)


def _run_locked(cfg, cells, paths, todo, limits, cap, results, tag, *, progress: bool, wait: bool) -> list[int]:
    """Run the cells `todo` whose locks this process takes (all of them with `wait`); returns those left because
    another process held their lock."""
    from balms.agents.registry import get_system
    from balms.experiments import batching
    from balms.experiments.cohorts import cohort
    from balms.experiments.errors import check_cell
    from balms.models.registry import get_backend
    from balms.models.slots import drive
    from balms.runfile import cell_lock
    from balms.runner import CellRun, progress_bar
    from balms.threads import Pool

    runs: dict[int, CellRun] = {}
    busy: list[int] = []
    with contextlib.ExitStack() as stack:
        for i in sorted(todo, key=lambda j: str(paths[j])):
            if not stack.enter_context(cell_lock(paths[i], progress=progress, wait=wait)):
                busy.append(i)
        todo = [i for i in todo if i not in busy]
        if busy and progress:
            print(f"{tag}: {len(busy)} cell(s) locked by another process: they run after the others",
                  file=sys.stderr, flush=True)
        for i in todo:
            co = cohort(cells[i].spec.dataset, cfg)
            backend = get_backend(cells[i].spec.model, cache_mode=cfg.cache_mode, servers=cfg.servers)
            runs[i] = CellRun(cells[i].agent, backend, cells[i].samples, co.tables, paths[i],
                              concurrency=cfg.concurrency, timeout_s=cfg.call_deadline_s, spec=cells[i].spec,
                              retry_errors=cfg.retry_errors, manifest_extra={
                                  "profile": cfg.profile, "source": co.source, "scheduler": True})
        left = {i: len(runs[i].todo) for i in todo}
        if cap is not None:
            cap.already(r for i in todo for r in cell_records(paths[i], cells[i]))
        # one pool per model: SAMPLES_PER_SLOT per slot of its servers (unmetered: its cells' concurrency);
        # embedded models share one of cfg.concurrency
        pool_of = {i: "local" if cfg.backend_kind(cells[i].spec.model) in LOCAL_BACKENDS else cells[i].spec.model
                   for i in todo}
        size: dict = {}
        for i in todo:
            size[pool_of[i]] = size.get(pool_of[i], 0) + min(cfg.concurrency, left[i])
        for key, n in size.items():
            slots = None if key == "local" else model_slots(cfg, key, limits)
            bound = cfg.concurrency if key == "local" else SAMPLES_PER_SLOT * slots if slots else n
            size[key] = max(1, min(cfg.scheduler_threads, n, bound))
        pools = {k: stack.enter_context(contextlib.closing(Pool(n, f"balms-{k}"))) for k, n in size.items()}
        if progress:
            print(f"{tag}: {len(todo)} cells in flight on {len(limits)} server(s) "
                  f"({', '.join(f'{k} {n} slots' for k, n in limits.items()) or 'no server limits'}); "
                  f"threads per model: {size}", file=sys.stderr, flush=True)
        bar = stack.enter_context(progress_bar(sum(len(cells[i].samples) for i in todo),
                                               sum(runs[i].n_before for i in todo), f"{tag}: samples", progress))
        # Claude's Message Batches: every batched cell's requests submitted together, each cell's samples waiting
        # for its model's batches (balms.experiments.batching); what stopped them is raised by the cell's samples
        batched = {i: threading.Event() for i in todo if batching.batched(cfg, cells[i])}
        fetch_error: dict[int, BaseException | None] = {}

        def fetched(i: int, error: BaseException | None) -> None:
            fetch_error[i] = error
            batched[i].set()

        def sample(i: int, s):
            ev, took = ready.get((i, s.sample_id), (None, [0.0]))
            if not all(_wait(e) for e in (batched.get(i), ev) if e is not None):  # the run stopped first
                return i, None
            if fetch_error.get(i):
                raise fetch_error[i]
            kind = (cells[i].spec.system, cells[i].spec.model)
            try:
                rec = runs[i].predict(s) if cap is None else cap.spend(kind, lambda: runs[i].predict(s))
            except NotStarted:  # the cap refused it, or the run stopped: no record
                return i, None
            if rec is not None and took[0]:  # its embedding, done ahead by the stage, is part of its latency
                rec = rec.model_copy(update={"latency_s": rec.latency_s + took[0]})
            return i, rec

        n_done = [sum(not runs[i].todo for i in todo)]

        def write(done) -> None:
            i, rec = done
            if rec is not None:
                runs[i].write(rec)
                bar.update(1)
            left[i] -= 1
            if not left[i]:
                n_done[0] += 1
                if progress:
                    r = runs[i].session
                    bar.write(f"{tag}: {n_done[0]}/{len(todo)} cells done: {describe_cell(cells[i].spec)} "
                              f"({r['n_new']} new, {r['n_errors_new']} errors)", file=sys.stderr)
                check_cell(cfg.allow_errors, describe_cell(cells[i].spec), cell_records(paths[i], cells[i]))

        # the static order, submitted best first; embedded models: cell after cell (this machine serves one at a time)
        tier = {i: int(get_system(cells[i].spec.system).single_call) for i in todo}
        jobs = sorted(((pos, k) if pool_of[i] == "local" else (tier[i], k, pos), i, s)
                      for pos, i in enumerate(todo) for k, s in enumerate(runs[i].todo))

        ready = embedding_stage([(i, s) for _, i, s in jobs if getattr(cells[i].agent, "embedder", None)], cells, runs)
        status = "incomplete"
        try:
            if batched:
                threading.Thread(target=batching.prefetch_cells, args=(cfg, {i: cells[i] for i in batched}),
                                 kwargs={"done": fetched}, daemon=True, name="balms-batches").start()
            drive(((pools[pool_of[i]], rank, sample, i, s) for rank, i, s in jobs), write)
            for i in todo:  # a cell with nothing left to do is checked as it is
                if not runs[i].todo:
                    check_cell(cfg.allow_errors, describe_cell(cells[i].spec), cell_records(paths[i], cells[i]))
            status = "complete"
        finally:
            for i in todo:
                results[i] = runs[i].close(status)
    return busy
