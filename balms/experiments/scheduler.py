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

Order: each sample gets a rank (multi-call samples before single calls, then the order they started); its calls
wait for a server slot in that rank, its RAPTOR day summaries queue on their model's pool in it, and as it starts
it waits for a turn at the client's CPU in it (per model: balms.models.slots.Turns). Chains of calls start first
and single calls fill the servers while the last chains drain (bench-scale: a drain of about one request time).
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Sequence

from balms.cellspec import describe_cell
from balms.experiments.config import ExperimentConfig
from balms.models.slots import Turns
from balms.records import PredictionRecord
from balms.stores import one_per_key
from balms.threads import started_pool


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
    """Set the slot limit of every server the models route to (and of the Anthropic API); returns them. The
    servers are asked what they serve once, here, before any cell starts (every backend then routes from it)."""
    from balms.models.discovery import discover, server_urls
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
        urls = [normalise_base_url(u) for u in server_urls(cfg.servers)]
        discover(urls)
        for url in urls:
            limits[url] = overrides.get(url, cfg.server_slots)
    if "anthropic" in kinds:
        limits[ANTHROPIC] = cfg.anthropic_slots
    for k, n in limits.items():
        SLOTS.set_limit(k, n)
    return limits


# Samples started at once per slot of the servers a model routes to: enough that a server never waits for a
# sample's own CPU work (its window, RAPTOR's leaves, PHIA's code) before the next request, few enough that the
# client does not spread its CPU over hundreds of half-built samples while the servers idle (issue 27: with all
# 512 samples of the notebook-01 grid started at once, the first request left after tens of seconds).
SAMPLES_PER_SLOT = 2


def model_slots(cfg: ExperimentConfig, cell, limits: dict[str, int]) -> int | None:
    """The slots of the servers `cell`'s model routes to (None: not metered, e.g. a stand-in or embedded)."""
    from balms.models.discovery import servers_for
    from balms.models.registry import UnknownModelError, resolve_spec
    from balms.models.slots import ANTHROPIC

    try:
        kind = resolve_spec(cell.spec.model, cfg.servers).backend
    except UnknownModelError:
        return None
    if kind == "anthropic":
        return limits.get(ANTHROPIC)
    if kind != "openai":
        return None
    urls = [u for u in limits if u != ANTHROPIC]
    return sum(limits[u] for u in servers_for(cell.spec.model_id, urls)) or None


class Admission:
    """Samples in flight per model: at most `limit` at once; the waiting start by priority (lower first), then
    in arrival order. Multi-call samples (RAPTOR, PHIA) go first: their chains of calls are what makes a run's
    tail, started last they would run alone at the end while the servers idle."""

    def __init__(self):
        self._cond = threading.Condition()
        self._limit: dict = {}
        self._busy: dict = defaultdict(int)
        self._waiting: dict = defaultdict(list)  # key -> [(priority, ticket)]
        self._tickets = iter(range(1 << 62))

    def set_limit(self, key, limit: int | None) -> None:
        with self._cond:
            self._limit[key] = limit

    @contextmanager
    def admitted(self, key, priority: int):
        with self._cond:
            me = (priority, next(self._tickets))
            self._waiting[key].append(me)
            lim = self._limit.get(key)
            while lim is not None and (self._busy[key] >= lim or min(self._waiting[key]) != me):
                self._cond.wait()
            self._waiting[key].remove(me)
            self._busy[key] += 1
            self._cond.notify_all()
        try:
            yield
        finally:
            with self._cond:
                self._busy[key] -= 1
                self._cond.notify_all()


_STARTED = itertools.count()  # samples in the order they were admitted: their calls' rank for a server slot
_TIER = 1 << 40  # a sample of priority p ranks after every sample of a lower priority


@one_per_key
def _turns(model: str) -> Turns:
    """Each model's samples take turns at the client's CPU as they start (balms.models.slots.Turns), the models
    side by side: in one queue for all, the busiest model's samples waited behind the others' preparation while
    its servers idled (bench-scale measures both, bench/scale.json; what turns cost 4 servers mid-run and
    16 servers gained back: docs/runbook.md)."""
    return Turns()


LOCAL_BACKENDS = ("llamacpp", "vllm-local")  # models run inside this process: this machine is their server


def _kind(cfg: ExperimentConfig, cell) -> str | None:
    from balms.models.registry import UnknownModelError, resolve_spec

    try:
        return resolve_spec(cell.spec.model, cfg.servers).backend
    except UnknownModelError:
        return None


def _is_local(cfg: ExperimentConfig, cell) -> bool:
    return _kind(cfg, cell) in LOCAL_BACKENDS


class _Gated:
    """A cell's agent as the scheduler runs it: a sample starts only while the run goes on (no cell stopped it)
    and, under a spending cap, only if the cap allows it; otherwise it leaves no record (runner.NotStarted)."""

    def __init__(self, agent, stop: threading.Event, cap, kind, done: Callable[[], None] = lambda: None,
                 admission: Admission | None = None, priority: int = 0):
        self.__wrapped__, self._stop, self._cap, self._kind, self._done = agent, stop, cap, kind, done
        self._admission, self._priority = admission or Admission(), priority

    def __getattr__(self, item):
        return getattr(self.__wrapped__, item)

    def predict(self, sample, tables, backend) -> PredictionRecord:
        from balms.models.slots import priority

        # its calls (and its RAPTOR day summaries) wait for a server slot ranked by its priority, then by when it
        # started: a multi-call sample's before any single call, the oldest first, so chains of calls run from
        # the start and single calls fill the servers while the last chains drain (balms.models.slots)
        rank = self._priority * _TIER + next(_STARTED)
        with self._admission.admitted(self._kind[1], self._priority), priority(rank), _turns(self._kind[1]).turn(rank):
            return self._predict(sample, tables, backend)

    def _predict(self, sample, tables, backend) -> PredictionRecord:
        from balms.runner import NotStarted

        if self._stop.is_set():
            raise NotStarted("the run stopped: a cell failed")
        try:
            if self._cap is None:
                rec = self.__wrapped__.predict(sample, tables, backend)
            else:
                rec = self._cap.spend(self._kind, lambda: self.__wrapped__.predict(sample, tables, backend))
        except NotStarted:  # refused by the cap: no record
            raise
        except Exception:  # the runner records the error
            self._done()
            raise
        self._done()
        return rec


def plan_lanes(cfg: ExperimentConfig, cells: Sequence, todo: Sequence[int]) -> list[list[int]]:
    """Lanes of cell indices, each run in turn, all lanes at once: the cells on embedded models (LOCAL_BACKENDS)
    share one lane; Claude's cells sent as Message Batches (`cfg.anthropic_batch` and a batchable system, as
    balms.experiments.batching.prefetch_cell decides) share another, one batch at a time as cell by cell; every
    other cell is a lane of its own, Claude's multi-call cells (RAPTOR, PHIA: direct calls) included."""
    from balms.agents.registry import get_system

    local = [i for i in todo if _is_local(cfg, cells[i])]
    batched = [i for i in todo if i not in local and cfg.anthropic_batch and cfg.cache_mode == "rw"
               and _kind(cfg, cells[i]) == "anthropic" and get_system(cells[i].spec.system).batchable]
    lanes: list[list[int]] = []
    for i in todo:
        if i not in local and i not in batched:
            lanes.append([i])
        elif local and i == local[0]:
            lanes.append(local)
        elif batched and i == batched[0]:
            lanes.append(batched)
    return lanes


def cell_records(path, cell) -> list[PredictionRecord]:
    """The cell's records on disk, in its sample order (a sample without a record is left out)."""
    from balms.runner import load_records

    by_id = {r.sample_id: r for r in load_records(path)} if path.exists() else {}
    return [by_id[s.sample_id] for s in cell.samples if s.sample_id in by_id]


def run_cells(cfg: ExperimentConfig, cells: Sequence, *, progress: bool = True) -> ScheduleReport:
    """Run (or resume) every cell (balms.experiments.grid.Cell) at once; records per cell in sample order.

    Cells on an embedded model (LOCAL_BACKENDS) run one after another in one lane beside the others: their
    server is this machine, which gains nothing from two at once and their latencies would count the wait.
    Claude's cells sent as Message Batches (`cfg.anthropic_batch`: its single-call cells) also run one after
    another, in a lane of their own: one batch at a time, as cell by cell (plan_lanes). Its RAPTOR and PHIA cells
    make direct calls and run beside the others (in the paper dry run they queued behind the batches' polls and
    were the tail of notebook 01).
    A cell whose every sample failed (balms.experiments.errors.check_cell, unless `cfg.allow_errors`) stops the
    run: no further sample starts (those not started leave no record), the cells in flight finish the samples
    they started, and its error is raised. Under a spending cap the samples it does not allow are not started,
    and the report's `stopped` says how far the run got."""
    from tqdm.std import tqdm  # a text bar on stderr, also in a kernel: papermill passes it on to the terminal

    from balms.agents.raptor import summary_pool
    from balms.agents.registry import get_system
    from balms.experiments.batching import prefetch_cell
    from balms.experiments.budget import SpendingCap
    from balms.experiments.cohorts import cohort
    from balms.experiments.errors import check_cell
    from balms.models.registry import get_backend
    from balms.runner import run_samples

    cells = list(cells)
    limits = configure_slots(cfg, list(dict.fromkeys(c.spec.model for c in cells)))
    paths = [c.spec.run_path(cfg.runs_root()) for c in cells]
    first_of: dict = {}  # the same cell asked twice (two notebooks): run once
    for i, p in enumerate(paths):
        first_of.setdefault(p, i)
    todo = [i for i in interleave(cells, lambda c: c.spec.model) if first_of[paths[i]] == i]
    lanes = plan_lanes(cfg, cells, todo)
    local = next((lane for lane in lanes if _is_local(cfg, cells[lane[0]])), [])
    results: list = [None] * len(cells)
    threads_per = [max(1, min(cfg.concurrency, len(c.samples))) for c in cells]
    lane_threads = [max(threads_per[i] for i in lane) for lane in lanes]
    budget = max(cfg.scheduler_threads, max(lane_threads, default=1))
    cond = threading.Condition()
    in_use = [0]
    n_done = [0]
    stop = threading.Event()
    cap = SpendingCap.from_cfg(cfg)
    before = [r for i in todo for r in cell_records(paths[i], cells[i])]
    if cap is not None:
        cap.already(before)
    where = os.environ.get("BALMS_NOTEBOOK")
    tag = f"[{where}] scheduler" if where else "scheduler"
    if progress:
        print(f"{tag}: {len(todo)} cells in flight on {len(limits)} server(s) "
              f"({', '.join(f'{k} {n} slots' for k, n in limits.items()) or 'no server limits'}); "
              f"{len(local)} on embedded models, one at a time", file=sys.stderr, flush=True)
    # one bar for every cell's samples; off a terminal (papermill) every refresh becomes a line: at most every 10 s
    tty = bool(getattr(sys.stderr, "isatty", lambda: False)())
    kept = sum(r.status != "error" or not cfg.retry_errors for r in before)  # errors are run again
    bar = tqdm(total=sum(len(cells[i].samples) for i in todo), initial=kept, unit="sample",
               disable=not progress, desc=f"{tag}: samples", dynamic_ncols=True, file=sys.stderr,
               mininterval=0.1 if tty else 10.0, smoothing=0.05)
    admission = Admission()
    for c in cells:
        n = model_slots(cfg, c, limits)
        admission.set_limit(c.spec.model, None if n is None else SAMPLES_PER_SLOT * n)
    agents = [_Gated(c.agent, stop, cap, (c.spec.system, c.spec.model), lambda: bar.update(1), admission,
                     0 if get_system(c.spec.system).cost != "single" else 1) for c in cells]

    def run_one(i: int):
        cell = cells[i]
        prefetch_cell(cfg, cell)  # Claude via the Message Batches API when cfg.anthropic_batch (single-call cells)
        backend = get_backend(cell.spec.model, cache_mode=cfg.cache_mode, servers=cfg.servers)
        co = cohort(cell.spec.dataset, cfg)
        res = run_samples(agents[i], backend, cell.samples, co.tables, paths[i], concurrency=threads_per[i],
                          progress=False, spec=cell.spec, retry_errors=cfg.retry_errors,
                          executor=None if i in local else samples_pool,
                          manifest_extra={"profile": cfg.profile, "source": co.source, "scheduler": True})
        results[i] = res
        if progress:
            with cond:
                n_done[0] += 1
                k = n_done[0]
            bar.write(f"{tag}: {k}/{len(todo)} cells done: {describe_cell(cell.spec)} "
                  f"({res.n_new} new, {res.n_errors} errors, {res.wall_s:.1f} s)", file=sys.stderr)
        try:
            check_cell(cfg.allow_errors, describe_cell(cell.spec), cell_records(paths[i], cell))
        except Exception:
            stop.set()
            raise

    def run_lane(k: int):
        try:
            for i in lanes[k]:
                if stop.is_set() or (cap is not None and cap.n_refused):
                    break
                run_one(i)
        finally:
            with cond:
                in_use[0] -= lane_threads[k]
                cond.notify_all()

    # every thread started before any cell starts (balms.threads): the servers' cells share one pool of sample
    # threads, RAPTOR its pool of day summaries
    n_server_threads = sum(threads_per[i] for i in todo if i not in local)
    samples_pool = started_pool(max(1, min(budget, n_server_threads)), "balms-sample")
    for m in dict.fromkeys(cells[i].spec.model_id for i in todo if cells[i].spec.system == "raptor"):
        summary_pool(m)
    futures = []
    with bar, samples_pool, started_pool(max(1, len(lanes)), "balms-cell") as pool:
        for k in range(len(lanes)):
            if stop.is_set() or (cap is not None and cap.n_refused):  # no more cells
                break
            with cond:
                while in_use[0] and in_use[0] + lane_threads[k] > budget:
                    cond.wait()
                in_use[0] += lane_threads[k]
            futures.append(pool.submit(run_lane, k))
        errors = [f.exception() for f in futures if f.exception() is not None]
    if errors:
        raise errors[0]
    why = None
    if cap is not None and cap.n_refused:
        n_all = sum(len(cells[i].samples) for i in todo)
        n_kept = sum(len(cell_records(paths[i], cells[i])) for i in todo)
        why = (f"spending cap reached ({cap.describe()}): {n_kept} of {n_all} samples done, the rest not started; "
               "everything is kept and resumable: raise -p max_usd / -p max_gpu_hours and run again")
    if why and progress:
        print(f"{tag}: {why}", file=sys.stderr, flush=True)
    records = []
    for i, c in enumerate(cells):
        records.append(cell_records(paths[i], c))
        results[i] = results[i] or results[first_of[paths[i]]]
    return ScheduleReport(records, results, limits, why)
