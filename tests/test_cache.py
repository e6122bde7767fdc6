"""Response cache: key contents, rw/replay/off modes, errors never stored, thread safety, durability."""

from __future__ import annotations

import json
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


# ------------------------------------------------------------------------------------------ integrity ------
def _alter(path, old: str, new: str) -> int:
    """Change stored completions directly in SQLite (what a bad disk or a hand edit does); rows changed."""
    import sqlite3

    con = sqlite3.connect(path)
    n = con.execute("UPDATE responses SET completion = replace(completion, ?, ?) WHERE completion LIKE ?",
                    (old, new, f"%{old}%")).rowcount
    con.commit()
    con.close()
    return n


def test_a_changed_byte_fails_the_next_run_naming_the_entry(tmp_path):
    """Issue 37: "Answer: 3" turned into "Answer: 5" inside SQLite was served (0 calls, MAE moved, exit 0). Now the
    next run's sample fails on that entry with its key named; the model is not called to paper over it."""
    from balms.models.cache import CacheIntegrityError
    from balms.runner import load_records, run_samples
    from fake_servers import TinyAgent, make_samples

    path = tmp_path / "c.sqlite"
    samples = make_samples(20)
    run_samples(TinyAgent(), CachedBackend(FakeBackend(), ResponseCache(path)), samples, None, tmp_path / "a.jsonl",
                progress=False)
    answered_3 = [r for r in load_records(tmp_path / "a.jsonl") if r.prediction == 3]
    assert answered_3, "the fake backend answers 3 for one of these samples"
    assert _alter(path, "Answer: 3", "Answer: 5") == len(answered_3)
    bad_key = answered_3[0].transcript[-1].meta["response_key"]

    fake = FakeBackend()
    cache = ResponseCache(path)
    with pytest.raises(CacheIntegrityError, match=rf"entry {bad_key} .*fails its digest check"):
        cache.get(bad_key)
    run_samples(TinyAgent(), CachedBackend(fake, cache), samples, None, tmp_path / "b.jsonl", progress=False)
    recs = {r.sample_id: r for r in load_records(tmp_path / "b.jsonl")}
    for r in answered_3:
        assert recs[r.sample_id].status == "error" and r.transcript[-1].meta["response_key"] in recs[r.sample_id].error
    bad_ids = {r.sample_id for r in answered_3}
    assert all(recs[s.sample_id].status == "ok" for s in samples if s.sample_id not in bad_ids)
    assert fake.calls == 0  # never recomputed behind the user's back
    assert cache.verify()["bad"][0]["key"] == bad_key


def test_cache_verify_command_names_bad_entries_and_exits_nonzero(tmp_path, capsys):
    from balms.cli import main

    b = CachedBackend(FakeBackend(), ResponseCache(tmp_path / "responses.sqlite"))
    good = b.generate(MSGS, GenParams())
    bad = b.generate([Message("user", "another")], GenParams())
    assert main(["cache", "verify", "--cache-dir", str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out)["checked"] == 2
    import sqlite3

    con = sqlite3.connect(tmp_path / "responses.sqlite")
    con.execute("UPDATE responses SET completion = replace(completion, 'Reasoning', 'Reasonin!') WHERE key = ?",
                (bad.cache_key,))
    con.commit()
    con.close()
    assert main(["cache", "verify", "--cache-dir", str(tmp_path)]) == 1
    out = capsys.readouterr()
    assert json.loads(out.out)["bad"] == 1 and bad.cache_key in out.err and good.cache_key not in out.err
    assert main(["cache", "verify", "--cache-dir", str(tmp_path), "--delete-bad"]) == 0
    capsys.readouterr()
    assert main(["cache", "verify", "--cache-dir", str(tmp_path)]) == 0
    fake = FakeBackend()  # the removed entry is recomputed only by a run told to (mode rw)
    assert CachedBackend(fake, ResponseCache(tmp_path / "responses.sqlite")).generate(
        [Message("user", "another")], GenParams()).text == bad.text and fake.calls == 1


def test_a_cache_from_before_digests_is_digested_once_and_then_checked(tmp_path):
    """Rows written before digests existed are digested once, as found, when this version opens the cache."""
    import sqlite3

    path = tmp_path / "c.sqlite"
    first = CachedBackend(FakeBackend(), ResponseCache(path)).generate(MSGS, GenParams())
    con = sqlite3.connect(path)  # back to the old layout: no digest column
    con.execute("ALTER TABLE responses DROP COLUMN digest")
    con.commit()
    con.close()
    cache = ResponseCache(path)
    assert cache.digested == 1 and ResponseCache(path).digested == 0
    assert cache.get(first.cache_key).text == first.text and cache.verify()["bad"] == []
    _alter(path, "Reasoning", "Reasonin!")
    assert [b["key"] for b in cache.verify()["bad"]] == [first.cache_key]


def test_served_completions_carry_their_key(tmp_path):
    b = CachedBackend(FakeBackend(), ResponseCache(tmp_path / "c.sqlite"))
    made, hit = b.generate(MSGS, GenParams()), b.generate(MSGS, GenParams())
    assert made.cache_key == hit.cache_key == cache_key("fake-model", MSGS, GenParams())
    assert CachedBackend(FakeBackend(), None, mode="off").generate(MSGS, GenParams()).cache_key is None
