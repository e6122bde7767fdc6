"""A spending cap for a scheduled run: `-p max_usd X` (Claude at list price) and `-p max_gpu_hours Y` (vLLM servers).

Why: the paper profile is a bill (`balms plan`); a researcher who pays by the hour or by the token wants the run
to stop before the bill passes a number, keep everything, and carry on when the number is raised.

How: a sample starts only if what is spent (measured: the model calls actually made, never those answered from
a cache; records already on disk included) plus what the samples in flight are expected to cost plus its own
expected cost stays within the cap. The expected cost of a sample is the mean measured for its (system, model)
so far (records on disk included); the first sample of each kind runs alone to learn it, and no other sample
starts while a cost is being learnt (so only those first samples, one of each kind, can pass the cap). A sample
refused by the cap writes nothing (runner.NotStarted): its cell stays resumable, and the same command with a
higher cap continues from there. GPU hours are counted from tokens as `balms plan` counts them (THROUGHPUT).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from balms.records import PredictionRecord
from balms.runner import NotStarted


class CapReached(NotStarted):
    """Raised in place of a sample the cap does not allow: the runner writes no record for it (runner.NotStarted)."""


def call_usage(rec: PredictionRecord) -> tuple[int, int]:
    """(prompt, completion) tokens of the calls this record's sample actually sent to a model (not cached)."""
    p = c = 0
    for st in rec.transcript:
        m = st.meta
        if "prompt_tokens" in m and "completion_tokens" in m and not m.get("cached"):
            p += int(m.get("prompt_tokens") or 0)
            c += int(m.get("completion_tokens") or 0)
    return p, c


def spend_of(rec: PredictionRecord, throughput: dict | None = None) -> tuple[float, float]:
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
        return 0.0, gpu_hours(rec.model, p, c, throughput)
    return 0.0, 0.0  # embedded CPU models: free


@dataclass
class SpendingCap:
    max_usd: float | None = None
    max_gpu_hours: float | None = None
    throughput: dict | None = None
    spent: list[float] = field(default_factory=lambda: [0.0, 0.0])  # usd, gpu hours (measured)
    reserved: list[float] = field(default_factory=lambda: [0.0, 0.0])
    n_refused: int = 0
    _seen: dict = field(default_factory=dict)  # kind -> [n, usd, gpu_h] measured
    _learning: set = field(default_factory=set)  # kinds with their first sample in flight
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def from_cfg(cls, cfg) -> SpendingCap | None:
        if cfg.max_usd is None and cfg.max_gpu_hours is None:
            return None
        return cls(cfg.max_usd, cfg.max_gpu_hours)

    def _fits(self, est: tuple[float, float]) -> bool:
        caps = (self.max_usd, self.max_gpu_hours)
        return all(cap is None or self.spent[i] + self.reserved[i] + est[i] <= cap + 1e-12
                   for i, cap in enumerate(caps))

    def already(self, records) -> None:
        """Count what records already on disk cost (an earlier session under a lower cap)."""
        for r in records:
            u, g = spend_of(r, self.throughput)
            self.spent[0] += u
            self.spent[1] += g
            if u or g:  # a record made by calls teaches its kind's cost (one from the cache teaches nothing)
                seen = self._seen.setdefault((r.system, r.model), [0, 0.0, 0.0])
                seen[0] += 1
                seen[1] += u
                seen[2] += g

    def admit(self, kind) -> tuple[float, float] | None:
        """The reservation for a new sample of `kind`, or None when the cap does not allow it (or the kind is
        still learning its cost with another sample)."""
        with self._lock:
            seen = self._seen.get(kind)
            if seen is None:
                if kind in self._learning or not self._fits((0.0, 0.0)):
                    return None
                self._learning.add(kind)
                return (0.0, 0.0)
            est = (seen[1] / seen[0], seen[2] / seen[0])
            if self._learning or not self._fits(est):  # an unknown cost in flight: wait for it to be known
                return None
            self.reserved[0] += est[0]
            self.reserved[1] += est[1]
            return est

    def settle(self, kind, reservation: tuple[float, float], rec: PredictionRecord | None) -> None:
        usd, gpu = spend_of(rec, self.throughput) if rec is not None else (0.0, 0.0)
        with self._lock:
            self.reserved[0] -= reservation[0]
            self.reserved[1] -= reservation[1]
            self.spent[0] += usd
            self.spent[1] += gpu
            self._learning.discard(kind)
            if rec is not None:
                s = self._seen.setdefault(kind, [0, 0.0, 0.0])
                s[0] += 1
                s[1] += usd
                s[2] += gpu

    def spend(self, kind, predict):
        """Run `predict()` (one sample of `kind`) if the cap allows it, else raise CapReached; settle its cost."""
        import time

        from balms.models.slots import waiting

        while True:
            res = self.admit(kind)
            if res is not None:
                break
            with self._lock:
                learning = bool(self._learning)
                if not learning:
                    self.n_refused += 1
            if not learning:
                raise CapReached(self.describe())
            waiting()  # it holds no turn at the CPU while it waits (balms.models.slots.Turns)
            time.sleep(0.05)  # the kind's first sample is still teaching us its cost
        rec = None
        try:
            rec = predict()
            return rec
        finally:
            self.settle(kind, res, rec if isinstance(rec, PredictionRecord) else None)

    def describe(self) -> str:
        parts = []
        if self.max_usd is not None:
            parts.append(f"${self.spent[0]:.4f} of max_usd {self.max_usd:g}")
        if self.max_gpu_hours is not None:
            parts.append(f"{self.spent[1]:.4f} of max_gpu_hours {self.max_gpu_hours:g} GPU h")
        return ", ".join(parts)


class SpendingCapReached(RuntimeError):
    """A notebook's grid stopped at the spending cap: what is done is kept; raise the cap and run again."""
