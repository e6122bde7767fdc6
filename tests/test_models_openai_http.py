"""OpenAI-compatible HTTP backend: fault injection on a loopback server, and a real llama.cpp server."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from balms.models.base import BackendError, GenParams, Message
from balms.models.openai_http import OpenAICompatBackend, parse_retry_after
from balms.models.retrying import RetryingBackend
from fake_servers import FakeOpenAIServer

MSGS = [Message("system", "sys"), Message("user", "hello there")]


def _retrying(b, retries=3):
    slept: list[float] = []
    return RetryingBackend(b, retries=retries, initial_wait=0.01, max_wait=5, sleep=slept.append), slept


@pytest.mark.parametrize("fault", ["429", "500", "503", "truncated", "malformed", "timeout"])
def test_transient_faults_are_retried_to_success(fault):
    with FakeOpenAIServer(faults=[fault], timeout_sleep=1.5) as srv:
        b = OpenAICompatBackend("fake-model", [srv.url], timeout_s=0.5)
        r, slept = _retrying(b)
        c = r.generate(MSGS, GenParams())
        assert c.text.startswith("echo:") and c.prompt_tokens == 11 and c.completion_tokens == 7
        assert srv.fault_log == [fault] and r.attempts == 2 and len(slept) == 1
        b.close()


@pytest.mark.parametrize(
    "fault, pattern",
    [
        ("429", r"HTTP 429 from http://127\.0\.0\.1:\d+/v1/chat/completions: .*injected 429"),
        ("500", r"HTTP 500 from .*injected 500"),
        ("truncated", r"transport error at .*RemoteProtocolError"),
        ("malformed", r"malformed response body from .*not JSON.*502 Bad Gateway"),
        ("timeout", r"deadline of 0\.3 s at http://127\.0\.0\.1"),
    ],
)
def test_clear_errors_when_retries_exhausted(fault, pattern):
    with FakeOpenAIServer(faults=[fault] * 3, timeout_sleep=1.0) as srv:
        b = OpenAICompatBackend("fake-model", [srv.url], timeout_s=0.3)
        r, _ = _retrying(b, retries=2)
        with pytest.raises(BackendError, match=pattern) as ei:
            r.generate(MSGS, GenParams())
        assert ei.value.transient and "gave up after 3 attempts" in str(ei.value)
        b.close()


def test_permanent_errors_not_retried():
    with FakeOpenAIServer(faults=["400", "missing_choices"]) as srv:
        b = OpenAICompatBackend("fake-model", [srv.url])
        r, slept = _retrying(b)
        with pytest.raises(BackendError, match="HTTP 400") as ei:
            r.generate(MSGS, GenParams())
        assert not ei.value.transient and r.attempts == 1 and slept == []
        with pytest.raises(BackendError, match=r"lacks choices\[0\]\.message"):
            r.generate(MSGS, GenParams())
        assert r.attempts == 2
        b.close()


def test_retry_after_is_honoured():
    with FakeOpenAIServer(faults=["429"], retry_after="2") as srv:
        b = OpenAICompatBackend("fake-model", [srv.url])
        r, slept = _retrying(b)
        r.generate(MSGS, GenParams())
        assert slept and slept[0] >= 2.0
        b.close()
    assert parse_retry_after("1.5") == 1.5 and parse_retry_after(None) is None
    assert 0 <= parse_retry_after(time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))) <= 31


def test_request_body_carries_decoding_params_and_schema():
    with FakeOpenAIServer() as srv:
        schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
        b = OpenAICompatBackend("Qwen/Qwen2.5-7B-Instruct", [srv.url + "/v1/"])
        b.generate(MSGS, GenParams(temperature=0.3, max_tokens=17, stop=("\n",), seed=5, json_schema=schema))
        body = srv.requests[-1]
        assert body["model"] == "Qwen/Qwen2.5-7B-Instruct"
        assert body["messages"][0] == {"role": "system", "content": "sys"}
        assert (body["temperature"], body["max_tokens"], body["stop"], body["seed"]) == (0.3, 17, ["\n"], 5)
        assert body["response_format"]["json_schema"]["schema"] == schema
        ll = OpenAICompatBackend("m", [srv.url], json_style="llamacpp")
        assert ll.request_body(MSGS, GenParams(json_schema=schema))["response_format"] == {"type": "json_object",
                                                                                          "schema": schema}
        assert ll.request_body(MSGS, GenParams(grammar="root ::= [1-5]"))["grammar"] == "root ::= [1-5]"
        b.close(), ll.close()


def test_reasoning_split_from_think_tags_and_server_field():
    with FakeOpenAIServer() as srv:
        b = OpenAICompatBackend("deepseek-ai/DeepSeek-R1-Distill-Qwen-14B", [srv.url],
                                extra_body={"x_reply": "sleep was short</think>Answer: 3"})
        c = b.generate(MSGS, GenParams())
        assert c.text == "Answer: 3" and c.reasoning == "sleep was short" and 0 < c.reasoning_tokens <= 7
        b.close()


def test_requests_spread_across_base_urls():
    servers = [FakeOpenAIServer(latency=0.05).start() for _ in range(3)]
    try:
        b = OpenAICompatBackend("fake-model", [s.url for s in servers])
        with ThreadPoolExecutor(6) as ex:
            list(ex.map(lambda i: b.generate([Message("user", f"q{i}")], GenParams()), range(30)))
        counts = [len(s.requests) for s in servers]
        assert sum(counts) == 30 and min(counts) >= 8, counts
        assert b.sent == counts
        b.close()
    finally:
        for s in servers:
            s.stop()


# ---------------------------------------------------------------- real llama.cpp server (SmolLM2) -------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_llama_servers(alias: str, n: int, n_threads: int = 1, log_dir: Path | None = None):
    """Start n `python -m llama_cpp.server` with SmolLM2 on free loopback ports; returns [(proc, base_url)].

    The servers load in parallel; their (verbose) stderr goes to a file so a full pipe cannot block them.
    """
    import tempfile

    from balms.models.gguf_assets import gguf_path

    log_dir = Path(log_dir or tempfile.mkdtemp(prefix="llama-srv-"))
    started = []
    for k in range(n):
        port = _free_port()
        cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf_path("smollm2-135m")), "--host",
               "127.0.0.1", "--port", str(port), "--n_threads", str(n_threads), "--model_alias", alias,
               "--n_ctx", "2048"]
        log = open(log_dir / f"server{k}.log", "wb")
        env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}  # idle servers' threads must not spin on shared cores
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        started.append((proc, f"http://127.0.0.1:{port}/v1", log))
    deadline = time.time() + 90
    pending = list(started)
    while pending and time.time() < deadline:
        for item in list(pending):
            proc, url, log = item
            if proc.poll() is not None:
                stop_servers(started)
                raise RuntimeError(f"llama.cpp server exited: {Path(log.name).read_text()[-2000:]}")
            try:
                if httpx.get(url + "/models", timeout=1).status_code == 200:
                    pending.remove(item)
            except httpx.HTTPError:
                pass
        time.sleep(0.2)
    if pending:
        stop_servers(started)
        raise RuntimeError("llama.cpp server did not start within 90 s")
    return started


def stop_servers(started) -> None:
    for proc, _, _log in started:
        proc.terminate()
    for proc, _, log in started:
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture(scope="module")
def llama_servers(tmp_path_factory):
    started = start_llama_servers("smollm2", 2, log_dir=tmp_path_factory.mktemp("llama"))
    try:
        yield [u for _, u, _ in started]
    finally:
        stop_servers(started)


@pytest.mark.slow
def test_real_llamacpp_servers_through_backend(llama_servers):
    b = OpenAICompatBackend("smollm2", llama_servers, json_style="llamacpp", timeout_s=60)
    prompts = [[Message("system", "You are terse."), Message("user", f"Say the number {i}.")] for i in range(4)]
    outs = [b.generate(m, GenParams(max_tokens=8)) for m in prompts]
    assert all(c.completion_tokens > 0 and c.prompt_tokens > 5 for c in outs)
    assert b.sent == [2, 2]  # spread over both servers (idle servers are taken in turn)
    assert {c.raw["base_url"] for c in outs} == set(llama_servers)
    assert {c.raw["served_model"] for c in outs} == {"smollm2"}
    again = b.generate(prompts[0], GenParams(max_tokens=8))
    assert again.text == outs[0].text  # greedy decoding is deterministic across servers
    schema = {"type": "object", "properties": {"stress": {"type": "integer"}}, "required": ["stress"]}
    c = b.generate([Message("user", "Stress 1-5 as JSON")], GenParams(max_tokens=20, json_schema=schema))
    assert isinstance(json.loads(c.text)["stress"], int)
    assert "smollm2" in b.list_served_models()
    b.close()


def test_reasoning_content_field_and_reported_reasoning_tokens():
    """vLLM with --reasoning-parser: the trace arrives in `reasoning_content`, the answer alone in `content`."""
    usage = {"prompt_tokens": 40, "completion_tokens": 300, "completion_tokens_details": {"reasoning_tokens": 290}}
    with FakeOpenAIServer() as srv:
        b = OpenAICompatBackend("deepseek-ai/DeepSeek-R1-Distill-Qwen-14B", [srv.url], reasoning_model=True,
                                extra_body={"x_reply": "Answer: 4", "x_reasoning": "HR up, sleep down.",
                                            "x_usage": usage})
        c = b.generate(MSGS, GenParams())
        got = (c.text, c.reasoning, c.completion_tokens, c.reasoning_tokens)
        assert got == ("Answer: 4", "HR up, sleep down.", 300, 290)
        b.close()


def test_reasoning_model_cut_before_closing_tag_has_no_answer():
    """R1's template opens <think> in the prompt: a text cut at max_tokens has no tag and is all thought."""
    cut = "Okay, stress looks like 3 because sleep"
    with FakeOpenAIServer() as srv:
        r1 = OpenAICompatBackend("deepseek-ai/DeepSeek-R1-Distill-Qwen-14B", [srv.url], reasoning_model=True,
                                 extra_body={"x_reply": cut, "x_finish": "length"})
        c = r1.generate(MSGS, GenParams())
        assert c.text == "" and c.reasoning == cut and c.finish_reason == "length" and c.reasoning_tokens == 7
        direct = OpenAICompatBackend("Qwen/Qwen2.5-7B-Instruct", [srv.url],
                                     extra_body={"x_reply": cut, "x_finish": "length"})
        assert direct.generate(MSGS, GenParams()).text == cut  # a direct model's cut answer stays its answer
        done = OpenAICompatBackend("deepseek-ai/DeepSeek-R1-Distill-Qwen-14B", [srv.url], reasoning_model=True,
                                   extra_body={"x_reply": "Answer: 2"})
        assert done.generate(MSGS, GenParams()).text == "Answer: 2"  # finished without thinking: kept
        r1.close(), direct.close(), done.close()


def test_episode_counts_reasoning_once_and_apart():
    """Backends' completion_tokens include the trace; records keep it as a separate count, never added twice."""
    from balms.agents.common import Episode
    from balms.models.base import Completion

    class R1:
        model_id, name = "r1", "r1"

        def generate(self, messages, params):
            return Completion(text="Answer: 3", model_id="r1", prompt_tokens=50, completion_tokens=120,
                              reasoning="long thought", reasoning_tokens=110)

    ep = Episode(R1())
    ep.call(MSGS, GenParams())
    ep.call(MSGS, GenParams())
    assert (ep.completion_tokens, ep.reasoning_tokens, ep.prompt_tokens) == (240, 220, 100)
    ep.replay("summary", "s", prompt_tokens=5, completion_tokens=20, latency_s=0.1, reasoning_tokens=15)
    assert (ep.completion_tokens, ep.reasoning_tokens) == (260, 235)
    from balms.records import PredictionRecord

    assert PredictionRecord(sample_id="x", system="s", model="m", model_id="m").reasoning_tokens == 0
