"""Embedded llama.cpp backend with the real SmolLM2-135M from PyPI."""

from __future__ import annotations

import json

import pytest

from balms.models.base import Completion, GenParams, Message
from balms.models.registry import get_backend

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smol():
    from balms.models.registry import build_raw_backend

    return build_raw_backend("smollm2-135m")


def test_chat_completion_counts_tokens_and_is_deterministic(smol):
    msgs = [Message("system", "You are a terse assistant."), Message("user", "Name a colour.")]
    a = smol.generate(msgs, GenParams(max_tokens=12))
    b = smol.generate(msgs, GenParams(max_tokens=12))
    assert isinstance(a, Completion) and a.text
    assert a.text == b.text  # temperature 0 is greedy
    assert a.prompt_tokens > 5 and 0 < a.completion_tokens <= 12
    assert a.finish_reason in ("stop", "length") and a.latency_s > 0
    assert a.model_id.startswith("gguf:smollm2-135m-instruct.q4_1@sha256:b179c952")


def test_explicit_system_message_is_used(smol):
    from balms.models.llamacpp import DEFAULT_SYSTEM

    # With no system message ours is inserted (not the chat template's own default), so both prompts match;
    # a caller's system message replaces it.
    bare = smol.generate([Message("user", "Hi")], GenParams(max_tokens=1))
    default = smol.generate([Message("system", DEFAULT_SYSTEM), Message("user", "Hi")], GenParams(max_tokens=1))
    longer = smol.generate([Message("system", "You are a helpful assistant. " * 10), Message("user", "Hi")],
                           GenParams(max_tokens=1))
    assert bare.prompt_tokens == default.prompt_tokens
    assert longer.prompt_tokens > bare.prompt_tokens + 40


def test_json_schema_and_grammar_constrain_output(smol):
    schema = {"type": "object", "properties": {"stress": {"type": "integer"}}, "required": ["stress"]}
    c = smol.generate([Message("user", "Rate stress 1-5 as JSON.")], GenParams(max_tokens=30, json_schema=schema))
    assert isinstance(json.loads(c.text)["stress"], int)
    g = smol.generate([Message("user", "Pick a number.")], GenParams(max_tokens=4, grammar='root ::= [1-5]'))
    assert g.text in {"1", "2", "3", "4", "5"}


def test_cached_wrapper_second_call_is_a_hit(isolated_cache):
    b = get_backend("smollm2-135m")
    msgs = [Message("system", "Be brief."), Message("user", "Say yes.")]
    first = b.generate(msgs, GenParams(max_tokens=4))
    second = b.generate(msgs, GenParams(max_tokens=4))
    assert second.cached and second.text == first.text and b.stats()["hits"] == 1


def test_think_block_split_and_counted(smol):
    # A grammar forces a reasoning-model-shaped output from the real model.
    g = 'root ::= "<think>steps were low all week</think>" "Answer: " [1-5]'
    c = smol.generate([Message("user", "Stress?")], GenParams(max_tokens=40, grammar=g))
    assert c.reasoning == "steps were low all week"
    assert c.text.startswith("Answer: ") and "<think>" not in c.text
    assert 0 < c.reasoning_tokens < c.completion_tokens
