"""One agent interface: sample + tables + model backend -> PredictionRecord; and the smallest agent to build on.

The runner needs only `predict(sample, tables, backend)` and a `sample_id` on each sample. `SimpleAgent` is
the minimal base for an agent of your own (a peer harness, a new prompt): implement `messages(sample)`; one
model call, the shared answer parser and a complete record (transcript, tokens, latency) come with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from balms.data.schema import DatasetTables, Sample
from balms.models.base import Backend, GenParams, Message
from balms.records import PredictionRecord


class Agent(Protocol):
    name: str  # "healthllm" | "rag" | "raptor" | "phia" | your own
    cot: bool

    def predict(self, sample: Sample, tables: DatasetTables, backend: Backend) -> PredictionRecord: ...


@dataclass
class SimpleAgent:
    """Subclass and implement `messages(sample)`. Works for any sample object with a `sample_id` (and, where
    it has them, `label`, `user`, `dataset`, ...); `tables` may be None."""

    name: str = "simple"
    cot: bool = False
    max_tokens: int = 64
    temperature: float = 0.0
    seed: int = 0
    scale: tuple[int, int] = (1, 5)

    def messages(self, sample: Any) -> list[Message]:
        raise NotImplementedError("SimpleAgent subclasses return the chat messages for one sample")

    def options(self) -> dict:
        return {"max_tokens": self.max_tokens, "temperature": self.temperature, "seed": self.seed,
                "scale": list(self.scale)}

    def predict(self, sample: Any, tables: Any, backend: Backend) -> PredictionRecord:
        from balms.agents.common import Episode, build_record, per_sample_seed
        from balms.agents.parsing import parse_answer

        episode = Episode(backend)
        params = GenParams(temperature=self.temperature, max_tokens=self.max_tokens,
                           seed=per_sample_seed(sample, self.seed))
        comp = episode.call(self.messages(sample), params)
        parsed = parse_answer(comp.text, *self.scale)
        return build_record(system=self.name, cot=self.cot, sample=sample, tables=tables, backend=backend,
                            episode=episode, options=self.options(), raw_answer=comp.text, parsed=parsed)
