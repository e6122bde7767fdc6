"""One model interface for every provider: chat messages + decoding parameters -> completion.

Backends (OpenAI-compatible HTTP for vLLM/llama.cpp servers, vLLM in-process, Anthropic, llama.cpp
in-process) implement `Backend.generate`. The cache key is `GenParams.cache_key_fields()` plus the exact
model id and the messages; transport settings (timeouts, retries, concurrency, base URLs) never enter it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Protocol, Sequence, runtime_checkable


@dataclass(frozen=True)
class Message:
    role: str  # "system" | "user" | "assistant"
    content: str

    def to_dict(self) -> dict:
        return {"role": self.role, "content": self.content}


@dataclass(frozen=True)
class GenParams:
    """Decoding parameters: everything here determines the output and enters the cache key."""

    temperature: float = 0.0
    max_tokens: int = 256
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = 0  # per-sample seed (derive with balms.models.seeds.sample_seed)
    json_schema: dict | None = None  # constrain output to this JSON schema where supported
    grammar: str | None = None  # GBNF grammar (llama.cpp) where supported
    epoch: int = 0  # repeat index for repeated sampling; part of the key
    # top-k log-probabilities to return per generated token (0 = none). Omitted from the key when 0, so the
    # keys of every request that does not ask for them are unchanged.
    logprobs: int = 0

    def cache_key_fields(self) -> dict:
        d = asdict(self)
        d["stop"] = list(self.stop)
        if not self.logprobs:
            del d["logprobs"]
        return d


@dataclass
class Completion:
    text: str  # the answer, with any <think> reasoning removed
    model_id: str  # exact model id that produced it
    finish_reason: str = "stop"  # "stop" | "length" | ...
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    reasoning: str | None = None  # <think> content of reasoning models, kept for the transcript
    reasoning_tokens: int = 0
    cached: bool = False
    # with GenParams.logprobs = k: per generated token, its top-k {token text: log-probability} under the
    # model's own distribution (before any grammar or schema constraint); None when not asked or not supported
    logprobs: list[dict[str, float]] | None = None
    raw: dict = field(default_factory=dict)  # provider payload subset, for debugging
    # the response-cache key it was stored under (balms.models.cache), so a record can name the responses it used;
    # None when no cache was involved
    cache_key: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


class BackendError(RuntimeError):
    """A model call failed. `transient` errors (429, 5xx, timeouts) are retried by the runner."""

    def __init__(self, message: str, *, transient: bool = False, retry_after: float | None = None):
        super().__init__(message)
        self.transient = transient
        self.retry_after = retry_after


@runtime_checkable
class Backend(Protocol):
    # exact id, e.g. "Qwen/Qwen2.5-14B-Instruct" or "gguf:qwen2.5-coder-1.5b-instruct-q4_k_m@sha256:cc32..."
    model_id: str

    def generate(self, messages: Sequence[Message], params: GenParams) -> Completion: ...
