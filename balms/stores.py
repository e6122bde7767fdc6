"""SQLite stores that many threads (and processes) open for the first time at once.

Why: the scheduler starts every cell's samples together, so the response cache, the embedding cache and
RAPTOR's summary cache are all first opened by dozens of threads in the same second. Creating tables and
adding columns is a read-then-write (`PRAGMA table_info`, then `ALTER TABLE`): two connections that both
read "column missing" both add it, and the second fails (`duplicate column name`). `open_db` does the whole
schema step inside one `BEGIN IMMEDIATE` transaction (SQLite's write lock, across processes too), so exactly
one connection creates or migrates and the others see the finished schema. `one_per_key` gives one store
object per file per process without the check-then-set race of a plain dict or `lru_cache`.
"""

from __future__ import annotations

import contextlib
import queue
import sqlite3
import threading
import time
from functools import wraps
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence, TypeVar

T = TypeVar("T")


def _busy_retry(fn: Callable[[], T], timeout_s: float) -> T:
    """Retry `fn` while SQLite says the database is locked (switching to WAL ignores the busy timeout)."""
    deadline = time.monotonic() + timeout_s
    delay = 0.01
    while True:
        try:
            return fn()
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.5)


class DamagedStoreError(sqlite3.DatabaseError):
    """A store file SQLite cannot read (not a database, or a malformed image): named, with what to do."""

    def __init__(self, path: Path, exc: Exception):
        super().__init__(f"{path}: damaged, SQLite cannot read it ({exc}). Move it aside (mv {path} {path}.damaged, "
                         f"with any {path.name}-wal and -shm beside it) and run again: the store starts empty and is "
                         f"refilled (a response cache by model calls, or from a responses bundle with `balms bundle "
                         f"import-responses`)")
        self.path = path


def _is_damage(exc: sqlite3.DatabaseError) -> bool:
    """'file is not a database', 'database disk image is malformed'; not locked, busy or read-only."""
    return not isinstance(exc, sqlite3.OperationalError) or "malformed" in str(exc)


def _damage_named(path: Path, fn: Callable[[], T]) -> T:
    """`fn()`, with SQLite's damage errors naming the file (other errors as they are)."""
    try:
        return fn()
    except sqlite3.DatabaseError as exc:
        if not _is_damage(exc):
            raise
        raise DamagedStoreError(path, exc) from exc


def open_db(path: str | Path, statements: Sequence[str] = (), *,
            add_columns: Mapping[str, Mapping[str, str]] | None = None, timeout_s: float = 60.0,
            autocommit: bool = False) -> sqlite3.Connection:
    """A WAL connection to `path` whose schema (`statements`, then each missing column of `add_columns`:
    {table: {column: type}}) was created or migrated atomically, once, whoever else opens it at the same time.
    A file SQLite cannot read is a DamagedStoreError naming it and saying what to do."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return _damage_named(path, lambda: _open(path, statements, add_columns, timeout_s, autocommit))


def _open(path: Path, statements: Sequence[str], add_columns: Mapping[str, Mapping[str, str]] | None,
          timeout_s: float, autocommit: bool) -> sqlite3.Connection:
    setup = sqlite3.connect(str(path), timeout=timeout_s, isolation_level=None)
    try:
        _busy_retry(lambda: setup.execute("PRAGMA journal_mode=WAL"), timeout_s)
        _busy_retry(lambda: setup.execute("BEGIN IMMEDIATE"), timeout_s)
        try:
            for sql in statements:
                setup.execute(sql)
            for table, cols in (add_columns or {}).items():
                have = {row[1] for row in setup.execute(f"PRAGMA table_info({table})")}
                for col, kind in cols.items():
                    if col not in have:
                        setup.execute(f"ALTER TABLE {table} ADD COLUMN {col} {kind}")
            setup.execute("COMMIT")
        except BaseException:
            setup.execute("ROLLBACK")
            raise
    finally:
        setup.close()
    kw = {"isolation_level": None} if autocommit else {}
    con = sqlite3.connect(str(path), timeout=timeout_s, check_same_thread=False, **kw)
    con.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable against process crashes, no fsync per commit
    return con


READERS = 8  # read connections per store


class Readers:
    """A pool of read connections to one WAL database (at most READERS, made as needed, reused last-in first-out).

    Why: WAL readers never wait for each other or for the writer, where one shared connection behind a lock made
    every read of a grid in flight queue behind every write: with all cells in flight, 150 samples waited on the
    embedding store's lock and the servers idled through the first seconds of the run (issue 27). Bounded: each
    connection holds three file descriptors."""

    def __init__(self, path: str | Path, n: int = READERS, timeout_s: float = 60.0):
        self.path, self._n, self._timeout = str(path), n, timeout_s
        self._idle: queue.LifoQueue = queue.LifoQueue()
        self._made = 0
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        try:
            con = self._idle.get_nowait()
        except queue.Empty:
            with self._lock:
                make = self._made < self._n
                self._made += make
            con = (sqlite3.connect(self.path, timeout=self._timeout, isolation_level=None, check_same_thread=False)
                   if make else self._idle.get())
        try:
            yield con
        except sqlite3.DatabaseError as exc:  # a page damaged after the file opened: named, with what to do
            if not _is_damage(exc):
                raise
            raise DamagedStoreError(Path(self.path), exc) from exc
        finally:
            self._idle.put(con)

    def close(self) -> None:
        while not self._idle.empty():
            self._idle.get_nowait().close()


def one_per_key(factory: Callable[..., T]) -> Callable[..., T]:
    """Memoise `factory(*args)` so that concurrent first calls build exactly one object per key."""
    made: dict = {}
    lock = threading.Lock()

    @wraps(factory)
    def get(*args):
        got = made.get(args)  # made once: read without the lock (a thousand threads queued on it: issue 27)
        if got is not None:
            return got
        with lock:
            if args not in made:
                made[args] = factory(*args)
            return made[args]

    get.cache_clear = made.clear  # tests reset it, as with functools.lru_cache
    return get
