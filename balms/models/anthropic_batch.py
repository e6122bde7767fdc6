"""Claude through the Message Batches API (half the list price): submit, poll, collect into the response cache.

Why batches fit balms: agents call `generate` one sample at a time, but a single-call cell's requests are all
known up front (each agent's `first_prompt` and decoding parameters). `BatchClient.run(requests)` sends the
ones the response cache lacks as batches; every result lands in the same cache under the same key a direct call
would use, so the normal run then replays them with zero API calls (balms.experiments.batching drives this).

Crash safety: each submitted request is recorded (custom_id = cache key, batch id, state) in a small SQLite file
beside the response cache (`anthropic_batches.sqlite`) right after the batch is created. A run that is stopped
after submitting resumes by polling the recorded batches: nothing finished or still in flight is resubmitted.
Errored requests whose error is transient (overloaded, api_error, rate limit) and expired or canceled ones are
resubmitted up to `max_attempts`; the rest are reported (never silently dropped): `BatchReport.failed`, and the
normal run then makes those calls directly, or records their errors.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from balms.models.base import BackendError, GenParams, Message
from balms.models.cache import ResponseCache, cache_key, request_payload
from balms.stores import open_db

RETRYABLE_ERRORS = {"overloaded_error", "api_error", "rate_limit_error", "timeout_error"}
MAX_BATCH_REQUESTS = 10_000  # the API allows 100,000 / 256 MB; smaller batches finish and report sooner

_SCHEMA = """
CREATE TABLE IF NOT EXISTS batches (batch_id TEXT PRIMARY KEY, model_id TEXT, n INTEGER, created_at REAL,
                                    ended_at REAL, label TEXT);
CREATE TABLE IF NOT EXISTS requests (custom_id TEXT PRIMARY KEY, batch_id TEXT, model_id TEXT, state TEXT,
                                     attempts INTEGER, error TEXT, updated_at REAL);
"""


class BatchStore:
    """Submitted batches and the state of each request (submitted, succeeded, errored, expired, canceled)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._con = open_db(self.path, [s for s in _SCHEMA.split(";") if s.strip()], autocommit=True)

    def record_batch(self, batch_id: str, model_id: str, custom_ids: Sequence[str], label: str = "") -> None:
        now = time.time()
        with self._lock:
            self._con.execute("BEGIN")
            self._con.execute(
                "INSERT OR REPLACE INTO batches VALUES (?,?,?,?,NULL,?)",
                (batch_id, model_id, len(custom_ids), now, label),
            )
            for cid in custom_ids:
                row = self._con.execute("SELECT attempts FROM requests WHERE custom_id=?", (cid,)).fetchone()
                self._con.execute(
                    "INSERT OR REPLACE INTO requests VALUES (?,?,?,?,?,NULL,?)",
                    (cid, batch_id, model_id, "submitted", (row[0] if row else 0) + 1, now),
                )
            self._con.execute("COMMIT")

    def set_state(self, custom_id: str, state: str, error: str | None = None) -> None:
        with self._lock:
            self._con.execute(
                "UPDATE requests SET state=?, error=?, updated_at=? WHERE custom_id=?",
                (state, error, time.time(), custom_id),
            )

    def end_batch(self, batch_id: str) -> None:
        with self._lock:
            self._con.execute("UPDATE batches SET ended_at=? WHERE batch_id=?", (time.time(), batch_id))

    def request(self, custom_id: str) -> dict | None:
        with self._lock:
            row = self._con.execute(
                "SELECT custom_id, batch_id, state, attempts, error FROM requests WHERE custom_id=?", (custom_id,)
            ).fetchone()
        return dict(zip(("custom_id", "batch_id", "state", "attempts", "error"), row, strict=True)) if row else None

    def open_batches(self, model_id: str | None = None) -> list[str]:
        """Batches submitted and not yet collected (a stopped run resumes from these)."""
        q = "SELECT batch_id FROM batches WHERE ended_at IS NULL" + (" AND model_id=?" if model_id else "")
        with self._lock:
            return [r[0] for r in self._con.execute(q + " ORDER BY created_at", (model_id,) if model_id else ())]

    def close(self) -> None:
        with self._lock:
            self._con.close()


@dataclass
class BatchReport:
    """What one `run` did: requests asked for, found in the cache, submitted, collected, and failures."""

    requested: int = 0
    from_cache: int = 0
    resumed: int = 0  # requests already in a recorded batch (not resubmitted)
    submitted: int = 0
    succeeded: int = 0
    batches: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # custom_id -> last error (after max_attempts)

    def to_dict(self) -> dict:
        return {
            k: getattr(self, k)
            for k in ("requested", "from_cache", "resumed", "submitted", "succeeded", "batches", "failed")
        }

    def then(self, col: "BatchReport") -> "BatchReport":
        """This submission's report followed by `col`, the collection of the same requests."""
        self.succeeded = col.succeeded
        self.submitted += col.submitted
        self.batches = list(dict.fromkeys(self.batches + col.batches))
        self.failed = {**self.failed, **col.failed}
        return self


class BatchClient:
    """Message Batches for one Claude model, writing results into a ResponseCache.

    `backend` is an AnthropicBackend (its client, model id and request building are reused)."""

    def __init__(
        self,
        backend,
        cache: ResponseCache,
        store: BatchStore,
        *,
        poll_s: float = 30.0,
        max_wait_s: float = 26 * 3600,
        max_attempts: int = 3,
        sleep=time.sleep,
        progress=None,
    ):
        self.backend = backend
        self.model_id = backend.model_id
        self.cache, self.store = cache, store
        self.poll_s, self.max_wait_s, self.max_attempts = poll_s, max_wait_s, max_attempts
        self._sleep = sleep
        self._progress = progress

    def _say(self, msg: str) -> None:
        if self._progress:
            self._progress(msg)

    def _api(self, fn, *args, **kw):
        a = self.backend._anthropic
        try:
            return fn(*args, **kw)
        except a.APIStatusError as exc:
            from balms.models.anthropic_api import status_error

            raise status_error(self.model_id, exc) from exc
        except (a.APIConnectionError, a.APITimeoutError) as exc:
            raise BackendError(f"{self.model_id}: batch API unreachable: {exc}", transient=True) from exc

    # -------------------------------------------------------------------------------------------------
    def submit(self, requests: Sequence[tuple[Sequence[Message], GenParams]], *, label: str = "") -> BatchReport:
        """Submit what the cache lacks and no recorded batch holds; record batch ids at once. No waiting."""
        rep = BatchReport(requested=len(requests))
        todo: dict[str, tuple] = {}
        for messages, params in requests:
            key = cache_key(self.model_id, messages, params)
            if key in todo:
                continue
            if self.cache.get(key) is not None:
                rep.from_cache += 1
                continue
            st = self.store.request(key)
            if st and st["state"] == "submitted":
                rep.resumed += 1
                continue
            final = st and st["state"] not in ("submitted", "retry", "succeeded")  # a non-retryable error: reported
            if final or (st and st["state"] == "retry" and st["attempts"] >= self.max_attempts):
                rep.failed[key] = st["error"] or st["state"]
                continue
            todo[key] = (messages, params)
        items = list(todo.items())
        for i in range(0, len(items), MAX_BATCH_REQUESTS):
            chunk = items[i : i + MAX_BATCH_REQUESTS]
            reqs = [{"custom_id": k, "params": self.backend.request_params(m, p)} for k, (m, p) in chunk]
            batch = self._api(self.backend.client.messages.batches.create, requests=reqs)
            self.store.record_batch(batch.id, self.model_id, [k for k, _ in chunk], label)
            rep.submitted += len(chunk)
            rep.batches.append(batch.id)
            self._say(f"submitted batch {batch.id}: {len(chunk)} requests")
        return rep

    def collect(self, requests: Sequence[tuple[Sequence[Message], GenParams]], *, label: str = "") -> BatchReport:
        """Poll every open batch of this model until it ends; store results; resubmit what may be retried."""
        keys = {cache_key(self.model_id, m, p): (m, p) for m, p in requests}
        rep = BatchReport(requested=len(requests))
        deadline = time.monotonic() + self.max_wait_s
        while True:
            open_ids = self.store.open_batches(self.model_id)
            if not open_ids:
                break
            for bid in open_ids:
                batch = self._api(self.backend.client.messages.batches.retrieve, bid)
                if batch.processing_status != "ended":
                    continue
                for item in self._api(self.backend.client.messages.batches.results, bid):
                    self._store_result(item, keys, rep)
                self.store.end_batch(bid)
                rep.batches.append(bid)
                self._say(f"collected batch {bid}")
            retry = [(m, p) for k, (m, p) in keys.items() if (self.store.request(k) or {}).get("state") == "retry"]
            if retry:
                again = self.submit(retry, label=label)
                rep.submitted += again.submitted
            if not self.store.open_batches(self.model_id):
                break
            if time.monotonic() > deadline:
                raise BackendError(
                    f"{self.model_id}: batches {self.store.open_batches(self.model_id)} still processing "
                    f"after {self.max_wait_s:g} s; run again to resume (ids in {self.store.path})",
                    transient=True,
                )
            self._sleep(self.poll_s)
        for k in keys:
            st = self.store.request(k)
            if self.cache.get(k) is None and st is not None and st["state"] not in ("submitted", "succeeded"):
                rep.failed[k] = st["error"] or st["state"]
        return rep

    def run(self, requests: Sequence[tuple[Sequence[Message], GenParams]], *, label: str = "") -> BatchReport:
        """submit + collect: afterwards every request is in the cache or listed in `failed`."""
        return self.submit(requests, label=label).then(self.collect(requests, label=label))

    def _store_result(self, item, keys: dict, rep: BatchReport) -> None:
        from balms.models.anthropic_api import completion_from_message

        cid = item.custom_id
        res = item.result
        st = self.store.request(cid) or {"attempts": 1}
        if res.type == "succeeded":
            comp = completion_from_message(res.message, self.model_id, 0.0, batch=True)
            if cid not in keys:  # a request of another run's set: without its request it cannot be cached
                self.store.set_state(cid, "orphan", "result of a request this run did not ask for")
                return
            m, p = keys[cid]
            self.cache.put(cid, request_payload(self.model_id, m, p), comp)
            self.store.set_state(cid, "succeeded")
            rep.succeeded += 1
            return
        if res.type == "errored":
            err = getattr(res, "error", None)
            inner = getattr(err, "error", None)
            etype = getattr(inner, "type", None) or "error"
            msg = f"{etype}: {getattr(inner, 'message', '') or json.dumps(getattr(err, 'model_dump', dict)())[:200]}"
            retry = etype in RETRYABLE_ERRORS
        else:  # expired (not processed within 24 h) or canceled
            msg, retry = res.type, True
        state = "retry" if retry and st["attempts"] < self.max_attempts else res.type
        self.store.set_state(cid, state, msg)
        if state != "retry":
            rep.failed[cid] = msg


def batch_store_path(cache_path: str | Path) -> Path:
    """Beside the response cache: `<cache dir>/anthropic_batches.sqlite`."""
    return Path(cache_path).with_name("anthropic_batches.sqlite")
