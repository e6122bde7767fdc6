"""Model registry: the paper's backbone names (and the embedded CPU models) -> backend kind + exact model id.

Configs and notebook parameters select a model by name; `get_backend(name)` builds the backend, wrapped in
the response cache (`cache_dir()/responses.sqlite`, mode "rw") unless `cache_mode="off"`.

Backends by kind:
- "llamacpp": embedded llama.cpp with a GGUF from PyPI (CPU; results labelled `is_embedded_cpu`).
- "openai": OpenAI-compatible HTTP (`vllm serve`, llama.cpp server). The servers come from `servers=` (a
  profile's `servers:`) and env BALMS_VLLM_BASE_URLS (comma-separated); each model's calls go only to the
  servers whose `/v1/models` lists its exact id, spread across them (balms.models.routing). `base_urls=` names
  the servers explicitly and skips that check. A name the registry does not know but a listed server serves
  runs by that served name.
- "vllm-local": vLLM in-process (pass `backend="vllm-local"` to any vLLM model).
- "anthropic": Messages API via the official client; key from ANTHROPIC_API_KEY; model id from
  `model_id=` or env BALMS_ANTHROPIC_MODEL.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Sequence

from balms.models.pricing import price_of
from balms.stores import one_per_key

# Before anything can import llama_cpp (libgomp reads this once, at load): see balms.models.llamacpp.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

DEFAULT_MODEL = "qwen2.5-coder-1.5b"

# Each backend kind's class ("module:Class"): `build_raw_backend` builds it, and a cell's code key covers that
# module's source (what the backend adds to a request and how it reads a reply), not the other kinds'.
BACKEND_CLASSES = {
    "llamacpp": "balms.models.llamacpp:LlamaCppBackend",
    "openai": "balms.models.openai_http:OpenAICompatBackend",
    "vllm-local": "balms.models.vllm_local:VLLMLocalBackend",
    "anthropic": "balms.models.anthropic_api:AnthropicBackend",
}
JUDGE_MODEL = "Llama-3.3-70B-Instruct"


@dataclass(frozen=True)
class ModelSpec:
    name: str
    backend: str  # "llamacpp" | "openai" | "vllm-local" | "anthropic"
    model_id: str  # exact id: HF repo id as served by vLLM, Anthropic model id, or gguf:<file>@sha256:<8>
    is_reasoning: bool = False
    is_embedded_cpu: bool = False
    context_length: int = 32768
    role: str = "backbone"  # "backbone" | "judge" | "test"
    asset: str | None = None  # gguf_assets key for embedded models
    # GPUs of one server (vLLM --tensor-parallel-size) on the paper's 48 GB A6000-class GPUs: stated here only; the
    # plan, its GPU allocation and the SkyPilot tasks read it
    tensor_parallel: int = 1
    quantization: str | None = None  # how the weights are served ("bitsandbytes-8bit"); None: bf16 as published
    weights_gb: float = 0.0  # memory of the served weights (checked to fit its GPUs with room for the KV cache)
    notes: str = ""

    @property
    def price_in_per_mtok(self) -> float:
        return price_of(self.model_id)[0]

    @property
    def price_out_per_mtok(self) -> float:
        return price_of(self.model_id)[1]


def _gguf(name: str, ctx: int, notes: str, role: str = "backbone") -> ModelSpec:
    from balms.models.gguf_assets import ASSETS

    return ModelSpec(name, "llamacpp", ASSETS[name].model_id, is_embedded_cpu=True, context_length=ctx,
                     role=role, asset=name, notes=notes)


MODELS: dict[str, ModelSpec] = {
    s.name: s
    for s in [
        _gguf("smollm2-135m", 8192, "SmolLM2-135M-Instruct Q4_1; fast tests only (mostly junk answers)", "test"),
        _gguf("qwen2.5-coder-0.5b", 32768, "Qwen2.5-Coder-0.5B-Instruct Q4_K_M; faster embedded option"),
        _gguf("qwen2.5-coder-1.5b", 32768, "Qwen2.5-Coder-1.5B-Instruct Q4_K_M; default embedded backbone"),
        ModelSpec("Qwen2.5-7B-Instruct", "openai", "Qwen/Qwen2.5-7B-Instruct", context_length=32768, weights_gb=15.2),
        ModelSpec("Qwen2.5-14B-Instruct", "openai", "Qwen/Qwen2.5-14B-Instruct", context_length=32768,
                  tensor_parallel=2, weights_gb=29.5),
        ModelSpec("Mistral-7B-Instruct-v0.3", "openai", "mistralai/Mistral-7B-Instruct-v0.3", context_length=32768,
                  weights_gb=14.5),
        ModelSpec("DeepSeek-R1-Distill-Qwen-14B", "openai", "deepseek-ai/DeepSeek-R1-Distill-Qwen-14B",
                  is_reasoning=True, context_length=32768, tensor_parallel=2, weights_gb=29.5),
        ModelSpec("Claude-Haiku-4.5", "anthropic", "claude-haiku-4-5", context_length=200000),
        # the paper's judge as deployed (Appendix D): "served via vLLM (bitsandbytes 8-bit, tensor_parallel_size=2)"
        ModelSpec(JUDGE_MODEL, "openai", "meta-llama/Llama-3.3-70B-Instruct", context_length=131072,
                  role="judge", tensor_parallel=2, quantization="bitsandbytes-8bit", weights_gb=70.6),
    ]
}


def default_model_name() -> str:
    """`BALMS_MODEL` (a registry name) if set, else DEFAULT_MODEL."""
    name = os.environ.get("BALMS_MODEL") or DEFAULT_MODEL
    spec(name)  # validate
    return name


class UnknownModelError(KeyError):
    """A model name neither the registry nor (where asked) any listed server knows; says the known names."""

    def __str__(self) -> str:  # KeyError would print the message in quotes
        return str(self.args[0]) if self.args else "unknown model"


_SERVED: dict[str, ModelSpec] = {}  # names found only on a server (routing.resolve_spec), this process


def register_served_model(name: str) -> ModelSpec:
    """A model the registry does not know, run by its served name on an OpenAI-compatible server."""
    s = _SERVED.get(name) or ModelSpec(name, "openai", name, notes="not in the registry; run by its served name")
    _SERVED[name] = s
    return s


def spec(name: str) -> ModelSpec:
    if name in MODELS:
        return MODELS[name]
    lower = {k.lower(): k for k in MODELS}
    if name.lower() in lower:
        return MODELS[lower[name.lower()]]
    if name in _SERVED:
        return _SERVED[name]
    raise UnknownModelError(f"unknown model {name!r}; known models: {', '.join(MODELS)}")


def canonical_name(name: str) -> str:
    """The registry's spelling of a model name ("Qwen2.5-Coder-0.5B" -> "qwen2.5-coder-0.5b"), which cell specs,
    run files and records carry, so one model never makes two cells; a name the registry does not know (served
    only) is kept as written (servers match it exactly)."""
    try:
        return spec(name).name
    except UnknownModelError:
        return name


def request_additions(name: str, **overrides) -> dict:
    """What the backend `build_raw_backend(name, **overrides)` adds to every request (its `request_additions`),
    known without building it: the replay stand-in and the response re-keying need it with no model or server."""
    s = spec(name)
    kind = overrides.get("backend") or s.backend
    if kind == "llamacpp":
        from balms.models.llamacpp import LlamaCppBackend

        return LlamaCppBackend.additions(**{k: overrides[k] for k in ("default_system",) if k in overrides})
    if kind == "openai":
        from balms.models.openai_http import OpenAICompatBackend

        return OpenAICompatBackend.additions(overrides.get("extra_body"))
    return {}


def backend_module(name: str, kind: str | None = None) -> str:
    """The module of the backend class that serves `name` (a served-only name: the OpenAI-compatible one)."""
    if kind is None:
        try:
            kind = spec(name).backend
        except UnknownModelError:
            kind = "openai"
    if kind not in BACKEND_CLASSES:
        raise ValueError(f"model {name!r}: unknown backend kind {kind!r} ({', '.join(BACKEND_CLASSES)})")
    return BACKEND_CLASSES[kind].split(":")[0]


def _backend_class(kind: str):
    import importlib

    module, cls = BACKEND_CLASSES[kind].split(":")
    return getattr(importlib.import_module(module), cls)


def additions_for_model_id(model_id: str) -> dict:
    """`request_additions` of the registry model with this exact id ({} for an id the registry does not know:
    a served-only model, whose backend adds nothing unless told to)."""
    for s in MODELS.values():
        if s.model_id == model_id:
            return request_additions(s.name)
    return {}


def resolve_spec(name: str, servers: Sequence[str] | None = None):
    """The registry entry for `name`; else, if a listed server serves exactly `name`, an OpenAI-compatible
    spec with that model id (registered for this process so reports can label it); else UnknownModelError."""
    from balms.models.discovery import describe_all, discover, server_urls

    try:
        return spec(name)
    except UnknownModelError:
        pass
    urls = server_urls(servers)
    infos = discover(urls) if urls else []
    if any(name in i.models for i in infos):
        return register_served_model(name)
    asked = (f"; servers asked:\n{describe_all(infos)}" if infos
             else "; no server listed (BALMS_VLLM_BASE_URLS / servers:)")
    raise UnknownModelError(f"unknown model {name!r}: not in the registry (known: {', '.join(MODELS)}) and not served "
                            f"by any listed server{asked}")


def is_reasoning(name: str) -> bool:
    """Whether a model writes a reasoning trace before its answer (own token budgets; see budget_for)."""
    try:
        return spec(name).is_reasoning
    except UnknownModelError:
        return False


def list_models():
    """All registered models as a DataFrame (one row per name)."""
    import pandas as pd

    rows = []
    for s in MODELS.values():
        d = asdict(s)
        d["price_in_per_mtok"] = s.price_in_per_mtok
        d["price_out_per_mtok"] = s.price_out_per_mtok
        rows.append(d)
    return pd.DataFrame(rows).set_index("name", drop=False)


def _base_urls(overrides: dict) -> tuple[list[str], bool]:
    """(server URLs, routed): explicit `base_urls=` are used as given; otherwise `servers=` and
    BALMS_VLLM_BASE_URLS are the candidates, narrowed to the ones serving the model on first call."""
    from balms.models.discovery import server_urls

    servers = overrides.pop("servers", None)
    urls = overrides.pop("base_urls", None) or overrides.pop("base_url", None)
    if urls:
        if isinstance(urls, str):
            urls = [u.strip() for u in urls.split(",") if u.strip()]
        return list(urls), False
    return server_urls(servers), True


def build_raw_backend(name: str, **overrides):
    """The uncached backend for `name`. Overrides: backend, model_id, base_urls, api_key, timeout_s,
    n_threads, model_path, tensor_parallel_size... (unknown keys go to the backend constructor)."""
    s = resolve_spec(name, overrides.get("servers")) if overrides.get("backend") in (None, "openai") else spec(name)
    kind = overrides.pop("backend", None) or s.backend
    if kind != "openai":
        overrides.pop("servers", None)
    model_id = overrides.pop("model_id", None)
    if kind not in BACKEND_CLASSES:
        raise ValueError(f"model {name!r}: unknown backend kind {kind!r} ({', '.join(BACKEND_CLASSES)})")
    backend_class = _backend_class(kind)
    if kind == "llamacpp":
        from balms.models.gguf_assets import gguf_path

        path = overrides.pop("model_path", None) or (lambda: gguf_path(s.asset))
        return backend_class(path, model_id or s.model_id, name=s.name, **overrides)
    if kind == "openai":
        urls, routed = _base_urls(overrides)
        if not urls:
            raise ValueError(
                f"model {name!r} is served over HTTP: list the servers in BALMS_VLLM_BASE_URLS (comma-separated, "
                "e.g. http://gpu1:8000/v1,http://gpu2:8000/v1) or a profile's `servers:`, or pass base_urls=[...]; "
                "see balms.models.openai_http")
        overrides.setdefault("reasoning_model", s.is_reasoning)
        return backend_class(model_id or s.model_id, urls, name=s.name, routed=routed, **overrides)
    if kind == "vllm-local":
        overrides.setdefault("tensor_parallel_size", s.tensor_parallel)
        return backend_class(model_id or s.model_id, name=s.name, **overrides)
    mid = model_id or os.environ.get("BALMS_ANTHROPIC_MODEL") or s.model_id  # anthropic
    return backend_class(mid, name=s.name, **overrides)


def default_cache_path() -> Path:
    from balms.paths import cache_dir

    return cache_dir() / "responses.sqlite"


class ReplayOnlyBackend:
    """Stands in for the real backend in replay-only mode; being called is a bug."""

    def __init__(self, model_id: str, name: str, request_additions: dict | None = None):
        self.model_id, self.name = model_id, name
        self.request_additions = dict(request_additions or {})  # what the real backend would add

    def generate(self, messages, params):  # pragma: no cover - CachedBackend(replay) never calls it
        from balms.models.base import BackendError

        raise BackendError(f"{self.name}: replay-only backend was asked to compute a response")


def shared_cache(path: str | Path | None = None):
    """One ResponseCache per file per process (SQLite connections are shared under a lock)."""
    return _cache_for(str(Path(path) if path else default_cache_path()))


@one_per_key
def _cache_for(path: str):
    from balms.models.cache import ResponseCache

    return ResponseCache(path, additions_of=additions_for_model_id)  # re-keys an older cache


def get_backend(name: str | None = None, *, cache_mode: str = "rw", cache_path: str | Path | None = None, **overrides):
    """Backend for a registry name (None -> default_model_name()), wrapped in the response cache.

    Remote backends (HTTP, Anthropic) also get a retry layer under the cache (`retries=4` by default).
    `servers=[...]` (a profile's `servers:`) adds to BALMS_VLLM_BASE_URLS for HTTP models; an unknown name
    raises UnknownModelError with the known names (a KeyError), unless a listed server serves that name.
    """
    from balms.models.cache import CachedBackend

    name = name or default_model_name()
    if cache_mode == "replay":  # never calls the model: no server, key or model file needed
        try:
            s = spec(name)
        except UnknownModelError:
            if not shared_cache(cache_path).has_model(name):
                raise UnknownModelError(f"unknown model {name!r}: not in the registry (known: {', '.join(MODELS)}) "
                                        f"and no recorded response under that served name") from None
            s = register_served_model(name)
        env_mid = os.environ.get("BALMS_ANTHROPIC_MODEL") if s.backend == "anthropic" else None
        mid = overrides.get("model_id") or env_mid
        raw = ReplayOnlyBackend(mid or s.model_id, s.name, request_additions(s.name, **overrides))
        return CachedBackend(raw, shared_cache(cache_path), mode="replay")
    retries = overrides.pop("retries", 4)
    raw = build_raw_backend(name, **overrides)
    if spec(name).backend in ("openai", "anthropic") or overrides.get("backend") in ("openai", "anthropic"):
        from balms.models.retrying import RetryingBackend

        raw = RetryingBackend(raw, retries=retries)  # under the cache: errors are retried, never stored
    if cache_mode == "off":
        return CachedBackend(raw, None, mode="off")
    return CachedBackend(raw, shared_cache(cache_path), mode=cache_mode)


def with_spec(name: str, **changes) -> ModelSpec:
    """A copy of a spec with fields changed (e.g. a dated Anthropic model id), for callers that need one."""
    return replace(spec(name), **changes)


def model_info(name: str) -> ModelSpec:
    """The registry entry for `name` (alias of `spec`, used by reports to label embedded CPU results)."""
    return spec(name)


def model_caption(models) -> str:
    """'qwen2.5-coder-1.5b (embedded CPU model, not a paper backbone)' and the like, for titles."""
    parts = []
    for m in models:
        info = model_info(m)
        parts.append(f"{m} (embedded CPU model, not a paper backbone)" if info.is_embedded_cpu else m)
    return "; ".join(parts)
