"""A spending cap for a scheduled run: `-p max_usd X` (Claude at list price) and `-p max_gpu_hours Y` (vLLM servers).

Why: the paper profile is a bill (`balms plan`); a researcher who pays by the hour or by the token wants the run
to stop before the bill passes a number, keep everything, and carry on when the number is raised.

How: a sample starts only if what is spent (measured: the model calls actually made, never those answered from
a cache; records already on disk included) plus what the samples in flight are expected to cost plus its own
expected cost stays within the cap. The expected cost of a sample is the mean measured for its (system, model)
over the samples that made calls (records on disk included): a sample answered from the cache costs nothing and
teaches nothing, else a warm cache taught a cost of zero and let every later sample through (issue 36: 19 real
calls against a cap that allowed about 5). While a kind's cost is unknown one sample of it runs to learn it and
no sample of a known cost starts (it waits), so the cap holds within one sample's cost per kind. A sample
refused by the cap writes nothing (balms.models.slots.NotStarted): its cell stays resumable, and the same command with a
higher cap continues from there. GPU hours are counted from tokens as `balms plan` counts them (THROUGHPUT).
"""

from __future__ import annotations

import threading

from balms.models.slots import NotStarted
from balms.records import PredictionRecord


def call_usage(rec: PredictionRecord) -> tuple[int, int]:
    """(prompt, completion) tokens of the calls this record's sample actually sent to a model (not cached)."""
    p = c = 0
    for st in rec.transcript:
        m = st.meta
        if "prompt_tokens" in m and "completion_tokens" in m and not m.get("cached"):
            p += int(m.get("prompt_tokens") or 0)
            c += int(m.get("completion_tokens") or 0)
    return p, c


def spend_of(rec: PredictionRecord) -> tuple[float, float]:
    """(USD, GPU hours) the record's own model calls cost."""
    from balms.experiments.throughput import gpu_hours
    from balms.models.pricing import estimate_cost
    from balms.models.registry import UnknownModelError, spec

    p, c = call_usage(rec)
    try:
        kind = spec(rec.model).backend
    except UnknownModelError:
        kind = "openai"
    if kind == "anthropic":
        return estimate_cost(rec.model_id, p, c), 0.0
    if kind in ("openai", "vllm-local"):
        return 0.0, gpu_hours(rec.model, p, c)
    return 0.0, 0.0  # embedded CPU models: free


class SpendingCap:
    def __init__(self, max_usd: float | None, max_gpu_hours: float | None):
        self.max_usd, self.max_gpu_hours = max_usd, max_gpu_hours
        self.spent = [0.0, 0.0]  # usd, gpu hours (measured)
        self.reserved = [0.0, 0.0]  # expected cost of the samples in flight
        self.n_refused = 0
        self._seen: dict = {}  # kind -> [n, usd, gpu_h] over samples that made calls (a cache hit teaches nothing)
        self._learning: set = set()  # kinds whose cost is unknown with one sample in flight to learn it
        self._cond = threading.Condition()

    def _count(self, kind, usd: float, gpu: float) -> None:
        self.spent = [self.spent[0] + usd, self.spent[1] + gpu]
        if usd or gpu:  # only a sample that made calls teaches its kind's cost
            n, u, g = self._seen.get(kind, (0, 0.0, 0.0))
            self._seen[kind] = (n + 1, u + usd, g + gpu)

    def already(self, records) -> None:
        """Count what records already on disk cost (an earlier session under a lower cap)."""
        for r in records:
            self._count((r.system, r.model), *spend_of(r))

    def spend(self, kind, predict):
        """Run `predict()` (one sample of `kind`) if the cap allows it, else raise NotStarted; settle its cost.
        While a cost is being learnt (one sample per unknown kind) the other samples wait for it."""
        from balms.models.slots import STOP

        with self._cond:
            while True:
                if STOP.is_set():
                    raise NotStarted("the run stopped")
                seen = self._seen.get(kind)
                est = (0.0, 0.0) if seen is None else (seen[1] / seen[0], seen[2] / seen[0])
                if (kind in self._learning) if seen is None else bool(self._learning):  # a cost being learnt
                    self._cond.wait(timeout=0.2)
                    continue
                if any(cap is not None and self.spent[k] + self.reserved[k] + est[k] > cap + 1e-12
                       for k, cap in enumerate((self.max_usd, self.max_gpu_hours))):
                    self.n_refused += 1
                    raise NotStarted(f"spending cap reached: {self.describe()}")
                if seen is None:
                    self._learning.add(kind)
                self.reserved = [self.reserved[0] + est[0], self.reserved[1] + est[1]]
                break
        rec = None
        try:
            rec = predict()
            return rec
        finally:
            usd, gpu = spend_of(rec) if isinstance(rec, PredictionRecord) else (0.0, 0.0)
            with self._cond:
                self.reserved = [self.reserved[0] - est[0], self.reserved[1] - est[1]]
                self._count(kind, usd, gpu)
                self._learning.discard(kind)
                self._cond.notify_all()

    def describe(self) -> str:
        parts = []
        if self.max_usd is not None:
            parts.append(f"${self.spent[0]:.4g} of max_usd {self.max_usd:g}")
        if self.max_gpu_hours is not None:
            parts.append(f"{self.spent[1]:.4g} of max_gpu_hours {self.max_gpu_hours:g} GPU h")
        return ", ".join(parts)


class SpendingCapReached(RuntimeError):
    """A notebook's grid stopped at the spending cap: what is done is kept; raise the cap and run again."""
