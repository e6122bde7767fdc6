"""Two-phase runs for Claude through the Message Batches API (config `anthropic_batch: true`).

Phase 1 (`prefetch_cell`): the cell's requests are built without calling a model (each agent's `first_prompt`
and the decoding parameters its `predict` would use) and sent as batches (balms.models.anthropic_batch); the
results land in the response cache. Phase 2 is the normal run: every call is a cache hit, so records, latency
accounting and resumption are exactly those of a direct run (a batched call is recorded at latency 0: batch
latency is hours and not the model's; notebook 06's Claude latencies need a direct run).

Covered: single-call cells (Health-LLM and RAG, zero-shot and CoT): all their calls. Not covered, by design:
multi-step cells (PHIA steps depend on earlier outputs; RAPTOR's answer prompt needs its day summaries): they
fall back to direct calls at list price. A batch that failed some requests leaves those to direct calls too,
and `prefetch_cell` reports them.
"""

from __future__ import annotations


def cell_requests(cell, tables) -> list:
    """(messages, GenParams) of every sample's single model call, exactly as `predict` will make it."""
    agent = cell.agent
    out = []
    for s in cell.samples:
        msgs = agent.first_prompt(s, tables)
        out.append((msgs, agent.params(s, agent.answer_max_tokens)))
    return out


def prefetch_cell(cfg, cell, *, poll_s: float = 30.0, progress=print, client_factory=None) -> dict:
    """Phase 1 for one cell when `cfg.anthropic_batch` and the model is Claude; returns what was done."""
    from balms.experiments.cohorts import cohort
    from balms.models.anthropic_batch import BatchClient, BatchStore, batch_store_path
    from balms.models.registry import build_raw_backend, shared_cache, spec

    spec_ = cell.spec
    if not cfg.anthropic_batch or cfg.cache_mode != "rw":
        return {
            "batched": False,
            "why": "anthropic_batch is off" if not cfg.anthropic_batch else "cache mode is not rw",
        }
    if spec(spec_.model).backend != "anthropic":
        return {"batched": False, "why": f"{spec_.model} is not served by the Anthropic API"}
    from balms.agents.registry import get_system

    if not get_system(spec_.system).batchable:
        return {"batched": False, "why": f"{spec_.system} makes several dependent calls per sample: direct calls"}
    cache = shared_cache()
    backend = build_raw_backend(spec_.model)
    store = BatchStore(batch_store_path(cache.path))
    client = (client_factory or BatchClient)(
        backend,
        cache,
        store,
        poll_s=poll_s,
        progress=(lambda m: progress(f"[batch {spec_.model}] {m}")) if progress else None,
    )
    reqs = cell_requests(cell, cohort(spec_.dataset, cfg).tables)
    rep = client.run(reqs, label=spec_.run_name())
    if rep.failed and progress:
        progress(
            f"[batch {spec_.model}] {len(rep.failed)} request(s) failed in batches and will be made directly: "
            + "; ".join(f"{k[:12]}: {v}" for k, v in list(rep.failed.items())[:5])
        )
    return {"batched": True, **rep.to_dict()}
