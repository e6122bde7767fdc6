"""Response cache: key contents, rw/replay/off modes, errors never stored, thread safety, durability."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from balms.models.base import BackendError, GenParams, Message
from balms.models.cache import CachedBackend, CacheMissError, ResponseCache, cache_key
from fake_servers import FakeBackend

MSGS = [Message("system", "sys"), Message("user", "How stressed is p01 today?")]


def test_key_depends_on_model_messages_and_decoding_params_only():
    base = cache_key("m", MSGS, GenParams())
    assert cache_key("m", MSGS, GenParams()) == base
    assert cache_key("m2", MSGS, GenParams()) != base
    assert cache_key("m", MSGS[:1], GenParams()) != base
    for change in [dict(temperature=0.7), dict(max_tokens=9), dict(seed=1), dict(epoch=1), dict(stop=("x",)),
                   dict(json_schema={"type": "object"}), dict(grammar="root ::= \"1\""), dict(top_p=0.9)]:
        assert cache_key("m", MSGS, GenParams(**change)) != base, change


def test_rw_hit_returns_same_completion_marked_cached(tmp_path):
    fake = FakeBackend()
    b = CachedBackend(fake, ResponseCache(tmp_path / "c.sqlite"))
    first = b.generate(MSGS, GenParams())
    second = b.generate(MSGS, GenParams())
    assert fake.calls == 1
    assert not first.cached and second.cached
    assert second.text == first.text and second.prompt_tokens == first.prompt_tokens
    assert b.stats() == {"hits": 1, "misses": 1, "mode": "rw"}


def test_persisted_across_connections_and_replay_needs_no_backend_calls(tmp_path):
    path = tmp_path / "c.sqlite"
    first = CachedBackend(FakeBackend(), ResponseCache(path)).generate(MSGS, GenParams())
    fake = FakeBackend()
    replay = CachedBackend(fake, ResponseCache(path), mode="replay")
    assert replay.generate(MSGS, GenParams()).text == first.text
    assert fake.calls == 0


def test_process_counts_calls_made_and_answered_from_the_cache(tmp_path):
    """What a grid reports as its cost: calls sent to a model vs answered from the cache, over every backend."""
    from balms.models.cache import process_calls

    before = process_calls()
    path = tmp_path / "c.sqlite"
    CachedBackend(FakeBackend(), ResponseCache(path)).generate(MSGS, GenParams())  # made
    CachedBackend(FakeBackend(), ResponseCache(path), mode="replay").generate(MSGS, GenParams())  # from the cache
    CachedBackend(FakeBackend(), ResponseCache(path), mode="off").generate(MSGS, GenParams())  # made (no cache)
    after = process_calls()
    assert after["made"] - before["made"] == 2 and after["from_cache"] - before["from_cache"] == 1


def test_replay_miss_names_the_request(tmp_path):
    fake = FakeBackend(model_id="gguf:tiny@sha256:00")
    b = CachedBackend(fake, ResponseCache(tmp_path / "c.sqlite"), mode="replay")
    with pytest.raises(CacheMissError) as ei:
        b.generate(MSGS, GenParams(seed=3))
    msg = str(ei.value)
    assert "gguf:tiny@sha256:00" in msg and "How stressed is p01" in msg
    assert cache_key(fake.model_id, MSGS, GenParams(seed=3))[:16] in msg
    assert fake.calls == 0 and not ei.value.transient


def test_errors_are_never_cached(tmp_path):
    fake = FakeBackend(errors=[BackendError("boom", transient=True)])
    cache = ResponseCache(tmp_path / "c.sqlite")
    b = CachedBackend(fake, cache)
    with pytest.raises(BackendError):
        b.generate(MSGS, GenParams())
    assert len(cache) == 0
    assert b.generate(MSGS, GenParams()).text.startswith("Reasoning")
    assert len(cache) == 1 and fake.calls == 2


def test_off_mode_always_calls(tmp_path):
    fake = FakeBackend()
    b = CachedBackend(fake, None, mode="off")
    b.generate(MSGS, GenParams())
    b.generate(MSGS, GenParams())
    assert fake.calls == 2
    with pytest.raises(ValueError):
        CachedBackend(fake, None, mode="bogus")


def test_thread_safe_and_identical_concurrent_requests_compute_once(tmp_path):
    fake = FakeBackend(latency=0.05)
    b = CachedBackend(fake, ResponseCache(tmp_path / "c.sqlite"))
    prompts = [[Message("user", f"q{i % 10}")] for i in range(80)]
    with ThreadPoolExecutor(16) as ex:
        outs = list(ex.map(lambda m: b.generate(m, GenParams()), prompts))
    assert fake.calls == 10
    assert b.hits + b.misses == 80 and b.misses == 10
    by_prompt = {}
    for m, c in zip(prompts, outs, strict=True):
        by_prompt.setdefault(m[0].content, set()).add(c.text)
    assert all(len(v) == 1 for v in by_prompt.values())


def test_wal_mode_and_each_response_committed(tmp_path):
    path = tmp_path / "c.sqlite"
    cache = ResponseCache(path)
    assert cache._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    b = CachedBackend(FakeBackend(), cache)
    b.generate(MSGS, GenParams())
    # a second, independent connection sees it immediately (no pending transaction)
    assert len(ResponseCache(path)) == 1
