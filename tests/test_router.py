"""balms through a router: one URL in front of two llama.cpp servers, models by name (issue 12).

The router is LiteLLM's proxy (requirements/router.txt, installed by `make install-router` into its own venv: in
the project's venv it would downgrade huggingface_hub, python-dateutil and rich). Its config maps each of two
paper model ids to the one llama.cpp server that serves it; balms is given only the router's URL (and the router's
key, through BALMS_OPENAI_API_KEY as for any OpenAI-compatible server) and nothing else changes: discovery reads
the router's /v1/models, calls go to the router, the router forwards each model to its backend. The backends
refuse foreign names like vLLM (tests/strict_llama_server.py) and log every name they are sent, so the test sees
which calls reached which server.

Where the router is not installed the test is skipped, except under CI (CI=true), where it fails: CI installs it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import strict_llama_server as sls
from conftest import side_venv_tool

from balms.models import routing
from balms.models.base import BackendError, GenParams, Message
from balms.models.registry import UnknownModelError, get_backend

ROOT = Path(__file__).resolve().parent.parent
QWEN7, MISTRAL = "Qwen/Qwen2.5-7B-Instruct", "mistralai/Mistral-7B-Instruct-v0.3"
KEY = "sk-balms-router-test-0123456789abcdef"  # the proxy refuses to start without a master key


def litellm_bin() -> str | None:
    for cand in (os.environ.get("BALMS_LITELLM_BIN"), str(ROOT / ".venv-router" / "bin" / "litellm"),
                 shutil.which("litellm")):
        if cand and Path(cand).is_file() and os.access(cand, os.X_OK):
            return cand
    return None


@pytest.fixture(scope="module")
def router(tmp_path_factory):
    """Two strict llama.cpp servers (A serves Qwen2.5-7B's id, B Mistral-7B's) behind one LiteLLM proxy."""
    exe = side_venv_tool(litellm_bin(), "LiteLLM proxy (make install-router, or BALMS_LITELLM_BIN=/path/to/litellm)")
    d = tmp_path_factory.mktemp("router")
    procs = []
    try:
        a = sls.start([QWEN7], d, name="A")
        b = sls.start([MISTRAL], d, name="B")
        procs += [a[0], b[0]]
        for name, (proc, url, _) in (("A", a), ("B", b)):
            sls.wait_ready(proc, url, log_path=d / f"{name}.log")
        cfg = d / "litellm.yaml"
        cfg.write_text(
            "model_list:\n"
            + "".join(f"  - model_name: {mid}\n    litellm_params:\n      model: openai/{mid}\n"
                      f"      api_base: {url}\n      api_key: EMPTY\n" for mid, url in ((QWEN7, a[1]), (MISTRAL, b[1])))
        )
        port = free_port()
        env = {**os.environ, "LITELLM_MASTER_KEY": KEY, "LITELLM_LOCAL_MODEL_COST_MAP": "True",
               "LITELLM_TELEMETRY": "False", "NO_PROXY": "127.0.0.1,localhost"}
        log = open(d / "litellm.log", "wb")
        proxy = subprocess.Popen([exe, "--config", str(cfg), "--host", "127.0.0.1", "--port", str(port)],
                                 stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        procs.append(proxy)
        url = f"http://127.0.0.1:{port}/v1"
        deadline = time.monotonic() + 180  # the proxy imports for ~30 s on a busy 2-core machine
        while True:
            if proxy.poll() is not None:
                raise RuntimeError(f"LiteLLM proxy exited ({proxy.returncode}):\n"
                                   f"{(d / 'litellm.log').read_text(errors='replace')[-3000:]}")
            try:
                if httpx.get(url + "/models", headers={"Authorization": f"Bearer {KEY}"}, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("LiteLLM proxy not ready after 180 s:\n"
                                   f"{(d / 'litellm.log').read_text(errors='replace')[-3000:]}")
            time.sleep(0.5)
        yield {"url": url, "A": a, "B": b}
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def through_router(router, monkeypatch, isolated_cache):
    routing.forget()
    monkeypatch.setenv("BALMS_VLLM_BASE_URLS", router["url"])  # the router, and nothing else
    monkeypatch.setenv("BALMS_OPENAI_API_KEY", KEY)
    yield router
    routing.forget()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_balms_through_litellm_router_reaches_each_models_backend(through_router):
    r = through_router
    a_log, b_log = r["A"][2], r["B"][2]
    # the backends really refuse a foreign name: a call routed to the wrong one would fail, not pass silently
    resp = httpx.post(r["B"][1] + "/chat/completions", timeout=60,
                      json={"model": QWEN7, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    assert resp.status_code == 404 and QWEN7 in resp.text
    before_a, before_b = len(sls.requests_seen(a_log)), len(sls.requests_seen(b_log))

    # one URL, models by name: the router lists both, balms routes both to it
    assert routing.check_models(["Qwen2.5-7B-Instruct", "Mistral-7B-Instruct-v0.3"]) == {
        "Qwen2.5-7B-Instruct": [r["url"]], "Mistral-7B-Instruct-v0.3": [r["url"]]}
    p = GenParams(max_tokens=4, seed=1, stop=["\n\n"])
    qwen = get_backend("Qwen2.5-7B-Instruct", cache_mode="off", timeout_s=120)
    mistral = get_backend("Mistral-7B-Instruct-v0.3", cache_mode="off", timeout_s=120)
    outs = [qwen.generate([Message("user", f"Say {i}.")], p) for i in range(2)]
    outs.append(mistral.generate([Message("user", "Say 9.")], p))
    assert all(c.raw["base_url"] == r["url"] for c in outs)
    assert all(c.completion_tokens > 0 for c in outs)
    seen_a = sls.requests_seen(a_log)[before_a:]
    seen_b = sls.requests_seen(b_log)[before_b:]
    assert seen_a == [(200, QWEN7)] * 2, seen_a  # Qwen's two calls reached A, and only A
    assert seen_b == [(200, MISTRAL)], seen_b  # Mistral's call reached B, and only B

    # a model the router does not route fails before any call, and the message names it and what the router lists
    with pytest.raises(routing.RoutingError) as ei:
        routing.check_models(["Qwen2.5-7B-Instruct", "Qwen2.5-14B-Instruct"])
    msg = str(ei.value)
    assert "Qwen2.5-14B-Instruct (served id Qwen/Qwen2.5-14B-Instruct)" in msg
    assert f"{r['url']}: serves {QWEN7}, {MISTRAL}" in msg
    with pytest.raises(BackendError, match="no listed server serves 'Qwen/Qwen2.5-14B-Instruct'"):
        get_backend("Qwen2.5-14B-Instruct", cache_mode="off").generate([Message("user", "hi")], p)
    with pytest.raises(UnknownModelError, match="gpt-17"):
        get_backend("gpt-17", cache_mode="off")
    assert len(sls.requests_seen(a_log)) == before_a + 2 and len(sls.requests_seen(b_log)) == before_b + 1
