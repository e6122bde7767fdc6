"""OpenAI-compatible chat completions over HTTP: `vllm serve` and llama.cpp's server speak this protocol.

One or several base URLs; each request goes to the URL with the fewest requests in flight (ties: round
robin), so a run scales out across GPU servers. Transport failures become `BackendError`s with
`transient=True` (429, 5xx, timeouts, dropped/truncated/malformed bodies) so callers retry them; other 4xx
are permanent. Built on httpx directly: the protocol is one POST, and a thin client keeps harness overhead
per request well below a millisecond.

Serving the paper's models with vLLM: `balms deploy skypilot` writes each model's `vllm serve` command
(deploy/skypilot/*.yaml), its GPUs per server being the model registry's `tensor_parallel`, the one value the plan
bills and the deploy requests. List every server in BALMS_VLLM_BASE_URLS:

    export BALMS_VLLM_BASE_URLS=http://gpu-a:8000/v1,http://gpu-b:8000/v1

The served model name must be the registry's model id (the HF repo id, vLLM's default), or pass
`model_id=` to `get_backend`. For llama.cpp's server use `json_style="llamacpp"` (json_object + schema and a
`grammar` field instead of vLLM's `json_schema` / `guided_grammar`).
"""

from __future__ import annotations

import email.utils
import itertools
import json
import os
import threading
import time
from typing import Sequence

import httpx

from balms.models.base import BackendError, Completion, GenParams, Message
from balms.models.discovery import tls_context
from balms.models.reasoning import estimate_reasoning_tokens, split_completion
from balms.models.slots import SLOTS

TRANSIENT_STATUS = {408, 409, 425, 429, 500, 502, 503, 504, 529}


def normalise_base_url(url: str) -> str:
    url = url.strip().rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or HTTP date)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


POOL_SIZE = 32  # connections per HTTP client of a backend (more in flight: more clients)


class OpenAICompatBackend:
    """Chat completions against one or more OpenAI-compatible servers."""

    def __init__(self, model_id: str, base_urls: Sequence[str] | str, *, name: str | None = None,
                 api_key: str | None = None, timeout_s: float = 300.0, connect_timeout_s: float = 10.0,
                 max_connections: int = 256, json_style: str = "vllm", extra_body: dict | None = None,
                 routed: bool = False, reasoning_model: bool = False):
        if isinstance(base_urls, str):
            base_urls = [u for u in base_urls.split(",") if u.strip()]
        if not base_urls:
            raise ValueError("OpenAICompatBackend needs at least one base URL")
        if json_style not in ("vllm", "llamacpp", "openai"):
            raise ValueError(f"json_style must be 'vllm', 'llamacpp' or 'openai', got {json_style!r}")
        self.model_id = model_id
        self.name = name or model_id
        self.base_urls = [normalise_base_url(u) for u in base_urls]
        self.json_style = json_style
        self.extra_body = dict(extra_body or {})
        self.timeout_s = timeout_s
        self._connect_timeout = connect_timeout_s
        key = api_key or os.environ.get("BALMS_OPENAI_API_KEY") or os.environ.get("OPENAI_API_KEY") or "EMPTY"
        # connections split over several clients (a thread keeps to one): httpcore's pool scans its connections
        # under one lock for every request, which at hundreds in flight cost the client more CPU than the
        # request itself (issue 27: 1,000 requests in flight); each client keeps POOL_SIZE connections at most
        self._clients = [httpx.Client(
            verify=tls_context(), timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s),
            limits=httpx.Limits(max_connections=min(POOL_SIZE, max_connections),
                                max_keepalive_connections=min(POOL_SIZE, max_connections)),
            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        ) for _ in range(max(1, -(-max_connections // POOL_SIZE)))]
        self._client = self._clients[0]
        self._local = threading.local()
        self._deal = itertools.count()
        self._lock = threading.Lock()
        self._inflight = [0] * len(self.base_urls)
        self.sent = [0] * len(self.base_urls)  # requests sent per base URL
        self._rr = itertools.count()
        # routed: base_urls are candidates; on first use keep only those whose /v1/models lists model_id
        self._routed = not routed
        self.reasoning_model = reasoning_model  # registry is_reasoning: a cut-off tagless text is all thought
        self.candidates = list(self.base_urls)

    @staticmethod
    def additions(extra_body: dict | None = None) -> dict:
        """What this backend adds to a request: `extra_body`, when given (the registry asks this for a replay
        stand-in too)."""
        return {"extra_body": dict(extra_body)} if extra_body else {}

    @property
    def request_additions(self) -> dict:
        return self.additions(self.extra_body)

    def _route(self) -> None:
        """Narrow the candidates to the servers that serve this model (balms.models.routing), once."""
        from balms.models.discovery import RoutingError, route

        with self._lock:
            if self._routed:
                return
            try:
                urls = route(self.model_id, self.candidates, name=self.name)
            except RoutingError as exc:
                raise BackendError(str(exc), transient=False) from None
            self.base_urls = urls
            self._inflight = [0] * len(urls)
            self.sent = [0] * len(urls)
            self._routed = True

    # -- dispatch -------------------------------------------------------------------------------------
    def _acquire(self) -> int:
        """A server for the next request: one with a free slot (balms.models.slots; waits while every server
        is at its limit), fewest requests in flight, ties round robin."""
        if not self._routed:
            self._route()
        with self._lock:
            start = next(self._rr) % len(self.base_urls)
            order = [self.base_urls[(start + k) % len(self.base_urls)] for k in range(len(self.base_urls))]
        i = self.base_urls.index(SLOTS.take(self.base_urls, prefer=order))
        with self._lock:
            self._inflight[i] += 1
            self.sent[i] += 1
        return i

    def _thread_client(self) -> httpx.Client:
        """This thread's client (threads are dealt to the clients in turn, so each client's pool stays small)."""
        c = getattr(self._local, "client", None)
        if c is None:
            c = self._local.client = self._clients[next(self._deal) % len(self._clients)]
        return c

    def _release(self, i: int) -> None:
        with self._lock:
            self._inflight[i] -= 1
        SLOTS.give(self.base_urls[i])

    def _post(self, url: str, body: str, timeout: float) -> tuple[httpx.Response, bytes]:
        """POST and read the whole answer within `timeout` seconds of wall-clock time, not of idle reading: a
        server that drips a byte a second would otherwise hold a call for ever (httpx's read timeout is per read)."""
        end = time.monotonic() + timeout
        limits = httpx.Timeout(timeout, connect=min(timeout, self._connect_timeout))
        with self._thread_client().stream("POST", url, content=body, timeout=limits) as resp:
            chunks = []
            for chunk in resp.iter_bytes():
                chunks.append(chunk)
                if time.monotonic() > end:
                    raise BackendError(f"{self.model_id}: answer from {url} not complete within the deadline of "
                                       f"{timeout:g} s", transient=True)
            return resp, b"".join(chunks)

    # -- request --------------------------------------------------------------------------------------
    def request_body(self, messages: Sequence[Message], params: GenParams) -> dict:
        body: dict = {
            "model": self.model_id,
            "messages": [m.to_dict() for m in messages],
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_tokens,
        }
        if params.stop:
            body["stop"] = list(params.stop)
        if params.seed is not None:
            body["seed"] = params.seed
        if params.grammar:
            body["grammar" if self.json_style == "llamacpp" else "guided_grammar"] = params.grammar
        elif params.json_schema is not None:
            if self.json_style == "llamacpp":
                body["response_format"] = {"type": "json_object", "schema": params.json_schema}
            else:
                body["response_format"] = {"type": "json_schema",
                                           "json_schema": {"name": "response", "schema": params.json_schema}}
        body.update(self.extra_body)
        return body

    supports_timeout = True  # generate(..., timeout_s=) sets the transport timeout of that request

    def generate(self, messages: Sequence[Message], params: GenParams, *, timeout_s: float | None = None) -> Completion:
        body = self.request_body(messages, params)
        timeout = self.timeout_s if timeout_s is None else timeout_s
        i = self._acquire()
        url = self.base_urls[i] + "/chat/completions"
        t0 = time.perf_counter()
        try:
            resp, content = self._post(url, json.dumps(body), timeout)
        except httpx.TimeoutException as exc:
            raise BackendError(f"{self.model_id}: no answer within the deadline of {timeout:g} s at {url} "
                               f"({type(exc).__name__})",
                               transient=True) from exc
        except httpx.TransportError as exc:  # connect refused, reset, truncated body (RemoteProtocolError)
            raise BackendError(f"{self.model_id}: transport error at {url}: {type(exc).__name__}: {exc}",
                               transient=True) from exc
        finally:
            self._release(i)
        latency = time.perf_counter() - t0
        if resp.status_code != 200:
            snippet = content[:300].decode("utf-8", "replace")
            transient = resp.status_code in TRANSIENT_STATUS
            retry_after = parse_retry_after(resp.headers.get("retry-after"))
            if retry_after and resp.status_code in (429, 503, 529):  # the whole server asked for a pause
                SLOTS.pause(self.base_urls[i], retry_after)
            raise BackendError(f"{self.model_id}: HTTP {resp.status_code} from {url}: {snippet}",
                               transient=transient, retry_after=retry_after)
        try:
            data = json.loads(content)
        except ValueError as exc:
            raise BackendError(
                f"{self.model_id}: malformed response body from {url} (not JSON, {len(content)} bytes): "
                f"{content[:120].decode('utf-8', 'replace')!r}", transient=True) from exc
        return self._parse(data, url, latency)

    def _parse(self, data: dict, url: str, latency: float) -> Completion:
        try:
            choice = data["choices"][0]
            msg = choice["message"]
        except (KeyError, IndexError, TypeError) as exc:
            raise BackendError(
                f"{self.model_id}: response from {url} lacks choices[0].message: {json.dumps(data)[:200]}",
                transient=False) from exc
        full = msg.get("content") or ""
        server_reasoning = msg.get("reasoning_content") or msg.get("reasoning")
        answer, reasoning = split_completion(full, choice.get("finish_reason"),
                                             self.reasoning_model and not server_reasoning)
        if server_reasoning:  # vLLM --reasoning-parser splits it for us
            reasoning = server_reasoning + (("\n" + reasoning) if reasoning else "")
        usage = data.get("usage") or {}
        completion_tokens = int(usage.get("completion_tokens") or 0)
        details = usage.get("completion_tokens_details") or {}
        reasoning_tokens = int(details.get("reasoning_tokens") or 0) or estimate_reasoning_tokens(
            (server_reasoning or "") + full, reasoning, completion_tokens)
        return Completion(
            text=answer,
            model_id=self.model_id,
            finish_reason=choice.get("finish_reason") or "stop",
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=completion_tokens,
            latency_s=latency,
            reasoning=reasoning,
            reasoning_tokens=reasoning_tokens,
            raw={"id": data.get("id"), "served_model": data.get("model"), "base_url": url.rsplit("/chat", 1)[0]},
        )

    def list_served_models(self) -> list[str]:
        """Model ids each server reports (`/v1/models`), for `balms models ping`."""
        out = []
        for base in self.base_urls:
            try:
                r = self._client.get(base + "/models", timeout=10)
                r.raise_for_status()
                out.extend(m["id"] for m in r.json().get("data", []))
            except (httpx.HTTPError, ValueError, KeyError) as exc:
                raise BackendError(f"{self.model_id}: cannot list models at {base}: {exc}", transient=True) from exc
        return out

    def close(self) -> None:
        for c in self._clients:
            c.close()
