"""Per-call retries and timeout for any backend: exponential backoff with jitter on transient
`BackendError`s (429, 5xx, 529 overload, timeouts, truncated bodies), honouring the server's retry-after.

Retries live at the call level so a multi-step agent never redoes finished steps. `get_backend` puts one
under the cache for remote backends (HTTP, Anthropic), so judges and notebooks get retries too; the runner
wraps the backend it hands to agents in another that adds the per-call timeout (and retries only when the
backend has no retry layer of its own). Callers that need retries use `with_retries`, which adds a layer only
where none exists: two stacked layers multiply the attempts (3 x 5 = 15 calls to a failing server).
"""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Sequence

from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt

from balms.models.base import BackendError, Completion, GenParams, Message


def is_transient(exc: BaseException) -> bool:
    from balms.models.slots import STOP

    return isinstance(exc, BackendError) and exc.transient and not STOP.is_set()


# A call's wall-clock deadline when none is set: time to connect and prefill, plus its whole output budget at a
# slow per-request decode rate (a server's batch shares its throughput: a 70B at 120 tokens/s over 16 requests
# gives each under 8), so only a hung or dripping server meets it.
DEADLINE_BASE_S = 60.0
DEADLINE_MIN_TOKENS_PER_S = 4.0


def call_deadline(params: GenParams) -> float:
    """Seconds a call may take from first byte sent to last byte read when no deadline is set (the runner's
    default): from its max_tokens."""
    return DEADLINE_BASE_S + (params.max_tokens or 0) / DEADLINE_MIN_TOKENS_PER_S


class _WaitRetryAfter:
    """Exponential backoff with full jitter (initial * 2**(n-1), capped), never shorter than retry-after.

    The jitter is deliberately unseeded: it only spreads clients apart in time and never affects a result.
    """

    def __init__(self, initial: float, max_wait: float):
        self.initial, self.max_wait = initial, max_wait

    def delay(self, retry_number: int, exc: BaseException | None) -> float:
        wait = random.uniform(0, min(self.initial * 2 ** (retry_number - 1), self.max_wait))
        ra = getattr(exc, "retry_after", None)
        if ra is not None:
            wait = max(wait, min(float(ra), self.max_wait))
        return wait

    def __call__(self, state: RetryCallState) -> float:
        # tenacity's attempt k is overall attempt k + 1 (the first one ran on the fast path), i.e. retry k + 1
        return self.delay(state.attempt_number + 1, state.outcome.exception() if state.outcome else None)


class RetryingBackend:
    """Wrap a backend: `retries` extra attempts for transient errors; each attempt a wall-clock deadline of
    `timeout_s` seconds (a callable: from the call's GenParams, e.g. `call_deadline`; None: the backend's own)."""

    def __init__(self, backend, *, retries: int = 4, timeout_s: float | None = None,
                 initial_wait: float = 0.5, max_wait: float = 30.0, sleep=None):
        self.backend = backend
        self.model_id = backend.model_id
        self.name = getattr(backend, "name", backend.model_id)
        self.retries = retries
        self.timeout_s = timeout_s
        self.attempts = 0  # total calls made to the wrapped backend
        self.retried = 0
        self._lock = threading.Lock()
        self._wait = _WaitRetryAfter(initial_wait, max_wait)
        self._sleep = sleep
        # Backends with a transport timeout (HTTP, Anthropic) get it per request; others run in a watchdog
        # thread (a timed-out in-process call cannot be cancelled and finishes in the background).
        self._native = bool(getattr(backend, "supports_timeout", False))
        self._pool: ThreadPoolExecutor | None = None  # watchdog threads, created on first need

    # A RetryingBackend can always enforce a per-call timeout (natively or with its watchdog).
    supports_timeout = True

    def __getattr__(self, item):  # expose stats() etc. of the wrapped backend
        return getattr(self.backend, item)

    def _once(self, messages: Sequence[Message], params: GenParams, timeout: float | None) -> Completion:
        with self._lock:
            self.attempts += 1
        if callable(timeout):
            timeout = timeout(params)
        if not timeout:
            return self.backend.generate(messages, params)
        if self._native:
            return self.backend.generate(messages, params, timeout_s=timeout)
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=64, thread_name_prefix="balms-call")
        fut = self._pool.submit(self.backend.generate, messages, params)
        try:
            return fut.result(timeout=timeout)
        except FutureTimeout:
            raise BackendError(f"{self.model_id}: no response within the deadline of {timeout:g} s",
                               transient=True) from None

    def _before_sleep(self, state: RetryCallState) -> None:
        with self._lock:
            self.retried += 1

    def generate(self, messages: Sequence[Message], params: GenParams, *, timeout_s: float | None = None) -> Completion:
        timeout = self.timeout_s if timeout_s is None else timeout_s
        try:  # fast path: most calls succeed first time, and need no retry machinery
            return self._once(messages, params, timeout)
        except BackendError as exc:
            if not exc.transient or self.retries <= 0:
                raise
            first = exc
        with self._lock:
            self.retried += 1
        (self._sleep or time.sleep)(self._wait.delay(1, first))
        kwargs = {} if self._sleep is None else {"sleep": self._sleep}
        retrying = Retrying(
            stop=stop_after_attempt(self.retries),  # the first attempt was made above
            wait=self._wait,
            retry=retry_if_exception(is_transient),
            before_sleep=self._before_sleep,
            reraise=True,
            **kwargs,
        )
        try:
            return retrying(self._once, messages, params, timeout)
        except BackendError as exc:
            n = retrying.statistics.get("attempt_number", 1) + 1
            if exc.transient:
                raise BackendError(f"{exc} (gave up after {n} attempts)", transient=True,
                                   retry_after=exc.retry_after) from exc
            raise

    def stats(self) -> dict:
        inner = getattr(self.backend, "stats", None)
        return {**(inner() if callable(inner) else {}), "attempts": self.attempts, "retried": self.retried}

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


def retry_layer(backend, max_depth: int = 8) -> RetryingBackend | None:
    """The first RetryingBackend in a wrapper chain (each wrapper exposes the next as `.backend`), else None."""
    for _ in range(max_depth):
        if isinstance(backend, RetryingBackend):
            return backend
        backend = getattr(backend, "backend", None)
        if backend is None:
            return None
    return None


def with_retries(backend, *, retries: int, **kwargs):
    """`backend` itself when its chain already retries (e.g. a remote model from `get_backend`), else the
    backend wrapped in a RetryingBackend with `retries` extra attempts: exactly one retry layer either way."""
    if retry_layer(backend) is not None:
        return backend
    return RetryingBackend(backend, retries=retries, **kwargs)
