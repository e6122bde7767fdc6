"""Claude through the Message Batches API, against a loopback server speaking the batch endpoints."""

from __future__ import annotations

from agent_fakes import use_hash_embedder
from balms.models.anthropic_api import AnthropicBackend
from balms.models.anthropic_batch import BatchClient, BatchStore
from balms.models.base import GenParams, Message
from balms.models.cache import CachedBackend, ResponseCache, cache_key
from fake_servers import FakeAnthropicBatchServer


def _reqs(n, tag="q"):
    return [
        ([Message("system", "Rate stress 1-5."), Message("user", f"{tag} {i}")], GenParams(max_tokens=16, seed=i))
        for i in range(n)
    ]


def _client(srv, tmp_path, **kw):
    backend = AnthropicBackend("claude-haiku-4-5", api_key="k", base_url=srv.url, timeout_s=10)
    cache = ResponseCache(tmp_path / "responses.sqlite")
    store = BatchStore(tmp_path / "anthropic_batches.sqlite")
    return BatchClient(backend, cache, store, poll_s=0, sleep=lambda s: None, **kw), backend, cache


def test_results_land_in_cache_errors_retried_or_reported(tmp_path):
    outcomes = ["succeeded", "overloaded", "expired", "invalid", "succeeded"]
    with FakeAnthropicBatchServer(outcomes=outcomes, polls_to_end=2) as srv:
        client, backend, cache = _client(srv, tmp_path)
        reqs = _reqs(5)
        rep = client.run(reqs)
        # overloaded and expired were resubmitted (second batch of 2) and succeeded; invalid is reported
        assert [len(b["requests"]) for b in srv.batches.values()] == [5, 2]
        assert rep.submitted == 7 and rep.succeeded == 4 and len(rep.failed) == 1
        (bad,) = rep.failed.values()
        assert "invalid_request_error" in bad
        keys = [cache_key("claude-haiku-4-5", m, p) for m, p in reqs]
        assert [cache.get(k) is not None for k in keys] == [True, True, True, False, True]
        assert set(rep.failed) == {keys[3]}
        # the batch request carries the same Messages API parameters as a direct call
        sent = srv.batches["msgbatch_0001"]["requests"][0]
        assert sent["custom_id"] == keys[0] and sent["params"]["system"] == "Rate stress 1-5."
        assert sent["params"]["messages"] == [{"role": "user", "content": "q 0"}] and sent["params"]["max_tokens"] == 16
        # the normal run replays the batched answers: no direct call for them
        cached = CachedBackend(backend, cache, mode="rw")
        c = cached.generate(*reqs[0])
        assert c.cached and c.text.startswith("echo:") and c.raw["batch"] and srv.direct == 0
        cached.generate(*reqs[3])  # the reported failure is made directly
        assert srv.direct == 1


def test_non_retryable_and_exhausted_attempts(tmp_path):
    with FakeAnthropicBatchServer(outcomes=["expired"] * 3) as srv:
        client, _, cache = _client(srv, tmp_path, max_attempts=3)
        rep = client.run(_reqs(1))
        assert len(srv.batches) == 3 and list(rep.failed.values()) == ["expired"] and len(cache) == 0
        again = client.run(_reqs(1))  # not resubmitted forever: reported again
        assert len(srv.batches) == 3 and list(again.failed.values()) == ["expired"]


def test_interrupted_after_submission_resumes_without_resubmitting(tmp_path):
    with FakeAnthropicBatchServer(polls_to_end=3) as srv:
        client, _, _ = _client(srv, tmp_path)
        reqs = _reqs(4)
        sub = client.submit(reqs)  # ... and the process is killed here, before any result
        assert sub.submitted == 4 and len(srv.batches) == 1
        client.store.close()
        fresh, _, cache = _client(srv, tmp_path)  # a new process: same store and cache files
        rep = fresh.run(reqs)
        assert len(srv.batches) == 1 and rep.resumed == 4 and rep.submitted == 0 and rep.succeeded == 4
        assert all(cache.get(cache_key("claude-haiku-4-5", m, p)) for m, p in reqs)
        # finished requests are never sent again; new ones go in a new batch
        more = fresh.run(reqs + _reqs(2, tag="new"))
        assert (
            more.from_cache == 4
            and more.submitted == 2
            and [len(b["requests"]) for b in srv.batches.values()] == [4, 2]
        )


def test_prefetch_single_call_cell_then_normal_run_makes_no_direct_call(
    tmp_path, monkeypatch, isolated_cache, real_data
):
    from balms.experiments.batching import batched, prefetch_cells
    from balms.experiments.config import load
    from balms.experiments.grid import make_cell, records_of

    with FakeAnthropicBatchServer(outcomes=["succeeded", "invalid"]) as srv:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", srv.url)
        monkeypatch.setenv("BALMS_RUNS_DIR", str(tmp_path / "runs"))
        cfg = load(
            "paper", raw_root=str(real_data), n_samples=3, datasets=["globem"], anthropic_batch=True, concurrency=1
        )
        cell = make_cell(cfg, "globem", "healthllm", "Claude-Haiku-4.5", cot=True)
        rep = prefetch_cells(cfg, {0: cell}, poll_s=0, progress=None)["Claude-Haiku-4.5"]
        assert rep.submitted == 3 and rep.succeeded == 2 and len(rep.failed) == 1
        recs = records_of(cfg, [cell], progress=False)[0]
        assert len(recs) == 3 and all(r.raw_answer.startswith("echo:") for r in recs)
        assert srv.direct == 1  # only the request that failed in its batch was made directly
    assert batched(cfg, cell) and not batched(cfg, make_cell(cfg, "globem", "phia", "Claude-Haiku-4.5"))
    assert not batched(cfg.replace(anthropic_batch=False), cell)
    assert not batched(cfg.replace(cache_mode="replay"), cell)
    assert not batched(cfg, make_cell(cfg, "globem", "healthllm", "smollm2-135m"))


def test_a_runs_batchable_cells_are_submitted_together_before_any_poll(tmp_path, monkeypatch, isolated_cache,
                                                                      real_data):
    """N batchable cells wait for one batch round trip, not N: each Claude model's cells go in one batch, every
    model's batch is created before the first poll (the two round trips overlap, even when one creation is slow),
    and every sample waits for its results (a sample that did not would call the API directly)."""
    from balms.experiments import batching
    from balms.experiments.config import load
    from balms.experiments.grid import make_cell, records_of
    from balms.models.registry import MODELS, ModelSpec

    monkeypatch.setitem(MODELS, "Claude-Other", ModelSpec("Claude-Other", "anthropic", "claude-other"))
    monkeypatch.setattr(batching, "POLL_S", 0.05)
    use_hash_embedder(monkeypatch)
    with FakeAnthropicBatchServer(outcomes=["invalid"], polls_to_end=3, create_delays=[0, 1.0]) as srv:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", srv.url)
        monkeypatch.setenv("BALMS_RUNS_DIR", str(tmp_path / "runs"))
        cfg = load("paper", raw_root=str(real_data), n_samples=3, datasets=["globem"], anthropic_batch=True)
        cells = [make_cell(cfg, "globem", "healthllm", m, cot=cot) for m in ("Claude-Haiku-4.5", "Claude-Other")
                 for cot in (False, True)]
        cells.append(make_cell(cfg, "globem", "rag", "Claude-Haiku-4.5", cot=True))
        recs = records_of(cfg, cells, progress=False)
        by_model = {b["requests"][0]["params"]["model"]: len(b["requests"]) for b in srv.batches.values()}
        assert by_model == {"claude-haiku-4-5": 9, "claude-other": 6}  # one batch per model, all its cells in it
        first_poll = [kind for kind, _ in srv.log].index("poll")
        assert [kind for kind, _ in srv.log[:first_poll]] == ["create", "create"]
        assert [len(r) for r in recs] == [3] * 5 and all(r.raw_answer.startswith("echo:") for rs in recs for r in rs)
        assert srv.direct == 1  # only the request that failed in its batch was made directly
