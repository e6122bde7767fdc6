"""Registry, seeds, reasoning split, pricing, GGUF asset verification (fast; no model is loaded)."""

from __future__ import annotations

import sys
import types

import pytest

from balms.models import gguf_assets
from balms.models.cache import CachedBackend
from balms.models.pricing import estimate_cost
from balms.models.reasoning import estimate_reasoning_tokens, split_reasoning
from balms.models.registry import DEFAULT_MODEL, MODELS, default_model_name, get_backend, list_models, spec
from balms.models.seeds import sample_seed

PAPER = ["Qwen2.5-7B-Instruct", "Qwen2.5-14B-Instruct", "Mistral-7B-Instruct-v0.3",
         "DeepSeek-R1-Distill-Qwen-14B", "Claude-Haiku-4.5", "Llama-3.3-70B-Instruct"]


def test_registry_has_paper_and_embedded_models():
    df = list_models()
    for name in PAPER + ["smollm2-135m", "qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"]:
        assert name in df.index
    assert {"backend", "model_id", "is_reasoning", "is_embedded_cpu", "context_length",
            "price_in_per_mtok", "price_out_per_mtok"} <= set(df.columns)
    assert df.loc["DeepSeek-R1-Distill-Qwen-14B", "is_reasoning"]
    assert df.loc["qwen2.5-coder-1.5b", "is_embedded_cpu"] and not df.loc["Qwen2.5-7B-Instruct", "is_embedded_cpu"]
    assert df.loc["Claude-Haiku-4.5", "model_id"] == "claude-haiku-4-5"
    assert df.loc["Claude-Haiku-4.5", "price_out_per_mtok"] > 0
    assert df.loc["qwen2.5-coder-1.5b", "model_id"] == "gguf:qwen2.5-coder-1.5b-instruct-q4_k_m@sha256:cc324af0"
    assert DEFAULT_MODEL == "qwen2.5-coder-1.5b"


def test_default_model_env_override(monkeypatch):
    monkeypatch.delenv("BALMS_MODEL", raising=False)
    assert default_model_name() == "qwen2.5-coder-1.5b"
    monkeypatch.setenv("BALMS_MODEL", "smollm2-135m")
    assert default_model_name() == "smollm2-135m"
    monkeypatch.setenv("BALMS_MODEL", "gpt-17")
    with pytest.raises(KeyError, match="unknown model 'gpt-17'"):
        default_model_name()


def test_get_backend_wraps_cache_in_cache_dir(isolated_cache):
    b = get_backend("smollm2-135m")  # lazy: no model load until generate
    assert isinstance(b, CachedBackend) and b.mode == "rw"
    assert b.cache.path == isolated_cache / "responses.sqlite"
    assert b.model_id == MODELS["smollm2-135m"].model_id


def test_http_models_need_base_urls(monkeypatch, isolated_cache):
    monkeypatch.delenv("BALMS_VLLM_BASE_URLS", raising=False)
    with pytest.raises(ValueError, match="BALMS_VLLM_BASE_URLS"):
        get_backend("Qwen2.5-7B-Instruct")
    monkeypatch.setenv("BALMS_VLLM_BASE_URLS", "http://127.0.0.1:1/v1, http://127.0.0.1:2/v1")
    b = get_backend("Qwen2.5-7B-Instruct")
    assert b.backend.base_urls == ["http://127.0.0.1:1/v1", "http://127.0.0.1:2/v1"]
    assert b.model_id == "Qwen/Qwen2.5-7B-Instruct"


def test_replay_mode_needs_no_server_key_or_model(monkeypatch, isolated_cache):
    monkeypatch.delenv("BALMS_VLLM_BASE_URLS", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    for name in ["Qwen2.5-14B-Instruct", "Claude-Haiku-4.5", "qwen2.5-coder-1.5b"]:
        b = get_backend(name, cache_mode="replay")
        assert b.mode == "replay" and b.model_id == spec(name).model_id


def test_sample_seed_stable_and_distinct():
    a = sample_seed("pmdata/p01/2019-11-02/L14", 0)
    assert a == sample_seed("pmdata/p01/2019-11-02/L14", 0)
    assert 0 <= a < 2**31
    assert a != sample_seed("pmdata/p01/2019-11-02/L14", 1)
    assert a != sample_seed("pmdata/p01/2019-11-03/L14", 0)
    # pinned value: a change of the hash would silently change every cached request
    digest = __import__("hashlib").sha256(b"0\x1fx").digest()
    assert sample_seed("x", 0) == int.from_bytes(digest[:8], "big") & 0x7FFFFFFF


@pytest.mark.parametrize(
    "text, answer, reasoning",
    [
        ("Answer: 3", "Answer: 3", None),
        ("<think>steps are low</think>\nAnswer: 4", "Answer: 4", "steps are low"),
        ("steps are low\n</think>\n\nAnswer: 2", "Answer: 2", "steps are low"),  # R1 template opens <think>
        ("<think>a</think>x<think>b</think>Answer: 1", "xAnswer: 1", "a\nb"),
        ("<think>cut off by max_tok", "", "cut off by max_tok"),
    ],
)
def test_split_reasoning(text, answer, reasoning):
    assert split_reasoning(text) == (answer, reasoning)


def test_reasoning_token_estimate_and_cost():
    assert estimate_reasoning_tokens("abcd" * 10, "abcd" * 5, 20) == 10
    assert estimate_reasoning_tokens("x", None, 20) == 0
    assert estimate_cost("claude-haiku-4-5", 1_000_000, 1_000_000) == pytest.approx(6.0)
    assert estimate_cost("Qwen/Qwen2.5-7B-Instruct", 10**6, 10**6) == 0.0


def _fake_parts(monkeypatch, tmp_path, chunks: list[bytes]):
    for i, data in enumerate(chunks, 1):
        p = tmp_path / f"part{i}.bin"
        p.write_bytes(data)
        mod = types.ModuleType(f"fakepart_{i}")
        mod.get_part_path = lambda p=p: str(p)
        monkeypatch.setitem(sys.modules, f"fakepart_{i}", mod)


def test_chunked_gguf_assembled_atomically_and_verified(monkeypatch, tmp_path, isolated_cache):
    import hashlib

    chunks = [b"GGUF" + b"a" * 100, b"b" * 50, b"c" * 7]
    whole = b"".join(chunks)
    _fake_parts(monkeypatch, tmp_path, chunks)
    asset = gguf_assets.GGUFAsset("tiny", "tiny.gguf", len(whole), hashlib.sha256(whole).hexdigest(),
                                  part_module="fakepart_{n}", n_parts=3)
    monkeypatch.setitem(gguf_assets.ASSETS, "tiny", asset)
    path = gguf_assets.gguf_path("tiny")
    assert path.read_bytes() == whole and path.parent == isolated_cache / "models"
    assert gguf_assets._is_verified(path, asset)
    assert gguf_assets.gguf_path("tiny") == path  # second call: marker, no re-join
    assert asset.model_id.startswith("gguf:tiny@sha256:")


def test_chunked_gguf_mismatch_refused_and_nothing_left(monkeypatch, tmp_path, isolated_cache):
    chunks = [b"GGUF" + b"a" * 100, b"b" * 50]
    _fake_parts(monkeypatch, tmp_path, chunks)
    asset = gguf_assets.GGUFAsset("bad", "bad.gguf", 154, "0" * 64, part_module="fakepart_{n}", n_parts=2)
    monkeypatch.setitem(gguf_assets.ASSETS, "bad", asset)
    with pytest.raises(gguf_assets.ModelAssetError, match="refusing"):
        gguf_assets.gguf_path("bad")
    assert list((isolated_cache / "models").iterdir()) == []


def test_missing_part_package_named(monkeypatch, isolated_cache):
    asset = gguf_assets.GGUFAsset("gone", "gone.gguf", 1, "0" * 64, part_module="no_such_pkg_part{n}", n_parts=2,
                                  pip_hint="pip install no-such-pkg")
    monkeypatch.setitem(gguf_assets.ASSETS, "gone", asset)
    with pytest.raises(gguf_assets.ModelAssetError, match=r"part 1/2 \(no_such_pkg_part1\).*pip install no-such-pkg"):
        gguf_assets.gguf_path("gone")


def test_corrupted_assembled_file_is_refused(monkeypatch, tmp_path, isolated_cache):
    import hashlib

    chunks = [b"GGUF" + b"a" * 10]
    _fake_parts(monkeypatch, tmp_path, chunks)
    whole = b"".join(chunks)
    asset = gguf_assets.GGUFAsset("t2", "t2.gguf", len(whole), hashlib.sha256(whole).hexdigest(),
                                  part_module="fakepart_{n}", n_parts=1)
    monkeypatch.setitem(gguf_assets.ASSETS, "t2", asset)
    path = gguf_assets.gguf_path("t2")
    path.write_bytes(b"GGUF" + b"z" * 10)  # same size, different bytes; marker now stale (mtime)
    gguf_assets._marker(path).unlink()
    with pytest.raises(gguf_assets.ModelAssetError, match="sha256"):
        gguf_assets.gguf_path("t2")


def test_vllm_local_missing_gives_clear_error(monkeypatch, isolated_cache):
    import importlib.util

    from balms.models.base import BackendError

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here")
    with pytest.raises(BackendError, match=r"vLLM is not installed.*vllm serve.*BALMS_VLLM_BASE_URLS"):
        get_backend("Qwen2.5-14B-Instruct", backend="vllm-local")


def test_cli_models_list_and_ping_error(capsys, monkeypatch, isolated_cache):
    import json

    from balms.cli import main

    assert main(["models", "list", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    names = {m["name"] for m in out["models"]}
    assert set(PAPER) <= names and out["default"] in names
    monkeypatch.delenv("BALMS_VLLM_BASE_URLS", raising=False)
    assert main(["models", "ping", "Qwen2.5-7B-Instruct", "--json"]) == 1
    err = json.loads(capsys.readouterr().out)
    assert not err["ok"] and "BALMS_VLLM_BASE_URLS" in err["error"]


def test_cli_ping_through_http_backend(capsys, isolated_cache):
    import json

    from balms.cli import main
    from fake_servers import FakeOpenAIServer

    with FakeOpenAIServer() as srv:
        assert main(["models", "ping", "Qwen2.5-7B-Instruct", "--base-url", srv.url, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] and out["model_id"] == "Qwen/Qwen2.5-7B-Instruct" and out["completion_tokens"] == 7
