"""Response cache: every completion is committed to SQLite (WAL) as it arrives, so re-running a notebook or
resuming a crashed run never recomputes a model call, and a run can be replayed without a GPU or an API key.

Key = sha256 of (exact model id, messages, `GenParams.cache_key_fields()`), then, when the backend adds to
every request (`request_additions`, e.g. llama.cpp's default system message), sha256 of that request key and the
additions: everything that determines the output, nothing of the transport (URLs, timeouts, concurrency).
Errors are never stored. The additions are hashed over the request key, not into the messages, so a response
stored under the earlier rule (KEY_RULE 1: no additions) is re-keyed from its key and model id alone
(`upgrade_key`), without its request: exported response files carry no requests (balms.bundle).
Modes: "rw" (read, compute misses, write), "replay" (a miss is an error naming the request), "off".

Journal: with `BALMS_CACHE_JOURNAL=<file>` every key served (hit or computed) is appended to that file, so the
exact subset of the cache a profile's tables used can be exported and replayed elsewhere (`balms bundle`).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from dataclasses import fields
from pathlib import Path
from typing import Callable, Sequence

from balms.models.base import BackendError, Completion, GenParams, Message
from balms.models.slots import waiting
from balms.stores import Readers, open_db

MODES = ("rw", "replay", "off")
# every CachedBackend of this process: model calls made (sent to a model) and answered from the cache, so a grid can
# say what it cost (`process_calls`; a replay that completes made none)
_PROCESS_CALLS = {"made": 0, "from_cache": 0}
_PROCESS_LOCK = threading.Lock()


def process_calls() -> dict[str, int]:
    with _PROCESS_LOCK:
        return dict(_PROCESS_CALLS)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    model_id TEXT NOT NULL,
    request TEXT NOT NULL,
    completion TEXT NOT NULL,
    created_at REAL NOT NULL
)
"""


class CacheMissError(BackendError):
    """Replay-only mode met a request that was never recorded."""


# 1: the request only; 2: the request, then the backend's request additions (`upgrade_key`)
KEY_RULE = 2


def request_payload(model_id: str, messages: Sequence[Message], params: GenParams,
                    additions: dict | None = None) -> dict:
    out = {
        "model_id": model_id,
        "messages": [m.to_dict() for m in messages],
        "params": params.cache_key_fields(),
    }
    if additions:
        out["request_additions"] = dict(additions)
    return out


def upgrade_key(request_key: str, additions: dict | None) -> str:
    """The key of a request (its rule-1 key) sent by a backend that adds `additions` to it; unchanged when it
    adds nothing."""
    if not additions:
        return request_key
    blob = json.dumps({"request": request_key, "request_additions": additions}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def cache_key(model_id: str, messages: Sequence[Message], params: GenParams, additions: dict | None = None) -> str:
    blob = json.dumps(request_payload(model_id, messages, params), sort_keys=True, ensure_ascii=False)
    return upgrade_key(hashlib.sha256(blob.encode("utf-8")).hexdigest(), additions)


_COMPLETION_FIELDS = {f.name for f in fields(Completion)}


class ResponseCache:
    """A thread-safe SQLite response store; one connection per cache, guarded by a lock.

    The file records the key rule of its rows (`PRAGMA user_version` = KEY_RULE). A cache written under an
    earlier rule is upgraded in place when opened with `additions_of` (model id -> its backend's request
    additions; balms.models.registry.shared_cache passes them), so existing caches keep answering."""

    def __init__(self, path: str | Path, additions_of: Callable[[str], dict] | None = None):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._conn = open_db(self.path, [_SCHEMA], autocommit=True)  # safe under concurrent first use
        self._readers = Readers(self.path)  # reads never wait behind the writer's lock (balms.stores)
        self.upgraded = self._upgrade(additions_of)

    def _upgrade(self, additions_of) -> int:
        """Re-key rows stored under an earlier rule (once, in one transaction); how many keys changed."""
        if self._conn.execute("PRAGMA user_version").fetchone()[0] >= KEY_RULE:
            return 0
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            n = 0
            if self._conn.execute("PRAGMA user_version").fetchone()[0] < KEY_RULE:  # another process may have
                has_rows = self._conn.execute("SELECT 1 FROM responses LIMIT 1").fetchone() is not None
                if has_rows and additions_of is None:
                    raise ValueError(f"{self.path}: a response cache written under key rule 1; open it with "
                                     "balms.models.registry.shared_cache(path), which re-keys it")
                for (mid,) in self._conn.execute("SELECT DISTINCT model_id FROM responses").fetchall():
                    adds = additions_of(mid)
                    if not adds:
                        continue
                    rows = self._conn.execute("SELECT key, request FROM responses WHERE model_id = ?",
                                              (mid,)).fetchall()
                    for key, req in rows:
                        request = json.loads(req) | {"request_additions": dict(adds)}
                        self._conn.execute("UPDATE responses SET key = ?, request = ? WHERE key = ?",
                                           (upgrade_key(key, adds), json.dumps(request, ensure_ascii=False), key))
                        n += 1
                self._conn.execute(f"PRAGMA user_version = {KEY_RULE}")
            self._conn.execute("COMMIT")
            return n
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise

    def get(self, key: str) -> Completion | None:
        with self._readers.connection() as con:
            row = con.execute("SELECT completion FROM responses WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        data = json.loads(row[0])
        return Completion(**{k: v for k, v in data.items() if k in _COMPLETION_FIELDS})

    def put(self, key: str, request: dict, completion: Completion, *, replace: bool = False) -> None:
        """Store a response; an existing row for the key is kept unless `replace` (an import told to)."""
        data = completion.to_dict()
        data["cached"] = False
        blob = json.dumps(data, ensure_ascii=False, default=str)
        verb = "INSERT OR REPLACE" if replace else "INSERT OR IGNORE"
        with self._lock:
            self._conn.execute(
                f"{verb} INTO responses (key, model_id, request, completion, created_at) VALUES (?,?,?,?,?)",
                (key, request["model_id"], json.dumps(request, ensure_ascii=False), blob, time.time()),
            )

    def has_model(self, model_id: str) -> bool:
        """Whether any response was recorded for this exact model id (replay of a served-only name)."""
        with self._lock:
            row = self._conn.execute("SELECT 1 FROM responses WHERE model_id = ? LIMIT 1", (model_id,)).fetchone()
        return row is not None

    def __len__(self) -> int:
        with self._lock:
            return self._conn.execute("SELECT COUNT(*) FROM responses").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._conn.close()
            self._readers.close()


class CachedBackend:
    """Wrap a backend with the response cache. Concurrent identical requests compute once."""

    def __init__(self, backend, cache: ResponseCache | None, mode: str = "rw"):
        if mode not in MODES:
            raise ValueError(f"cache mode must be one of {MODES}, got {mode!r}")
        if mode != "off" and cache is None:
            raise ValueError(f"cache mode {mode!r} needs a ResponseCache")
        self.backend = backend
        self.cache = cache
        self.mode = mode
        self.model_id: str = backend.model_id
        self.name: str = getattr(backend, "name", backend.model_id)
        # what the backend adds to every request: part of every key (and of the cell spec, balms.cellspec)
        self.request_additions: dict = dict(getattr(backend, "request_additions", None) or {})
        self.hits = 0
        self.misses = 0
        self._stats_lock = threading.Lock()
        self._inflight: dict[str, threading.Lock] = {}
        self._inflight_lock = threading.Lock()
        self._journal_lock = threading.Lock()

    def _journal(self, key: str) -> None:
        path = os.environ.get("BALMS_CACHE_JOURNAL")
        if not path:
            return
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with self._journal_lock, open(path, "a", encoding="utf-8") as fh:
            fh.write(key + "\n")

    def stats(self) -> dict:
        with self._stats_lock:
            return {"hits": self.hits, "misses": self.misses, "mode": self.mode}

    def _count(self, hit: bool) -> None:
        with self._stats_lock:
            if hit:
                self.hits += 1
            else:
                self.misses += 1
        with _PROCESS_LOCK:
            _PROCESS_CALLS["from_cache" if hit else "made"] += 1

    @property
    def supports_timeout(self) -> bool:
        return bool(getattr(self.backend, "supports_timeout", False))

    def generate(self, messages: Sequence[Message], params: GenParams, *, timeout_s: float | None = None) -> Completion:
        """`timeout_s` (transport settings never enter the key) is passed on to backends that support it."""
        waiting()  # a sample's first call ends its turn at the CPU (balms.models.slots.Turns)
        if self.mode == "off":
            self._count(False)
            return self._call(messages, params, timeout_s)
        key = cache_key(self.model_id, messages, params, self.request_additions)
        hit = self.cache.get(key)
        if hit is None:
            with self._inflight_lock:
                lock = self._inflight.setdefault(key, threading.Lock())
            try:
                with lock:
                    hit = self.cache.get(key)  # another thread may have just computed it
                    if hit is None:
                        completion = self._compute(key, messages, params, timeout_s)
                        # journalled once stored: a call that failed or was killed mid-generation leaves no
                        # key the export would then find missing from the cache
                        self._journal(key)
                        return completion
            finally:
                with self._inflight_lock:
                    self._inflight.pop(key, None)
        self._journal(key)
        self._count(True)
        hit.cached = True
        return hit

    def _call(self, messages, params, timeout_s):
        if timeout_s is not None and self.supports_timeout:
            return self.backend.generate(messages, params, timeout_s=timeout_s)
        return self.backend.generate(messages, params)

    def _compute(self, key: str, messages: Sequence[Message], params: GenParams, timeout_s=None) -> Completion:
        if self.mode == "replay":
            last = messages[-1].content if messages else ""
            snippet = last[:80].replace("\n", " ")
            raise CacheMissError(
                f"replay-only cache miss: model {self.model_id!r}, last message {snippet!r}..., key {key[:16]} "
                f"(cache {self.cache.path}); run once in mode 'rw' to record it",
                transient=False,
            )
        self._count(False)
        completion = self._call(messages, params, timeout_s)  # errors propagate and are never stored
        self.cache.put(key, request_payload(self.model_id, messages, params, self.request_additions), completion)
        return completion
