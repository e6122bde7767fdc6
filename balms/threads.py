"""Thread pools whose threads are all started before the work arrives.

Why: a thread starts only when it gets the GIL, and `ThreadPoolExecutor.submit` starts a new thread (while it
has none idle) under a lock shared by every executor of the process. With all cells in flight (issue 27) pools
were filled while hundreds of threads were busy building prompts: each start waited its turn for the GIL, every
other `submit` in the process waited behind it, and the servers idled for tens of seconds. Started up front, on
an idle process, the same threads take milliseconds.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor


def started_pool(n: int, name: str) -> ThreadPoolExecutor:
    """A pool of `n` threads, every one of them already running (idle, waiting for work)."""
    pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix=name)
    barrier = threading.Barrier(n + 1)
    for _ in range(n):  # each task blocks until all have started, so each submit starts a new thread
        pool.submit(barrier.wait)
    barrier.wait()
    return pool
