"""The execution layer's one kind of pool: `n` daemon threads taking the waiting task of the lowest rank first
(then the first submitted).

Why ranked: the scheduler submits a whole grid at once in a static order (samples with several calls first), and
RAPTOR's day summaries queue on their model's pool in their sample's order. Why daemon threads: a run stopped by
Ctrl-C must exit at once (balms.models.slots.drive), not wait for calls still in flight on a server (a
ThreadPoolExecutor's threads are joined at exit)."""

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
        self.threads = [threading.Thread(target=self._work, name=f"{name}_{i}", daemon=True) for i in range(n)]
        for t in self.threads:
            t.start()

    def submit(self, rank: float, fn: Callable, *args) -> Future:
        fut: Future = Future()
        self._queue.put((rank, next(self._order), fut, fn, args))
        return fut

    def close(self) -> None:
        """The threads end once the tasks already submitted are done (nothing new may be submitted)."""
        for _ in self.threads:
            self._queue.put((float("inf"), next(self._order), None, None, ()))

    def _work(self) -> None:
        while True:
            _, _, fut, fn, args = self._queue.get()
            if fut is None:
                return
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn(*args))
            except BaseException as exc:  # noqa: BLE001 - handed to whoever waits on the future
                fut.set_exception(exc)

