"""Response cache: every completion is committed to SQLite (WAL) as it arrives, so re-running a notebook or
resuming a crashed run never recomputes a model call, and a run can be replayed without a GPU or an API key.

Key = sha256 of (exact model id, messages, `GenParams.cache_key_fields()`), then, when the backend adds to
every request (`request_additions`, e.g. llama.cpp's default system message), sha256 of that request key and the
additions: everything that determines the output, nothing of the transport (URLs, timeouts, concurrency).
Errors are never stored. The additions are hashed over the request key, not into the messages, so a response
stored under the earlier rule (KEY_RULE 1: no additions) is re-keyed from its key and model id alone
(`upgrade_key`), without its request: exported response files carry no requests (balms.bundle).
Modes: "rw" (read, compute misses, write), "replay" (a miss is an error naming the request), "off".

Integrity: every row carries a digest (sha256 of its key, model id and stored completion), checked on every read.
A row whose content no longer matches (a byte changed on disk, a hand edit) raises `CacheIntegrityError` naming
its key: it is never served and never silently recomputed; `balms cache verify` checks a whole cache. Rows written
before digests existed are digested once, as found, when this version first opens the cache (a digest can only
catch changes made after it was written).

Every completion served carries its key (`Completion.cache_key`); agents log it with each call
(`balms.agents.common.Episode.call`), so a record names the responses a replay of it needs (`balms bundle`).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import fields
from pathlib import Path
from typing import Callable, Sequence

from balms.models.base import BackendError, Completion, GenParams, Message
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
    created_at REAL NOT NULL,
    digest TEXT
)
"""


class CacheMissError(BackendError):
    """Replay-only mode met a request that was never recorded."""


class CacheIntegrityError(BackendError):
    """A stored response no longer matches its digest: it is not served (and not recomputed behind the user's back)."""

    def __init__(self, path, key: str, problem: str):
        super().__init__(f"response cache {path}: entry {key} {problem}; it is not served. Remove it with "
                         f"`balms cache verify --delete-bad` (the next run in mode 'rw' then recomputes it) or "
                         "restore the cache from a copy", transient=False)
        self.key = key


def row_digest(key: str, model_id: str, completion: str) -> str:
    """What a row's digest covers: its key, model id and stored completion text (the request is for debugging)."""
    return hashlib.sha256(json.dumps([key, model_id, completion], ensure_ascii=False).encode("utf-8")).hexdigest()


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
        # safe under concurrent first use; a cache made before digests gets the column
        self._conn = open_db(self.path, [_SCHEMA], add_columns={"responses": {"digest": "TEXT"}}, autocommit=True)
        self._readers = Readers(self.path)  # reads never wait behind the writer's lock (balms.stores)
        self.upgraded = self._upgrade(additions_of)
        self.digested = self._digest_old_rows()

    def _digest_old_rows(self) -> int:
        """Digest the rows written before digests existed (once, in one transaction, trusting them as found)."""
        if self._conn.execute("SELECT 1 FROM responses WHERE digest IS NULL LIMIT 1").fetchone() is None:
            return 0
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            rows = self._conn.execute("SELECT key, model_id, completion FROM responses WHERE digest IS NULL").fetchall()
            self._conn.executemany("UPDATE responses SET digest = ? WHERE key = ?",
                                   [(row_digest(*r), r[0]) for r in rows])
            self._conn.execute("COMMIT")
            return len(rows)
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise

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
                    rows = self._conn.execute("SELECT key, request, completion, digest FROM responses "
                                              "WHERE model_id = ?", (mid,)).fetchall()
                    for key, req, comp, dig in rows:
                        if dig is not None and dig != row_digest(key, mid, comp):
                            raise CacheIntegrityError(self.path, key, "fails its digest check (found while "
                                                      "re-keying the cache)")
                        request = json.loads(req) | {"request_additions": dict(adds)}
                        new = upgrade_key(key, adds)
                        self._conn.execute("UPDATE responses SET key = ?, request = ?, digest = ? WHERE key = ?",
                                           (new, json.dumps(request, ensure_ascii=False),
                                            None if dig is None else row_digest(new, mid, comp), key))
                        n += 1
                self._conn.execute(f"PRAGMA user_version = {KEY_RULE}")
            self._conn.execute("COMMIT")
            return n
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise

    def _checked(self, key: str, model_id: str, blob: str, digest: str | None) -> Completion:
        """The row as a Completion, after its digest check (`CacheIntegrityError` naming the key if it fails)."""
        if digest is None:
            raise CacheIntegrityError(self.path, key, "has no digest (written by an older balms while this one had "
                                      "the cache open)")
        if digest != row_digest(key, model_id, blob):
            raise CacheIntegrityError(self.path, key, f"(model {model_id}) fails its digest check: its stored "
                                      "completion or key changed after it was written")
        data = json.loads(blob)
        comp = Completion(**{k: v for k, v in data.items() if k in _COMPLETION_FIELDS})
        comp.cache_key = key
        return comp

    def get(self, key: str) -> Completion | None:
        """The stored response of `key` (its digest checked), or None on a miss."""
        with self._readers.connection() as con:
            row = con.execute("SELECT model_id, completion, digest FROM responses WHERE key = ?", (key,)).fetchone()
        return None if row is None else self._checked(key, *row)

    def get_row(self, key: str) -> tuple[str, dict] | None:
        """(model id, stored completion dict) of `key` after its digest check, as exports write it; None on a miss."""
        comp = self.get(key)
        if comp is None:
            return None
        with self._readers.connection() as con:
            model_id, blob = con.execute("SELECT model_id, completion FROM responses WHERE key = ?", (key,)).fetchone()
        return model_id, json.loads(blob)

    def verify(self) -> dict:
        """Check every row's digest: {"checked": n, "bad": [{"key", "model_id", "problem"}, ...]}."""
        bad, n = [], 0
        with self._readers.connection() as con:
            for key, model_id, blob, digest in con.execute("SELECT key, model_id, completion, digest FROM responses "
                                                           "ORDER BY key"):
                n += 1
                try:
                    self._checked(key, model_id, blob, digest)
                except (CacheIntegrityError, ValueError, TypeError) as exc:
                    bad.append({"key": key, "model_id": model_id, "problem": str(exc)})
        return {"checked": n, "bad": bad}

    def delete(self, keys: Sequence[str]) -> int:
        """Remove these rows (`balms cache verify --delete-bad`); how many were removed."""
        with self._lock:
            cur = self._conn.executemany("DELETE FROM responses WHERE key = ?", [(k,) for k in keys])
            return cur.rowcount

    @staticmethod
    def _row(key: str, request: dict, completion: Completion) -> tuple:
        data = completion.to_dict()
        data["cached"] = False
        data.pop("cache_key", None)  # the row's key
        blob = json.dumps(data, ensure_ascii=False, default=str)
        model_id = request["model_id"]
        return (key, model_id, json.dumps(request, ensure_ascii=False), blob, time.time(),
                row_digest(key, model_id, blob))

    _INSERT = "INTO responses (key, model_id, request, completion, created_at, digest) VALUES (?,?,?,?,?,?)"

    def put(self, key: str, request: dict, completion: Completion, *, replace: bool = False) -> None:
        """Store a response with its digest; an existing row for the key is kept unless `replace`."""
        with self._lock:
            self._conn.execute(f"{'INSERT OR REPLACE' if replace else 'INSERT OR IGNORE'} {self._INSERT}",
                               self._row(key, request, completion))

    def put_many(self, rows: Sequence[tuple[str, dict, Completion]], *, replace: set[str] = frozenset()) -> None:
        """Store (key, request, completion) rows in one transaction (an import: all or none); existing rows are kept
        except those whose key is in `replace`."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                for key, request, completion in rows:
                    verb = "INSERT OR REPLACE" if key in replace else "INSERT OR IGNORE"
                    self._conn.execute(f"{verb} {self._INSERT}", self._row(key, request, completion))
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

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
                        return self._compute(key, messages, params, timeout_s)
            finally:
                with self._inflight_lock:
                    self._inflight.pop(key, None)
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
        completion.cache_key = key
        return completion

