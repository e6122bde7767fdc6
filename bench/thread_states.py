"""Where the client's threads are, sampled once a second from their stacks (bench-scale's `--trace`): for each
pool (a thread name's prefix) how many threads are in a model call, waiting for a server slot, waiting for a
RAPTOR summary, in the PHIA sandbox, waiting for another cell's call (the cache), idle, or elsewhere. Why: a
server underfed while its model's pool has work says which of these holds the pool's threads. The sampling walks
every thread's stack while holding the GIL (thousands of threads in a fleet run), so a traced run is slower than an
untraced one: its ratios are comparable only with another traced run's."""

from __future__ import annotations

import collections
import json
import sys
import threading
import time

# (file fragment, function) -> state; the first match walking from the innermost frame outwards wins
RULES = [
    ("balms/models/slots.py", "take", "slot"),
    ("balms/models/openai_http.py", "_post", "call"),
    ("balms/sandbox/", None, "sandbox"),
    ("balms/agents/raptor.py", "_summaries", "summaries"),
    ("balms/models/cache.py", None, "cache"),
    ("balms/experiments/scheduler.py", "_wait", "embed_wait"),
    ("balms/experiments/budget.py", "spend", "cap"),
    ("balms/threads.py", "_work", "idle"),
]


def state_of(frame) -> str:
    f = frame
    while f is not None:
        name, fn = f.f_code.co_filename, f.f_code.co_name
        for frag, func, state in RULES:
            if frag in name and (func is None or func == fn):
                return state
        f = f.f_back
    return "other"


def _pool(thread_name: str) -> str:
    return thread_name.rsplit("_", 1)[0] if "_" in thread_name else thread_name


def sample() -> dict:
    names = {t.ident: t.name for t in threading.enumerate()}
    counts: dict = collections.defaultdict(collections.Counter)
    for ident, frame in sys._current_frames().items():
        name = names.get(ident, "?")
        if name.startswith("balms-"):
            counts[_pool(name)][state_of(frame)] += 1
    return {k: dict(v) for k, v in counts.items()}


class Tracer:
    """`with Tracer(path):` appends {"t": seconds, pool: {state: threads}} once a second."""

    def __init__(self, path, every_s: float = 1.0):
        self.path, self.every_s = path, every_s
        self._stop = threading.Event()

    def __enter__(self):
        self._t0 = time.monotonic()
        self._fh = open(self.path, "w")
        self._thread = threading.Thread(target=self._run, daemon=True, name="trace")
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.wait(self.every_s):
            self._fh.write(json.dumps({"t": round(time.monotonic() - self._t0, 1), **sample()}) + "\n")
            self._fh.flush()

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(5)
        self._fh.close()
