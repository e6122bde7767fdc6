"""Server discovery: which OpenAI-compatible server serves which model id, asked once per process.

Each server's `/v1/models` is asked in parallel with a short timeout and remembered for the process (a server
that did not answer is asked again after FAILURE_TTL_S: it may still be loading its weights). `route` narrows a
model's candidate servers to those listing its exact id. The checks built on this are in balms.models.routing;
this module imports nothing else of balms, so the HTTP backend and the registry can both use it.
"""

from __future__ import annotations

import functools
import os
import ssl
import threading
import time
from dataclasses import dataclass, field
from typing import Iterable, Sequence

DISCOVERY_TIMEOUT_S = 5.0
SLOW_RETRY_FACTOR = 6  # a server that accepted the connection but timed out is asked once more, this much longer
FAILURE_TTL_S = 30.0  # a server that did not answer is asked again after this long (it may be loading)


class RoutingError(ValueError):
    """No server (or key) for one or more models; the message says which, and what each server serves."""


def _normalise(url: str) -> str:
    """`http://h:8000`, `http://h:8000/`, `http://h:8000/v1` -> `http://h:8000/v1` (as openai_http does)."""
    url = url.strip().rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


def server_urls(servers: Iterable[str] | str | None = None, *, env: bool = True) -> list[str]:
    """The servers to ask: `servers` (a profile's list, or a comma-separated string) then
    BALMS_VLLM_BASE_URLS, normalised to `.../v1`, duplicates dropped, order kept."""
    out: list[str] = []
    parts: list[str] = []
    if isinstance(servers, str):
        parts += servers.split(",")
    elif servers:
        parts += list(servers)
    if env:
        parts += (os.environ.get("BALMS_VLLM_BASE_URLS") or "").split(",")
    for p in parts:
        if p and p.strip():
            u = _normalise(p)
            if u not in out:
                out.append(u)
    return out


@dataclass
class ServerInfo:
    """What one server said at `/v1/models`: the ids it serves, or why it could not be asked."""

    url: str
    models: list[str] = field(default_factory=list)
    error: str | None = None
    asked_at: float = 0.0

    def describe(self) -> str:
        if self.error:
            return f"{self.url}: did not answer /v1/models ({self.error})"
        return f"{self.url}: serves {', '.join(self.models) if self.models else 'no models'}"


_LOCK = threading.Lock()
_INFO: dict[str, ServerInfo] = {}


@functools.lru_cache(maxsize=1)
def tls_context() -> ssl.SSLContext:
    """One TLS context for every client of the process: building one loads the CA bundle (CPU time), and
    a grid builds a backend per cell (issue 27: it was a tenth of the client's CPU on the scale benchmark)."""
    import httpx  # lazily: discovery is imported where no server is asked

    return httpx.create_ssl_context()  # httpx's own default (its CA bundle, SSL_CERT_FILE honoured)


def _ask(url: str, timeout_s: float) -> ServerInfo:
    import httpx

    key = os.environ.get("BALMS_OPENAI_API_KEY") or os.environ.get("OPENAI_API_KEY") or "EMPTY"
    headers = {"Authorization": f"Bearer {key}"}
    try:
        try:
            r = httpx.get(url + "/models", timeout=timeout_s, headers=headers, verify=tls_context())
        except httpx.ReadTimeout:  # connected but slow (a busy server): once more with more patience
            r = httpx.get(url + "/models", timeout=SLOW_RETRY_FACTOR * timeout_s, headers=headers,
                          verify=tls_context())
        if r.status_code != 200:
            return ServerInfo(url, error=f"HTTP {r.status_code}: {r.text[:120]}", asked_at=time.time())
        data = r.json().get("data")
        if not isinstance(data, list):
            return ServerInfo(url, error=f"no 'data' list in {r.text[:120]!r}", asked_at=time.time())
        return ServerInfo(url, [str(m["id"]) for m in data if isinstance(m, dict) and "id" in m], asked_at=time.time())
    except (httpx.HTTPError, ValueError) as exc:
        return ServerInfo(url, error=f"{type(exc).__name__}: {exc}"[:200], asked_at=time.time())


def discover(
    servers: Sequence[str], *, timeout_s: float = DISCOVERY_TIMEOUT_S, refresh: bool = False
) -> list[ServerInfo]:
    """`/v1/models` of every server, asked in parallel, cached per process (failures for FAILURE_TTL_S)."""
    from concurrent.futures import ThreadPoolExecutor

    urls = [_normalise(u) for u in servers]
    now = time.time()
    with _LOCK:
        todo = [
            u
            for u in urls
            if refresh or u not in _INFO or (_INFO[u].error is not None and now - _INFO[u].asked_at > FAILURE_TTL_S)
        ]
    if todo:
        with ThreadPoolExecutor(max_workers=min(16, len(todo))) as ex:
            got = list(ex.map(lambda u: _ask(u, timeout_s), todo))
        with _LOCK:
            for info in got:
                _INFO[info.url] = info
    with _LOCK:
        return [_INFO[u] for u in urls]


def forget() -> None:
    """Drop the per-process discovery cache (tests; a long-lived kernel after servers were restarted)."""
    with _LOCK:
        _INFO.clear()


def servers_for(model_id: str, servers: Sequence[str], **kw) -> list[str]:
    """The servers whose `/v1/models` lists exactly `model_id`."""
    return [i.url for i in discover(servers, **kw) if model_id in i.models]


def describe_all(infos: Sequence[ServerInfo]) -> str:
    return "\n".join("  - " + i.describe() for i in infos) or "  (none listed)"


HOW_TO = (
    "list the servers in BALMS_VLLM_BASE_URLS (comma-separated, e.g. http://gpu1:8000/v1,http://gpu2:8001/v1) "
    "or a profile's `servers:`; serve each model under its exact id (vLLM's default: `vllm serve <HF id>`)"
)


def route(model_id: str, servers: Sequence[str], *, name: str | None = None) -> list[str]:
    """The servers for one model, or a RoutingError naming it and what each server serves."""
    if not servers:
        raise RoutingError(
            f"model {name or model_id!r} ({model_id}) is served over HTTP but no server is listed: {HOW_TO}"
        )
    infos = discover(servers)
    urls = [i.url for i in infos if model_id in i.models]
    if not urls:
        raise RoutingError(
            f"no listed server serves {model_id!r} (model {name or model_id!r}); servers asked:\n"
            f"{describe_all(infos)}\n{HOW_TO}"
        )
    return urls
