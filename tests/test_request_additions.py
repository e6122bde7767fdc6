"""What a backend adds to a request (llama.cpp's default system message) is in the response-cache key and the cell
spec; responses stored under the earlier key rule are re-keyed from their key and model id alone."""

from __future__ import annotations

import gzip
import json

import pytest

from balms import bundle
from balms.data.schema import DataError
from balms.models.base import Completion, GenParams, Message
from balms.models.cache import CachedBackend, ResponseCache, cache_key, request_payload, upgrade_key
from balms.models.llamacpp import DEFAULT_SYSTEM, LlamaCppBackend
from balms.models.registry import MODELS, additions_for_model_id, build_raw_backend, get_backend, request_additions
from balms.paths import PROJECT_ROOT
from fake_servers import FakeBackend

MSGS = [Message("user", "hello")]
LLAMA = [n for n, s in MODELS.items() if s.backend == "llamacpp"]


def test_llamacpp_declares_the_system_message_it_adds():
    raw = LlamaCppBackend("unused.gguf", "gguf:x")
    assert raw._messages(MSGS)[0] == {"role": "system", "content": raw.request_additions["default_system"]}
    assert raw.request_additions == {"default_system": DEFAULT_SYSTEM}
    other = LlamaCppBackend("unused.gguf", "gguf:x", default_system="Be terse.")
    assert other.request_additions == {"default_system": "Be terse."}


@pytest.mark.parametrize("name", LLAMA)
def test_the_replay_stand_in_keys_requests_as_the_real_backend_does(name, tmp_path):
    """Without a model file or server, the replay backend knows what the real one adds (else replays would miss)."""
    cache = tmp_path / "r.sqlite"
    real = get_backend(name, cache_path=cache)  # builds the llama backend lazily: no model is loaded
    replay = get_backend(name, cache_mode="replay", cache_path=cache)
    assert real.request_additions == replay.request_additions == request_additions(name) \
        == build_raw_backend(name).request_additions == additions_for_model_id(MODELS[name].model_id) != {}
    custom = get_backend(name, cache_mode="replay", cache_path=cache, default_system="Be terse.")
    assert custom.request_additions == build_raw_backend(name, default_system="Be terse.").request_additions


def test_an_openai_servers_extra_body_is_an_addition_too():
    plain = build_raw_backend("Qwen2.5-7B-Instruct", base_urls=["http://127.0.0.1:9/v1"])
    extra = build_raw_backend("Qwen2.5-7B-Instruct", base_urls=["http://127.0.0.1:9/v1"],
                              extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert plain.request_additions == {} == request_additions("Qwen2.5-7B-Instruct")
    assert extra.request_additions == {"extra_body": {"chat_template_kwargs": {"enable_thinking": False}}}
    assert extra.request_body(MSGS, GenParams())["chat_template_kwargs"] == {"enable_thinking": False}


def test_additions_enter_the_key_and_the_stored_request(tmp_path):
    base = cache_key("m", MSGS, GenParams())
    adds = {"default_system": "A"}
    assert cache_key("m", MSGS, GenParams(), {}) == base  # a backend that adds nothing keeps its keys
    assert cache_key("m", MSGS, GenParams(), adds) == upgrade_key(base, adds) != base
    assert cache_key("m", MSGS, GenParams(), {"default_system": "B"}) != upgrade_key(base, adds)
    fake = FakeBackend()
    fake.request_additions = adds
    cache = ResponseCache(tmp_path / "c.sqlite")
    CachedBackend(fake, cache).generate(MSGS, GenParams())
    base = cache_key(fake.model_id, MSGS, GenParams())
    assert cache.get(upgrade_key(base, adds)) is not None and cache.get(base) is None
    row = cache._conn.execute("SELECT request FROM responses").fetchone()[0]
    assert json.loads(row) == request_payload(fake.model_id, MSGS, GenParams(), adds)


def _rule1_file(path, rows):
    lines = [json.dumps({"format": "balms-responses/1", "profile": "t"})]
    lines += [json.dumps({"table": "responses", "key": k, "model_id": mid, "completion": {"text": t, "model_id": mid}})
              for k, mid, t in rows]
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    return path


def test_rekey_and_import_upgrade_rule_1_files_without_any_model_call(tmp_path):
    gguf = MODELS[LLAMA[0]].model_id
    k1, k2 = cache_key(gguf, MSGS, GenParams()), cache_key("served/x", MSGS, GenParams())
    old = _rule1_file(tmp_path / "old.jsonl.gz", [(k1, gguf, "3"), (k2, "served/x", "4")])
    counts = bundle.rekey_responses(old, tmp_path / "new.jsonl.gz")
    assert counts["responses"] == 2 and counts["rekeyed"] == 1 and counts["from_rule"] == 1
    new = gzip.decompress((tmp_path / "new.jsonl.gz").read_bytes()).decode().splitlines()
    assert json.loads(new[0])["format"] == bundle.FORMAT
    keys = {json.loads(x)["model_id"]: json.loads(x)["key"] for x in new[1:]}
    assert keys == {gguf: cache_key(gguf, MSGS, GenParams(), request_additions(LLAMA[0])), "served/x": k2}
    again = bundle.rekey_responses(tmp_path / "new.jsonl.gz", tmp_path / "again.jsonl.gz")
    assert again["rekeyed"] == 0 and again["sha256"] == counts["sha256"]  # idempotent, deterministic
    # importing the old file upgrades it the same way: a replay finds the llama response under its new key
    got = bundle.import_responses(old, cache_dir=tmp_path / "cache")
    assert got["rekeyed"] == 1 and got["responses"] == 2
    replay = get_backend(LLAMA[0], cache_mode="replay", cache_path=tmp_path / "cache" / "responses.sqlite")
    assert replay.generate(MSGS, GenParams()).text == "3"


def test_unknown_formats_are_refused(tmp_path):
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_bytes(gzip.compress(b'{"format": "balms-responses/9"}\n'))
    with pytest.raises(DataError, match="balms-responses/9"):
        bundle.rekey_responses(bad, tmp_path / "out.jsonl.gz")


COMMITTED = [p for p in (PROJECT_ROOT / "results").glob("*/*") if p.name == "responses.jsonl.gz"
             or p.name.endswith(".bundle.tar.gz")]


@pytest.mark.parametrize("src", COMMITTED, ids=lambda p: p.relative_to(PROJECT_ROOT).as_posix())
def test_committed_responses_and_bundles_rekey(src, tmp_path):
    """Every committed responses file and bundle re-keys (on a copy): its llama responses move to the new rule's
    keys, nothing else changes, and a second pass is a no-op."""
    out = tmp_path / "out.jsonl.gz"
    counts = bundle.rekey_responses(src, out)
    if src.name.endswith(".bundle.tar.gz"):
        text = bundle.verify_bundle(src)[1]["responses.jsonl"].decode()
    else:
        text = gzip.decompress(src.read_bytes()).decode()
    old = [json.loads(x) for x in text.splitlines()[1:]]
    new = [json.loads(x) for x in gzip.decompress(out.read_bytes()).decode().splitlines()[1:]]
    rule = bundle.KEY_RULES[json.loads(text.splitlines()[0])["format"]]
    want = sorted((upgrade_key(r["key"], additions_for_model_id(r["model_id"])) if rule == 1 else r["key"],
                   r["completion"]["text"]) for r in old if r["table"] == "responses")
    assert sorted((r["key"], r["completion"]["text"]) for r in new if r["table"] == "responses") == want
    assert counts["responses"] == len(want) > 0 and (counts["rekeyed"] > 0) == (rule == 1)
    assert [r for r in new if r["table"] != "responses"] == [r for r in old if r["table"] != "responses"]
    assert bundle.rekey_responses(out, tmp_path / "twice.jsonl.gz")["sha256"] == counts["sha256"]


def test_an_older_sqlite_cache_is_rekeyed_in_place_once(tmp_path):
    """A cache written before request additions entered the key keeps answering after the upgrade."""
    import sqlite3

    from balms.models.registry import shared_cache

    gguf = MODELS[LLAMA[0]].model_id
    path = tmp_path / "old.sqlite"
    old = ResponseCache(path)  # a fresh file is written under the current rule ...
    for mid, text in ((gguf, "3"), ("served/x", "4")):
        old.put(cache_key(mid, MSGS, GenParams()), request_payload(mid, MSGS, GenParams()),
                Completion(text=text, model_id=mid))
    old.close()
    con = sqlite3.connect(path)
    con.execute("PRAGMA user_version = 0")  # ... so mark it as written under rule 1
    con.commit()
    con.close()
    with pytest.raises(ValueError, match="key rule 1"):
        ResponseCache(path)  # without the registry's additions it cannot be upgraded, and says so
    cache = shared_cache(path)
    assert cache.upgraded == 1  # the llama row; the served model adds nothing
    replay = get_backend(LLAMA[0], cache_mode="replay", cache_path=path)
    assert replay.generate(MSGS, GenParams()).text == "3"
    assert cache.get(cache_key("served/x", MSGS, GenParams())).text == "4"
    assert ResponseCache(path, additions_of=additions_for_model_id).upgraded == 0  # once
