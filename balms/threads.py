"""Thread pools whose threads are all started before the work arrives.

Why: a thread starts only when it gets the GIL, and `ThreadPoolExecutor.submit` starts a new thread (while it
has none idle) under a lock shared by every executor of the process. With all cells in flight (issue 27) pools
were filled while hundreds of threads were busy building prompts: each start waited its turn for the GIL, every
other `submit` in the process waited behind it, and the servers idled for tens of seconds. Started up front, on
an idle process, the same threads take milliseconds.
"""

from __future__ import annotations

import itertools
import queue
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable


def started_pool(n: int, name: str) -> ThreadPoolExecutor:
    """A pool of `n` threads, every one of them already running (idle, waiting for work)."""
    pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix=name)
    barrier = threading.Barrier(n + 1)
    for _ in range(n):  # each task blocks until all have started, so each submit starts a new thread
        pool.submit(barrier.wait)
    barrier.wait()
    return pool


class RankedPool:
    """`n` started threads that take the waiting task of the lowest rank first (then the first submitted).

    Why not a ThreadPoolExecutor: its queue is first-come first-served, so with every cell in flight one RAPTOR
    sample's day summaries queued behind every earlier sample's, whatever their rank for a server slot
    (balms.models.slots): the oldest sample, whose answer waits on them, was not served first (issue 27)."""

    def __init__(self, n: int, name: str):
        self._queue: queue.PriorityQueue = queue.PriorityQueue()
        self._order = itertools.count()
        barrier = threading.Barrier(n + 1)
        self.threads = [threading.Thread(target=self._work, args=(barrier,), name=f"{name}_{i}", daemon=True)
                        for i in range(n)]
        for t in self.threads:
            t.start()
        barrier.wait()

    def submit(self, rank: float, fn: Callable, *args) -> Future:
        fut: Future = Future()
        self._queue.put((rank, next(self._order), fut, fn, args))
        return fut

    def _work(self, barrier: threading.Barrier) -> None:
        barrier.wait()
        while True:
            _, _, fut, fn, args = self._queue.get()
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn(*args))
            except BaseException as exc:  # noqa: BLE001 - handed to whoever waits on the future
                fut.set_exception(exc)
