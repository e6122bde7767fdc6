"""Values derived from a dataset's tables and a sample, computed once per process and shared by every cell.

Why: a grid asks for the same sample's window (and RAPTOR's leaves and day tables) once per system and per
backbone; all cells in flight (balms.experiments.scheduler) ask at once, and on the paper's notebook-01 grid this
re-computation was most of the client's CPU, so the servers waited on the client (issue 27). A derived value
is never mutated by its users (windows are replaced, `dataclasses.replace`, never edited), so one copy serves all.

The memo is bounded (least recently used first out) and keyed by the tables object itself (held, so its id
cannot be reused) and hashable arguments. Two threads may compute the same value at once: both get a value
equal to it, and one is kept.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Callable, Hashable


class TablesMemo:
    def __init__(self, maxsize: int):
        self.maxsize = maxsize
        self._lock = threading.Lock()
        self._d: OrderedDict = OrderedDict()
        self.hits = self.misses = 0

    def get(self, tables: Any, key: Hashable, compute: Callable[[], Any]) -> Any:
        k = (id(tables), key)
        with self._lock:
            hit = self._d.get(k)
            if hit is not None and hit[0] is tables:
                self._d.move_to_end(k)
                self.hits += 1
                return hit[1]
            self.misses += 1
        value = compute()
        with self._lock:
            self._d[k] = (tables, value)
            self._d.move_to_end(k)
            while len(self._d) > self.maxsize:
                self._d.popitem(last=False)
        return value

    def clear(self) -> None:
        with self._lock:
            self._d.clear()
