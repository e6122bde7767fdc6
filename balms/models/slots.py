"""Requests in flight per server: each server (an OpenAI-compatible base URL, or "anthropic") gets at most its
own number of model calls at once, shared by every backend and every cell of the process.

Why here, around the HTTP call, and not around a sample: a multi-call agent (PHIA, RAPTOR) holds a slot only
while one of its calls is in flight, never while its code runs in the sandbox or it embeds, so the scheduler can
keep many more samples going than servers have slots and the servers stay busy. A server without a limit
(the default until `set_limit`) is never waited for: behaviour without the scheduler is unchanged.

A 429/529 with `retry-after` pauses that server for everyone (`pause`), not only for the call that got it:
every other request would meet the same limit.

Who gets a freed slot: the waiting call of the best-ranked sample (`priority`, set per sample by the scheduler:
a multi-call sample before any single call, then the oldest; inherited by a RAPTOR sample's day summaries), then
arrival order. Why: in arrival order a RAPTOR sample's final call queued behind hundreds of other samples' day
summaries, every sample finished at the very end, and the busiest server drained for two request times instead of
one; single calls, which depend on nothing, fill the servers while the last chains drain (issue 27, bench-scale
at 16 servers). The same rank orders the client's own CPU work as samples start (`Turns`).
"""

from __future__ import annotations

import heapq
import itertools
import os
import threading
import time
from contextlib import contextmanager
from typing import Iterator, Sequence

_local = threading.local()


@contextmanager
def _this_thread(name: str, value) -> Iterator[None]:
    """This thread's `name` is `value` in the block (then what it was before)."""
    old = getattr(_local, name, None)
    setattr(_local, name, value)
    try:
        yield
    finally:
        setattr(_local, name, old)


def priority(rank: float):
    """Calls made in this block by this thread wait for a slot with `rank` (lower first; default 0)."""
    return _this_thread("rank", rank)


def current_priority() -> float | None:
    """This thread's rank (None: none set), to hand on to the threads that make calls for it."""
    return getattr(_local, "rank", None)


class Turns:
    """Ranked turns at the client's CPU for a sample's work before its first wait (its window, prompt, RAPTOR's
    leaves and tree): at most `n` samples do it at once, the best rank first; a sample gives its turn back at its
    first wait (`waiting`: a model call, RAPTOR's day summaries) or when it ends.

    Why: with every cell in flight, hundreds of samples built their prompts at once on two cores; shared fairly,
    none finished early, and the servers' first requests left only after every sample's preparation was done
    (issue 27: bench-scale at 16 servers measured the idle start). In turns, the first samples' requests
    leave within a second. Safe from deadlock: a turn is taken only when a sample starts, and nothing a sample
    waits for while it holds one needs a turn (its first wait gives the turn back)."""

    def __init__(self, n: int | None = None):
        self._cond = threading.Condition()
        self._free = n or max(2, os.cpu_count() or 2)
        self._waiting: list = []  # heap of (rank, arrival, event)
        self._arrivals = itertools.count()

    @contextmanager
    def turn(self, rank: float) -> Iterator[None]:
        me = (rank, next(self._arrivals), threading.Event())
        with self._cond:
            if self._free and not self._waiting:
                self._free -= 1
                me[2].set()
            else:
                heapq.heappush(self._waiting, me)
        me[2].wait()
        held = [True]

        def give_back():
            if held[0]:
                held[0] = False
                with self._cond:
                    if self._waiting:
                        heapq.heappop(self._waiting)[2].set()
                    else:
                        self._free += 1

        try:
            with _this_thread("give_back", give_back):
                yield
        finally:
            give_back()


def waiting() -> None:
    """This thread is about to wait (for a server, another sample's call, its summaries): it gives back its turn
    at the CPU (`Turns`), if it holds one."""
    give_back = getattr(_local, "give_back", None)
    if give_back is not None:
        _local.give_back = None
        give_back()


ANTHROPIC = "anthropic"  # the slot key of the Anthropic API (its limit is per account, not per URL)


class ServerSlots:
    def __init__(self):
        self._cond = threading.Condition()
        self._limit: dict[str, int] = {}
        self._busy: dict[str, int] = {}
        self._paused_until: dict[str, float] = {}
        self.peak: dict[str, int] = {}  # most requests in flight seen per server (tests and benchmarks)
        self._waiters: dict[threading.Event, tuple[tuple, set[str]]] = {}  # takers waiting: (rank, arrival), keys
        self._arrivals = iter(range(1 << 62))
        self._granted: dict[threading.Event, str] = {}  # slots handed to a waiter that has not woken yet

    def set_limit(self, key: str, limit: int | None) -> None:
        with self._cond:
            if limit is None:
                self._limit.pop(key, None)
            else:
                if limit < 1:
                    raise ValueError(f"server {key}: slot limit must be >= 1, got {limit}")
                self._limit[key] = int(limit)
            self._dispatch()

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
            for ev in self._waiters:  # each sleeps again until the pause ends, then takes what is free
                ev.set()

    def _free(self, key: str, now: float) -> bool:
        if self._paused_until.get(key, 0.0) > now:
            return False
        lim = self._limit.get(key)
        return lim is None or self._busy.get(key, 0) < lim

    def take(self, keys: Sequence[str], prefer=None) -> str:
        """Block until one of `keys` has a free slot; take it and return that key. Among free keys the one
        with the fewest requests in flight wins (ties: `prefer`'s order, else the order given). A slot freed while
        calls wait is handed to one of them (`give`: the best rank, then the longest waiting), never to a call that
        arrives meanwhile, and wakes only that one (waking every waiter on every release cost the client more CPU
        than its requests with hundreds waiting: issue 27)."""
        waiting()
        order = list(prefer or keys)
        me = threading.Event()
        with self._cond:
            while True:
                if me in self._granted:
                    return self._granted.pop(me)
                now = time.monotonic()
                free = [k for k in order if self._free(k, now)]
                if free:
                    self._waiters.pop(me, None)
                    k = min(free, key=lambda j: self._busy.get(j, 0))
                    self._grant(k)
                    self._dispatch()  # after a pause or a raised limit, more may be free for those waiting
                    return k
                if me not in self._waiters:
                    self._waiters[me] = ((current_priority() or 0, next(self._arrivals)), set(order))
                me.clear()
                waits = [self._paused_until[k] - now for k in order if self._paused_until.get(k, 0.0) > now]
                self._cond.release()
                try:
                    me.wait(timeout=min(waits) if waits else None)
                finally:
                    self._cond.acquire()

    def _grant(self, key: str) -> None:
        self._busy[key] = self._busy.get(key, 0) + 1
        self.peak[key] = max(self.peak.get(key, 0), self._busy[key])

    def _dispatch(self) -> None:
        """Hand every free slot to the waiters that can use it, best rank first (the lock held)."""
        if not self._waiters:
            return
        now = time.monotonic()
        for ev, (_, keys) in sorted(self._waiters.items(), key=lambda x: x[1][0]):
            free = [k for k in keys if self._free(k, now)]
            if free:
                k = min(free, key=lambda j: self._busy.get(j, 0))
                del self._waiters[ev]
                self._grant(k)
                self._granted[ev] = k
                ev.set()

    def give(self, key: str) -> None:
        with self._cond:
            self._busy[key] -= 1
            self._dispatch()

    @contextmanager
    def slot(self, key: str) -> Iterator[None]:
        self.take([key])
        try:
            yield
        finally:
            self.give(key)


SLOTS = ServerSlots()  # one per process: every backend of every cell shares the servers' limits
