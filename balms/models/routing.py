"""Routing model calls to the OpenAI-compatible servers that actually serve each model.

The researcher lists every server once (env BALMS_VLLM_BASE_URLS, comma-separated, and/or a profile's
`servers:`); balms asks each one's `/v1/models` (once per process, short timeout; balms.models.discovery) and
sends a model's calls only to the servers whose list holds its exact served id (e.g. `Qwen/Qwen2.5-14B-Instruct`),
spreading load among them (OpenAICompatBackend: fewest requests in flight, ties round robin). Why: vLLM answers
404 for a model it does not serve, and some servers (llama-cpp-python) silently answer any name with whatever
they loaded, so sending every model to every URL is either an error or a wrong result.

`check_models(names, servers)` is the up-front check: one `RoutingError` naming every model that has no server
(and, for each server asked, what it serves or why it did not answer), plus unknown names with the known ones.
A name the registry does not know but a listed server serves is runnable by that served name
(`resolve_spec`): an OpenAI-compatible backend whose model id is exactly that name.
"""

from __future__ import annotations

import os
from typing import Iterable

from balms.models.discovery import (  # noqa: F401
    HOW_TO,
    RoutingError,
    ServerInfo,
    describe_all,
    discover,
    forget,
    route,
    server_urls,
    servers_for,
)
from balms.models.registry import resolve_spec  # noqa: F401


def check_models(names: Iterable[str], servers: Iterable[str] | str | None = None, *,
                 cache_mode: str = "rw") -> dict[str, list[str]]:
    """Before the first call: every model must be known (or served under that name) and reachable.

    Returns {name: [server urls]} (Anthropic models map to ["anthropic"], embedded ones to ["local"]); raises
    ONE RoutingError listing every problem: unknown names (with the known ones), HTTP models no listed server
    serves (with what each server serves), Anthropic models without ANTHROPIC_API_KEY. In replay mode nothing
    is called, so only unknown names are errors.
    """
    from balms.models.registry import MODELS, UnknownModelError, spec

    names = list(dict.fromkeys(n for n in names if n))
    urls = server_urls(servers)
    infos = discover(urls) if urls and cache_mode != "replay" else []
    served = {m for i in infos for m in i.models}
    out: dict[str, list[str]] = {}
    unknown, missing, nokey = [], [], []
    for n in names:
        try:
            s = spec(n)
        except UnknownModelError:
            if n in served:
                out[n] = [i.url for i in infos if n in i.models]
            elif cache_mode == "replay":
                out[n] = ["replay"]  # resolved by served name when recorded; the cache has it or says so
            else:
                unknown.append(n)
            continue
        if cache_mode == "replay":
            out[n] = ["replay"]
        elif s.backend == "openai":
            hits = [i.url for i in infos if s.model_id in i.models]
            if hits:
                out[n] = hits
            else:
                missing.append(f"{n} (served id {s.model_id})")
        elif s.backend == "anthropic":
            if os.environ.get("ANTHROPIC_API_KEY"):
                out[n] = ["anthropic"]
            else:
                nokey.append(n)
        else:
            out[n] = ["local"]
    problems = []
    if unknown:
        asked = f"; servers asked:\n{describe_all(infos)}" if urls else "; no server listed"
        problems.append(f"unknown model(s) {', '.join(map(repr, unknown))}: not in the registry and not served by any "
                        f"listed server; known models: {', '.join(MODELS)}{asked}")
    if missing:
        where = f"servers asked:\n{describe_all(infos)}" if urls else "no server listed"
        problems.append(f"no server for {', '.join(missing)}; {where}\n{HOW_TO}")
    if nokey:
        problems.append(f"{', '.join(nokey)} need(s) ANTHROPIC_API_KEY (or run with cache_mode replay)")
    if problems:
        raise RoutingError("cannot run these models:\n" + "\n".join("* " + p for p in problems))
    return out
