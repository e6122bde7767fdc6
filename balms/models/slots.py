"""Requests in flight per server: each server (an OpenAI-compatible base URL, or "anthropic") gets at most its own
number of model calls at once, shared by every backend and every cell of the process; and the process-wide stop.

Why around the HTTP call and not around a sample: a multi-call agent (PHIA, RAPTOR) holds a slot only while one
of its calls is in flight, never while its code runs or it embeds, so other samples fill the server meanwhile. A
server without a limit (the default until `set_limit`) is never waited for.

A 429/503/529 with `retry-after` pauses that server for everyone (`pause`): every other request would meet the
same limit. Once `STOP` is set (`drive`: Ctrl-C, a failed cell) no call leaves: `take` raises
NotStarted, so a sample stopped between two calls leaves no record and the next run redoes it from the cache.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Iterator, Sequence

STOP = threading.Event()
_POLL_S = 0.2  # how often a waiting `take` looks at STOP


class NotStarted(BaseException):
    """Raised in place of a sample (or its next call) that must leave no record: it stays to do, and a later run
    does it (the run stopped; the spending cap refused it). A BaseException so no `except Exception` eats it."""


ANTHROPIC = "anthropic"  # the slot key of the Anthropic API (its limit is per account, not per URL)


class ServerSlots:
    def __init__(self):
        self._cond = threading.Condition()
        self._limit: dict[str, int] = {}
        self._busy: dict[str, int] = {}
        self._paused_until: dict[str, float] = {}
        self.peak: dict[str, int] = {}  # most requests in flight seen per server (tests and benchmarks)

    def set_limit(self, key: str, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"server {key}: slot limit must be >= 1, got {limit}")
        with self._cond:
            self._limit[key] = int(limit)
            self._cond.notify_all()

    def pause(self, key: str, seconds: float) -> None:
        """No new request to `key` for `seconds` (a retry-after the server asked for)."""
        with self._cond:
            self._paused_until[key] = max(self._paused_until.get(key, 0.0), time.monotonic() + float(seconds))

    def _free(self, key: str, now: float) -> bool:
        if self._paused_until.get(key, 0.0) > now:
            return False
        lim = self._limit.get(key)
        return lim is None or self._busy.get(key, 0) < lim

    def take(self, keys: Sequence[str], prefer=None) -> str:
        """Block until one of `keys` has a free slot; take it and return that key (among free keys the one with
        the fewest requests in flight; ties: `prefer`'s order, else the order given). Raises NotStarted once STOP
        is set (checked every `_POLL_S` while waiting)."""
        order = list(prefer or keys)
        with self._cond:
            while True:
                if STOP.is_set():
                    raise NotStarted("the run stopped")
                now = time.monotonic()
                free = [k for k in order if self._free(k, now)]
                if free:
                    k = min(free, key=lambda j: self._busy.get(j, 0))
                    self._busy[k] = self._busy.get(k, 0) + 1
                    self.peak[k] = max(self.peak.get(k, 0), self._busy[k])
                    return k
                waits = [self._paused_until[k] - now for k in order if self._paused_until.get(k, 0.0) > now]
                self._cond.wait(timeout=min([_POLL_S, *waits]))

    def give(self, key: str) -> None:
        with self._cond:
            self._busy[key] -= 1
            self._cond.notify_all()

    @contextlib.contextmanager
    def slot(self, key: str) -> Iterator[None]:
        self.take([key])
        try:
            yield
        finally:
            self.give(key)


SLOTS = ServerSlots()  # one per process: every backend of every cell shares the servers' limits


GRACE_S = 1.0  # after a stop (Ctrl-C, a failed cell), how long finished samples still get their records written


def drive(jobs, write) -> None:
    """THE execution loop: each job (pool, rank, fn, *args) runs `fn(*args)` on its pool (balms.threads.Pool:
    lowest rank first), and `write(result)` runs here, on the calling thread, as each finishes (one writer: records
    are appended in completion order). A sample starts only while the run goes on (slots.STOP clear).

    Stopping: on any exception here (Ctrl-C's KeyboardInterrupt, one `fn` or one `write` raises) STOP is set, so no
    sample starts and no model call leaves (slots.take raises NotStarted); the results that arrive within GRACE_S
    are still written, then the exception goes on. STOP is cleared then (a notebook's next cell may call a model),
    but this run's own flag stays set: a job still queued on a pool never starts. The pools' threads are daemons: a
    call still in flight never holds the process."""
    import queue

    STOP.clear()
    stopped = threading.Event()  # this run's: never cleared, unlike STOP
    done: queue.SimpleQueue = queue.SimpleQueue()  # the jobs' futures, as each ends
    n = 0
    for pool, rank, fn, *args in jobs:
        pool.submit(rank, lambda f, a: None if stopped.is_set() or STOP.is_set() else f(*a), fn, args
                    ).add_done_callback(done.put)
        n += 1
    try:
        while n:
            try:
                fut = done.get(timeout=0.25)
            except queue.Empty:
                continue
            n -= 1
            if fut.result() is not None:  # a job's exception is raised here
                write(fut.result())
    except BaseException:
        stopped.set()
        STOP.set()
        end = time.monotonic() + GRACE_S
        while n and time.monotonic() < end:
            try:
                fut = done.get(timeout=max(0.01, end - time.monotonic()))
            except queue.Empty:
                break
            n -= 1
            if fut.exception() is None and fut.result() is not None:
                with contextlib.suppress(Exception):
                    write(fut.result())
        raise
    finally:  # later calls (a judge, a notebook's next cell) go on; a sample cut off here has no one to write it
        STOP.clear()
