"""The execution layer's one kind of pool: `n` daemon threads taking the waiting task of the lowest rank first
(then the first submitted).

Why ranked: the scheduler submits a whole grid at once in a static order (samples with several calls first), and
RAPTOR's day summaries queue on their model's pool in their sample's order. Why daemon threads: a run stopped by
Ctrl-C must exit at once (balms.models.slots.drive), not wait for calls still in flight on a server (a
ThreadPoolExecutor's threads are joined at exit). `submit_once`: a task several callers need is run once for them
all (RAPTOR's day summaries)."""

from __future__ import annotations

import itertools
import queue
import threading
from concurrent.futures import Future
from typing import Callable


class Pool:
    def __init__(self, n: int, name: str):
        self._queue: queue.PriorityQueue = queue.PriorityQueue()
        self._order = itertools.count()
        self._lock = threading.Lock()
        self._pending: dict = {}  # submit_once's key -> its future, until it is done
        self.threads = [threading.Thread(target=self._work, name=f"{name}_{i}", daemon=True) for i in range(n)]
        for t in self.threads:
            t.start()

    def submit(self, rank, fn: Callable, *args) -> Future:
        """`rank`: any value comparable with the other tasks' (a number, or a tuple as the scheduler's)."""
        fut: Future = Future()
        self._queue.put((False, rank, next(self._order), fut, fn, args))
        return fut

    def submit_once(self, key, rank, fn: Callable, *args) -> tuple[Future, bool]:
        """Submit unless a task of the same `key` is queued or running: (its future, False); else (the new one,
        True). Why: samples that need the same result (RAPTOR's day summaries, shared by a user's samples) then
        hold one thread between them, not one each blocked on the first's call while the servers idle."""
        with self._lock:
            fut = self._pending.get(key)
            if fut is not None and not fut.done():
                return fut, False
            fut = self._pending[key] = self.submit(rank, fn, *args)
        fut.add_done_callback(lambda f: self._forget(key, f))
        return fut, True

    def _forget(self, key, fut: Future) -> None:
        with self._lock:
            if self._pending.get(key) is fut:
                del self._pending[key]

    def close(self) -> None:
        """The threads end once the tasks already submitted are done (nothing new may be submitted). The end marks
        sort after every task whatever its rank's type (a run stopped with tasks still queued)."""
        for _ in self.threads:
            self._queue.put((True, None, next(self._order), None, None, ()))

    def _work(self) -> None:
        while True:
            _, _, _, fut, fn, args = self._queue.get()
            if fut is None:
                return
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn(*args))
            except BaseException as exc:  # noqa: BLE001 - handed to whoever waits on the future
                fut.set_exception(exc)

