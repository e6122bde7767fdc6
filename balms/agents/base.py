"""One agent interface: sample + window + model backend -> PredictionRecord."""

from __future__ import annotations

from typing import Protocol

from balms.data.schema import DatasetTables, Sample
from balms.models.base import Backend
from balms.records import PredictionRecord


class Agent(Protocol):
    name: str  # "healthllm" | "rag" | "raptor" | "phia"
    cot: bool

    def predict(self, sample: Sample, tables: DatasetTables, backend: Backend) -> PredictionRecord: ...
