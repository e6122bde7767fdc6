"""Anthropic Messages API through the official `anthropic` client (Claude-Haiku-4.5 by default).

The key comes from ANTHROPIC_API_KEY. The client's own retries are switched off (`max_retries=0`): every
failure becomes a `BackendError` (429, 529 overload, 5xx, timeouts and connection errors transient, with the
server's retry-after) and `RetryingBackend` retries it with backoff, exactly like the HTTP backend, so the
runner sees one retry policy. `base_url` (or ANTHROPIC_BASE_URL) points the client elsewhere, e.g. at the
loopback server of the tests.

Differences from the open models, on purpose kept visible: no seed (decoding at temperature 0 is nearly but
not strictly deterministic; the seed still enters the cache key), no GBNF grammar (refused), JSON schemas via
structured outputs (`output_config.format`). The installed client (anthropic 2.x) no longer has temperature /
top_p arguments (recent Claude models fix sampling server-side); with `sampling_params=True` (or env
BALMS_ANTHROPIC_SAMPLING=1) they are sent in the body for API versions that still accept them, top_p only when
below 1 (models that accept sampling reject temperature and top_p together).
"""

from __future__ import annotations

import os
import time
from typing import Sequence

from balms.models.base import BackendError, Completion, GenParams, Message
from balms.models.openai_http import TRANSIENT_STATUS, parse_retry_after
from balms.models.slots import ANTHROPIC, SLOTS

_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "refusal": "refusal"}


class AnthropicBackend:
    def __init__(self, model_id: str = "claude-haiku-4-5", *, name: str | None = None, api_key: str | None = None,
                 base_url: str | None = None, timeout_s: float = 120.0, sampling_params: bool | None = None):
        try:
            import anthropic
        except ImportError as exc:  # pragma: no cover - a core dependency
            raise BackendError("the `anthropic` package is not installed: pip install anthropic") from exc
        self._anthropic = anthropic
        self.model_id = model_id
        self.name = name or model_id
        key = api_key or os.environ.get("ANTHROPIC_API_KEY")
        if not key:
            raise BackendError(
                f"{self.name}: ANTHROPIC_API_KEY is not set (or pass api_key=); to re-run from recorded responses "
                "without a key use cache_mode='replay'")
        self.timeout_s = timeout_s
        if sampling_params is None:
            sampling_params = os.environ.get("BALMS_ANTHROPIC_SAMPLING", "0") == "1"
        self.sampling_params = sampling_params
        self.client = anthropic.Anthropic(
            api_key=key, base_url=base_url or os.environ.get("ANTHROPIC_BASE_URL") or None, max_retries=0,
            timeout=timeout_s,
        )

    supports_timeout = True

    def request_params(self, messages: Sequence[Message], params: GenParams) -> dict:
        """The Messages API parameters for one call (also a batch request's `params`)."""
        if params.grammar:
            raise BackendError(f"{self.model_id}: the Anthropic API has no GBNF grammar support; use json_schema")
        system = "\n\n".join(m.content for m in messages if m.role == "system")
        chat = [m.to_dict() for m in messages if m.role != "system"]
        kwargs: dict = {"model": self.model_id, "max_tokens": params.max_tokens, "messages": chat}
        if system:
            kwargs["system"] = system
        if params.stop:
            kwargs["stop_sequences"] = list(params.stop)
        if params.json_schema is not None:
            kwargs["output_config"] = {"format": {"type": "json_schema", "schema": params.json_schema}}
        return kwargs

    def generate(self, messages: Sequence[Message], params: GenParams, *, timeout_s: float | None = None) -> Completion:
        kwargs = self.request_params(messages, params)
        if self.sampling_params:
            sampling = {"temperature": params.temperature}
            if params.top_p < 1.0:
                sampling["top_p"] = params.top_p
            kwargs["extra_body"] = sampling
        timeout = self.timeout_s if timeout_s is None else timeout_s
        kwargs["timeout"] = timeout
        a = self._anthropic
        t0 = time.perf_counter()
        try:
            with SLOTS.slot(ANTHROPIC):  # the account's own limit of requests in flight (balms.models.slots)
                msg = self.client.messages.create(**kwargs)
        except a.APITimeoutError as exc:
            raise BackendError(f"{self.model_id}: timeout after {timeout:g} s", transient=True) from exc
        except a.APIConnectionError as exc:
            raise BackendError(f"{self.model_id}: connection error: {exc}", transient=True) from exc
        except a.APIStatusError as exc:
            err = status_error(self.model_id, exc)
            if err.retry_after and exc.status_code in (429, 529):  # the account is limited: pause every call
                SLOTS.pause(ANTHROPIC, err.retry_after)
            raise err from exc
        except a.APIResponseValidationError as exc:
            raise BackendError(f"{self.model_id}: malformed response: {exc}", transient=True) from exc
        return completion_from_message(msg, self.model_id, time.perf_counter() - t0)

    def close(self) -> None:
        self.client.close()


def status_error(model_id: str, exc) -> BackendError:
    """An APIStatusError as a BackendError: 429/529/5xx transient (with retry-after), other 4xx permanent."""
    status = exc.status_code
    retry_after = parse_retry_after(exc.response.headers.get("retry-after"))
    etype = ""
    if isinstance(exc.body, dict):
        etype = (exc.body.get("error") or {}).get("type", "")
    return BackendError(f"{model_id}: HTTP {status} {etype}: {exc.message}", transient=status in TRANSIENT_STATUS,
                        retry_after=retry_after)


def completion_from_message(msg, model_id: str, latency: float, **raw) -> Completion:
    """A Messages API `Message` (direct or a batch result) as a Completion."""
    texts, thoughts = [], []
    for block in msg.content:
        if block.type == "text":
            texts.append(block.text)
        elif block.type == "thinking":
            thoughts.append(block.thinking)
    u = msg.usage
    prompt_tokens = (u.input_tokens or 0) + (getattr(u, "cache_read_input_tokens", 0) or 0) + (
        getattr(u, "cache_creation_input_tokens", 0) or 0)
    return Completion(
        text="".join(texts),
        model_id=model_id,
        finish_reason=_FINISH.get(msg.stop_reason or "", msg.stop_reason or "stop"),
        prompt_tokens=prompt_tokens,
        completion_tokens=u.output_tokens or 0,
        latency_s=latency,
        reasoning="\n".join(thoughts) or None,
        reasoning_tokens=0,  # the API does not split thinking tokens out of output_tokens
        raw={"id": msg.id, "served_model": msg.model, "stop_reason": msg.stop_reason, **raw},
    )
