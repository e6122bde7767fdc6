"""The prediction record: one per (sample, system, backbone, options). Written as one JSONL line.

Everything downstream (metrics, judge, grounding checker, failure taxonomy, report) reads records,
never agent internals.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, Field, computed_field, model_validator

# What became of a sample: "ok" (a parsed prediction), "parse_failure" (the model answered, no label could be read
# from it), "error" (no answer: the agent, the harness or the backend failed; `error` says how). An error is not a
# result: the runner retries it on the next run, and metrics never count it as a parse failure.
Status = Literal["ok", "parse_failure", "error"]
STATUSES: tuple[Status, ...] = ("ok", "parse_failure", "error")


# The parse error of an integer answer outside the label scale (PMData's "0": the paper's prompt prints "0 to 5" for
# a 1-5 scale), written by the parser and read back by the metrics, which count these failures (n_out_of_range)
OUT_OF_RANGE_ERROR = "answer {value} out of range [{lo}, {hi}]"
_OUT_OF_RANGE_RE = re.compile(r"^answer (?P<value>[-+]?\d+) out of range \[[-+]?\d+, [-+]?\d+\]$")


def out_of_range_value(parse_error: str | None) -> int | None:
    """The integer answer a parse error reports as out of range, None for any other error (or none)."""
    m = _OUT_OF_RANGE_RE.match(parse_error) if isinstance(parse_error, str) else None
    return int(m.group("value")) if m else None


def record_status(error: str | None, prediction: int | None) -> Status:
    """The status the `error` and `prediction` fields imply (records written before the field existed get it so)."""
    if error is not None:
        return "error"
    return "parse_failure" if prediction is None else "ok"


class Step(BaseModel):
    """One entry of an agent transcript: a model call, a tool call, or an observation."""

    # "prompt" | "completion" | "thought" | "code" | "observation" | "forced_finish" | "retrieval" | "summary"
    kind: str
    content: str = ""
    meta: dict[str, Any] = Field(default_factory=dict)  # tokens, latency, exit status, retrieved ids...


class PredictionRecord(BaseModel):
    """One prediction. Only `sample_id`, `system`, `model` and `model_id` are required, so a harness that
    drives the runner with its own samples (anything with a `sample_id`) need not invent users or dates."""

    sample_id: str
    dataset: str = ""
    user: str = ""
    target_date: str = ""  # ISO date
    lookback: int = 0
    label: int | None = None
    source: str = "unknown"  # "real" | "synthetic"
    system: str  # "healthllm" | "rag" | "raptor" | "phia"
    cot: bool = False
    model: str  # registry name, e.g. "qwen2.5-coder-1.5b" or "Qwen2.5-14B-Instruct"
    model_id: str  # exact model id
    options: dict[str, Any] = Field(default_factory=dict)  # e.g. {"executor": "faithful", "channels": "wearable"}
    prediction: int | None = None  # None = parse failure (see parse_error)
    parse_error: str | None = None
    raw_answer: str = ""  # final model text the answer was parsed from
    rationale: str = ""  # text before the answer line (CoT reasoning or PHIA final thought)
    transcript: list[Step] = Field(default_factory=list)
    n_steps: int = 1  # model calls made for this sample
    prompt_tokens: int = 0
    completion_tokens: int = 0  # all generated tokens, reasoning included
    reasoning_tokens: int = 0  # of which reasoning (a reasoning model's trace); answer tokens = the difference
    # agent latency for this sample (model + tools); cache-replayed calls count at their measured latency
    latency_s: float = 0.0
    wall_s: float | None = None  # wall time of the run that wrote the record (small when calls came from the cache)
    cost_usd: float = 0.0
    error: str | None = None  # agent/harness error (not a parse failure)
    cell: dict[str, Any] | None = None  # the cell's spec (balms.cellspec.CellSpec.compact()): what made this record

    @model_validator(mode="wrap")
    @classmethod
    def _stated_status_agrees(cls, data: Any, handler):
        """A stored `status` is checked against the fields it summarises (an older record has none: derived)."""
        stated = data.get("status") if isinstance(data, dict) else None
        rec = handler(data)
        if stated is not None and stated != rec.status:
            raise ValueError(f"status {stated!r} disagrees with the record's fields, which say {rec.status!r} "
                             f"(error {rec.error!r}, prediction {rec.prediction!r})")
        return rec

    @computed_field  # written into every JSONL line; derived, so it can never disagree with error/prediction
    @property
    def status(self) -> Status:
        return record_status(self.error, self.prediction)

    @property
    def parsed(self) -> bool:
        return self.prediction is not None

    def key(self) -> str:
        """Identity of the record inside a run (a run holds one system/model/options)."""
        return self.sample_id


SAMPLE_FIELDS = ("dataset", "user", "target_date", "lookback", "label", "source")


def sample_fields(sample: Any) -> dict[str, Any]:
    """The record fields a sample provides, from any object with a `sample_id` (missing ones stay default)."""
    out: dict[str, Any] = {"sample_id": str(sample.sample_id)}
    for name in SAMPLE_FIELDS:
        v = getattr(sample, name, None)
        if v is None:
            continue
        if name == "target_date" and hasattr(v, "isoformat"):
            v = v.isoformat()
        elif name == "label":
            v = int(v)
        out[name] = v
    return out
