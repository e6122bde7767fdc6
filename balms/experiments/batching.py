"""Two-phase runs for Claude through the Message Batches API (config `anthropic_batch: true`).

Phase 1 (`prefetch_cells`): every batched cell's requests are built without calling a model (each agent's
`first_prompt` and the decoding parameters its `predict` would use); the requests of all cells of a run are
submitted first, one set of batches per Claude model, and only then polled, one poller per model
(balms.models.anthropic_batch), so N cells wait for one batch round trip, not N; the results land in the response
cache. Phase 2 is the normal run: every call is a cache hit, so records, latency accounting and resumption are
exactly those of a direct run (a batched call is recorded at latency 0: batch latency is hours and not the
model's; notebook 06's Claude latencies need a direct run).

Covered: single-call cells (the registry's batchable systems, zero-shot and CoT): all their calls. Not covered:
multi-step cells (PHIA steps depend on earlier outputs; RAPTOR's answer prompt needs its day summaries): they
fall back to direct calls at list price. A batch that failed some requests leaves those to direct calls too,
and `prefetch_cells` reports them.
"""

from __future__ import annotations

import threading

POLL_S = 30.0  # seconds between two polls of a model's open batches


def cell_requests(cell, tables) -> list:
    """(messages, GenParams) of every sample's single model call, exactly as `predict` will make it."""
    agent = cell.agent
    return [(agent.first_prompt(s, tables), agent.params(s, agent.answer_max_tokens)) for s in cell.samples]


def batched(cfg, cell) -> bool:
    """Whether `cell`'s calls go through Message Batches: `anthropic_batch` on, the cache writable, a Claude model,
    and a system that makes one call per sample whose prompt is known up front (its registry entry's `batchable`)."""
    from balms.agents.registry import get_system

    return (cfg.anthropic_batch and cfg.cache_mode == "rw" and get_system(cell.spec.system).batchable
            and cfg.backend_kind(cell.spec.model) == "anthropic")


def prefetch_cells(cfg, cells: dict, *, poll_s: float | None = None, progress=print,
                   done=lambda j, error: None) -> dict:
    """Phase 1 for `cells` ({key: cell}, all `batched`) at once; returns {model: its BatchReport}. `done(key,
    error)` is called once per cell when its model's batches have all ended: `error` is what stopped them (the
    cell's samples raise it), else None."""
    from balms.experiments.cohorts import cohort
    from balms.models.anthropic_batch import BatchClient, BatchStore, batch_store_path
    from balms.models.registry import build_raw_backend, shared_cache

    groups: dict[str, list] = {}
    for j, cell in cells.items():
        groups.setdefault(cell.spec.model, []).append(j)
    all_submitted = threading.Barrier(max(1, len(groups)))
    reports: dict = {}

    def fetch(model: str, js: list) -> None:
        error = None
        say = (lambda m: progress(f"[batch {model}] {m}")) if progress else None
        try:
            try:
                cache = shared_cache()
                client = BatchClient(build_raw_backend(model), cache, BatchStore(batch_store_path(cache.path)),
                                     poll_s=POLL_S if poll_s is None else poll_s, progress=say)
                reqs = [r for j in js for r in cell_requests(cells[j], cohort(cells[j].spec.dataset, cfg).tables)]
                label = ", ".join(cells[j].spec.run_name() for j in js)[:1000]
                sub = client.submit(reqs, label=label)
            finally:
                all_submitted.wait()  # no model's batches are polled before every model's are submitted
            reports[model] = rep = sub.then(client.collect(reqs, label=label))
            if rep.failed and say:
                say(f"{len(rep.failed)} request(s) failed in batches and will be made directly: "
                    + "; ".join(f"{k[:12]}: {v}" for k, v in list(rep.failed.items())[:5]))
        except Exception as exc:  # noqa: BLE001 - handed to its cells, whose samples raise it
            error = exc
        for j in js:
            done(j, error)

    pollers = [threading.Thread(target=fetch, args=g, daemon=True, name=f"balms-batches-{g[0]}")
               for g in groups.items()]
    for t in pollers:
        t.start()
    for t in pollers:
        t.join()
    return reports
