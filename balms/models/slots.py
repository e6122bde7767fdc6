"""Requests in flight per server: each server (an OpenAI-compatible base URL, or "anthropic") gets at most its
own number of model calls at once, shared by every backend and every cell of the process.

Why here, around the HTTP call, and not around a sample: a multi-call agent (PHIA, RAPTOR) holds a slot only
while one of its calls is in flight, never while its code runs in the sandbox or it embeds, so the scheduler can
keep many more samples going than servers have slots and the servers stay busy. A server without a limit
(the default until `set_limit`) is never waited for: behaviour without the scheduler is unchanged.

A 429/529 with `retry-after` pauses that server for everyone (`pause`), not only for the call that got it:
every other request would meet the same limit.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Iterator, Sequence

ANTHROPIC = "anthropic"  # the slot key of the Anthropic API (its limit is per account, not per URL)


class ServerSlots:
    def __init__(self):
        self._cond = threading.Condition()
        self._limit: dict[str, int] = {}
        self._busy: dict[str, int] = {}
        self._paused_until: dict[str, float] = {}
        self.peak: dict[str, int] = {}  # most requests in flight seen per server (tests and benchmarks)
        self._waiters: dict[threading.Event, set[str]] = {}  # takers waiting, in arrival order

    def set_limit(self, key: str, limit: int | None) -> None:
        with self._cond:
            if limit is None:
                self._limit.pop(key, None)
            else:
                if limit < 1:
                    raise ValueError(f"server {key}: slot limit must be >= 1, got {limit}")
                self._limit[key] = int(limit)
            for ev in self._waiters:
                ev.set()

    def limit(self, key: str) -> int | None:
        with self._cond:
            return self._limit.get(key)

    def in_flight(self, key: str) -> int:
        with self._cond:
            return self._busy.get(key, 0)

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
        """Block until one of `keys` has a free slot; take it and return that key. Among free keys the one
        with the fewest requests in flight wins (ties: `prefer`'s order, else the order given). Waiters queue in
        arrival order and a freed slot wakes only the first that can use it (waking every waiter on every
        release cost the client more CPU than its requests with hundreds waiting: issue 27)."""
        order = list(prefer or keys)
        me = threading.Event()
        with self._cond:
            while True:
                now = time.monotonic()
                free = [k for k in order if self._free(k, now)]
                if free:
                    if me in self._waiters:
                        del self._waiters[me]
                    k = min(free, key=lambda j: self._busy.get(j, 0))
                    self._busy[k] = self._busy.get(k, 0) + 1
                    self.peak[k] = max(self.peak.get(k, 0), self._busy[k])
                    return k
                if me not in self._waiters:
                    self._waiters[me] = set(order)
                me.clear()
                waits = [self._paused_until[k] - now for k in order if self._paused_until.get(k, 0.0) > now]
                self._cond.release()
                try:
                    me.wait(timeout=min(waits) if waits else None)
                finally:
                    self._cond.acquire()

    def _wake(self, key: str) -> None:
        """Wake the longest-waiting taker that can use `key` (the lock held)."""
        for ev, keys in self._waiters.items():
            if key in keys and not ev.is_set():
                ev.set()
                return

    def give(self, key: str) -> None:
        with self._cond:
            self._busy[key] -= 1
            self._wake(key)

    @contextmanager
    def slot(self, key: str) -> Iterator[None]:
        self.take([key])
        try:
            yield
        finally:
            self.give(key)


SLOTS = ServerSlots()  # one per process: every backend of every cell shares the servers' limits
