"""Anthropic backend: the official client pointed at a loopback server speaking the Messages API."""

from __future__ import annotations

import pytest

from balms.models.anthropic_api import AnthropicBackend
from balms.models.base import BackendError, GenParams, Message
from balms.models.registry import get_backend
from balms.models.retrying import RetryingBackend
from fake_servers import FakeAnthropicServer

MSGS = [Message("system", "You rate stress."), Message("user", "Rate p01's stress on 2019-11-02.")]


def _backend(srv, **kw):
    return AnthropicBackend("claude-haiku-4-5", api_key="test-key", base_url=srv.url, timeout_s=kw.pop("timeout_s", 5),
                            **kw)


def test_messages_api_request_and_usage():
    with FakeAnthropicServer() as srv:
        b = _backend(srv)
        c = b.generate(MSGS, GenParams(max_tokens=33, stop=("\n\n",)))
        body = srv.requests[-1]
        assert body["model"] == "claude-haiku-4-5" and body["max_tokens"] == 33
        assert body["system"] == "You rate stress."  # system goes in the top-level field, not the messages
        assert body["messages"] == [{"role": "user", "content": "Rate p01's stress on 2019-11-02."}]
        assert body["stop_sequences"] == ["\n\n"] and "temperature" not in body and "top_p" not in body
        assert c.text.startswith("echo:") and (c.prompt_tokens, c.completion_tokens) == (21, 9)
        assert c.finish_reason == "stop" and c.model_id == "claude-haiku-4-5"
        b.generate(MSGS, GenParams(json_schema={"type": "object"}))
        assert srv.requests[-1]["output_config"] == {"format": {"type": "json_schema", "schema": {"type": "object"}}}
        _backend(srv, sampling_params=True).generate(MSGS, GenParams(temperature=0.2, top_p=0.9))
        assert (srv.requests[-1]["temperature"], srv.requests[-1]["top_p"]) == (0.2, 0.9)


@pytest.mark.parametrize("fault", ["429", "529", "500"])
def test_overload_and_rate_limit_retried_honouring_retry_after(fault):
    with FakeAnthropicServer(faults=[fault, fault], retry_after="1.5") as srv:
        slept: list[float] = []
        r = RetryingBackend(_backend(srv), retries=3, initial_wait=0.01, sleep=slept.append)
        c = r.generate(MSGS, GenParams())
        assert c.completion_tokens == 9 and r.attempts == 3 and srv.fault_log == [fault, fault]
        assert len(slept) == 2 and all(s >= 1.5 for s in slept)


def test_529_error_is_clear_and_transient():
    with FakeAnthropicServer(faults=["529"]) as srv:
        with pytest.raises(BackendError, match="HTTP 529 overloaded_error") as ei:
            _backend(srv).generate(MSGS, GenParams())
        assert ei.value.transient and ei.value.retry_after == 0.0


def test_bad_request_and_grammar_are_permanent():
    with FakeAnthropicServer(faults=["400"]) as srv:
        with pytest.raises(BackendError, match="HTTP 400") as ei:
            _backend(srv).generate(MSGS, GenParams())
        assert not ei.value.transient
        with pytest.raises(BackendError, match="no GBNF grammar"):
            _backend(srv).generate(MSGS, GenParams(grammar="root ::= [1-5]"))


def test_timeout_is_transient():
    with FakeAnthropicServer(faults=["timeout"], timeout_sleep=1.5) as srv:
        with pytest.raises(BackendError, match="timeout after 0.3 s") as ei:
            _backend(srv, timeout_s=0.3).generate(MSGS, GenParams())
        assert ei.value.transient


def test_registry_key_from_env_and_model_id_override(monkeypatch, isolated_cache):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(BackendError, match="ANTHROPIC_API_KEY is not set"):
        get_backend("Claude-Haiku-4.5")
    with FakeAnthropicServer() as srv:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", srv.url)
        monkeypatch.setenv("BALMS_ANTHROPIC_MODEL", "claude-haiku-4-5-20251001")
        b = get_backend("Claude-Haiku-4.5")
        c = b.generate(MSGS, GenParams())
        assert b.model_id == "claude-haiku-4-5-20251001" == srv.requests[-1]["model"] == c.model_id
        assert b.generate(MSGS, GenParams()).cached and len(srv.requests) == 1
