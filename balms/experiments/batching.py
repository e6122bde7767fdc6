"""Two-phase runs for Claude through the Message Batches API (config `anthropic_batch: true`).

Phase 1 (`prefetch_cells`): every batchable cell's requests are built without calling a model (each agent's
`first_prompt` and the decoding parameters its `predict` would use); the requests of all cells are submitted
first, as one set of batches per Claude model, and only then polled (balms.models.anthropic_batch), one poller
per model, so a run with N such cells waits for one batch round trip, not N; the results land in the response
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


def why_not_batched(cfg, cell) -> str | None:
    """Why `cell`'s calls are made directly, None when they go through Message Batches."""
    from balms.agents.registry import get_system
    from balms.models.registry import UnknownModelError, resolve_spec

    if not cfg.anthropic_batch:
        return "anthropic_batch is off"
    if cfg.cache_mode != "rw":
        return "cache mode is not rw"
    try:
        kind = resolve_spec(cell.spec.model, cfg.servers).backend
    except UnknownModelError:
        kind = None
    if kind != "anthropic":
        return f"{cell.spec.model} is not served by the Anthropic API"
    if not get_system(cell.spec.system).batchable:
        return f"{cell.spec.system} makes several dependent calls per sample: direct calls"
    return None


def prefetch_cells(cfg, cells, *, poll_s: float | None = None, progress=print,
                   done=lambda j, error: None) -> list[dict]:
    """Phase 1 for every cell of `cells` at once; returns per cell what was done (a batched cell: its model's
    report). `done(j, error)` is called once per cell j (its index in `cells`) as soon as its model's batches have
    all ended (or at once, for a cell not batched): `error` is what stopped its model's batches, else None."""
    from balms.experiments.cohorts import cohort
    from balms.models.anthropic_batch import BatchClient, BatchStore, batch_store_path
    from balms.models.registry import build_raw_backend, shared_cache

    out: list[dict] = [{} for _ in cells]
    groups: dict[str, list[int]] = {}  # model -> its batched cells
    for j, cell in enumerate(cells):
        why = why_not_batched(cfg, cell)
        if why:
            out[j] = {"batched": False, "why": why}
            done(j, None)
        else:
            groups.setdefault(cell.spec.model, []).append(j)
    if not groups:
        return out

    def say(model: str):
        return (lambda m: progress(f"[batch {model}] {m}")) if progress else None

    def finish(model: str, rep=None, error: BaseException | None = None) -> None:
        if rep is not None and rep.failed and progress:
            progress(f"[batch {model}] {len(rep.failed)} request(s) failed in batches and will be made directly: "
                     + "; ".join(f"{k[:12]}: {v}" for k, v in list(rep.failed.items())[:5]))
        for j in groups[model]:
            out[j] = ({"batched": True, **rep.to_dict()} if error is None
                      else {"batched": False, "why": f"its batches failed: {error}"})
            done(j, error)

    try:
        cache = shared_cache()
        store = BatchStore(batch_store_path(cache.path))
    except Exception as exc:  # noqa: BLE001 - as below
        for model in groups:
            finish(model, error=exc)
        return out
    submitted: dict = {}  # model -> (client, its cells' requests, submission report): all submitted, then polled
    for model, js in groups.items():
        try:
            client = BatchClient(build_raw_backend(model), cache, store, poll_s=POLL_S if poll_s is None else poll_s,
                                 progress=say(model))
            reqs = [r for j in js for r in cell_requests(cells[j], cohort(cells[j].spec.dataset, cfg).tables)]
            label = ", ".join(cells[j].spec.run_name() for j in js)[:1000]
            submitted[model] = (client, reqs, label, client.submit(reqs, label=label))
        except Exception as exc:  # noqa: BLE001 - reported to its cells, whose samples raise it
            finish(model, error=exc)

    def collect(model: str) -> None:
        client, reqs, label, sub = submitted[model]
        try:
            rep = sub.then(client.collect(reqs, label=label))
        except Exception as exc:  # noqa: BLE001 - as above
            finish(model, error=exc)
            return
        finish(model, rep)

    pollers = [threading.Thread(target=collect, args=(m,), daemon=True, name=f"balms-batches-{m}") for m in submitted]
    for t in pollers:
        t.start()
    for t in pollers:
        t.join()
    return out
