"""What every agent shares: model calls that are logged into the transcript, and assembly of a complete
PredictionRecord. (Channel selection and the window an agent sees live in `balms.data.channels`, so the
judges can rebuild that window without importing agents.)

One `Episode` per (sample, agent): it times the whole prediction, counts model calls and tokens, and
keeps every prompt, completion, retrieval, code block and observation as `Step`s, so that records
(never agent internals) feed metrics, the judge and the failure taxonomy.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence

from balms.agents.parsing import ParsedAnswer, parse_answer
from balms.data.schema import DatasetTables, Sample
from balms.models.base import Backend, Completion, GenParams, Message
from balms.records import PredictionRecord, Step, sample_fields


def model_name(backend: Backend) -> str:
    return str(getattr(backend, "name", None) or backend.model_id)


def per_sample_seed(sample: Sample, seed: int) -> int:
    from balms.models.seeds import sample_seed

    return sample_seed(sample.sample_id, seed)


@dataclass
class Episode:
    """Transcript, token and time accounting for one prediction."""

    backend: Backend
    transcript: list[Step] = field(default_factory=list)
    n_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0  # every generated token, reasoning included (what the GPU spends, what is billed)
    reasoning_tokens: int = 0  # the part of completion_tokens spent in reasoning traces (<think>, reasoning_content)
    t0: float = field(default_factory=time.perf_counter)
    model_id: str = ""
    # Cache-replayed calls take milliseconds; they are counted at the latency measured when they were generated,
    # so a warm re-run reports the same per-sample latency (Figures 6-10) as the cold run. Wall time is kept too.
    replay_adjust_s: float = 0.0

    def log(self, kind: str, content: str = "", **meta) -> Step:
        step = Step(kind=kind, content=content, meta=meta)
        self.transcript.append(step)
        return step

    def call(self, messages: Sequence[Message], params: GenParams, *, kind: str = "completion",
             log_prompt: bool = True, **meta) -> Completion:
        """One model call; the last user message is logged as a prompt step, the reply as `kind`."""
        if log_prompt:
            last_user = next((m.content for m in reversed(messages) if m.role == "user"), "")
            self.log("prompt", last_user, n_messages=len(messages))
        t = time.perf_counter()
        comp = self.backend.generate(list(messages), params)
        if comp.cached:
            self.replay_adjust_s += max(float(comp.latency_s or 0.0) - (time.perf_counter() - t), 0.0)
        self.n_calls += 1
        self.prompt_tokens += int(comp.prompt_tokens or 0)
        # backends' completion_tokens already include the reasoning trace: count it once, and apart
        self.completion_tokens += int(comp.completion_tokens or 0)
        self.reasoning_tokens += int(comp.reasoning_tokens or 0)
        self.model_id = comp.model_id or self.model_id
        step_meta = dict(prompt_tokens=comp.prompt_tokens, completion_tokens=comp.completion_tokens,
                         finish_reason=comp.finish_reason, latency_s=round(comp.latency_s, 4),
                         cached=comp.cached, **meta)
        if comp.reasoning:
            step_meta["reasoning"] = comp.reasoning
            step_meta["reasoning_tokens"] = comp.reasoning_tokens
        # the response this record used, by its cache key, so `balms bundle export` packs exactly what a replay
        # needs; a day summary travels as a summary-cache row instead (read back via `replay`, which has no key)
        if comp.cache_key and kind != "summary":
            step_meta["response_key"] = comp.cache_key
        self.log(kind, comp.text, **step_meta)
        return comp

    def replay(self, kind: str, content: str, *, prompt_tokens: int, completion_tokens: int, latency_s: float,
               reasoning_tokens: int = 0, **meta) -> Step:
        """A model output reused from an agent-level cache (RAPTOR's day summaries): logged and counted as the
        call it was, at its recorded tokens and latency, so a sample's cost does not depend on run order."""
        self.n_calls += 1
        self.prompt_tokens += int(prompt_tokens or 0)
        self.completion_tokens += int(completion_tokens or 0)
        self.reasoning_tokens += int(reasoning_tokens or 0)
        self.replay_adjust_s += float(latency_s or 0.0)
        return self.log(kind, content, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                        latency_s=round(float(latency_s or 0.0), 4), cached=True, **meta)

    def absorb(self, other: "Episode") -> None:
        """Append a sub-episode (calls made in parallel, e.g. RAPTOR's day summaries), so the transcript keeps a
        fixed order whatever order the parallel calls finished in."""
        self.transcript.extend(other.transcript)
        self.n_calls += other.n_calls
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.reasoning_tokens += other.reasoning_tokens
        self.replay_adjust_s += other.replay_adjust_s
        self.model_id = other.model_id or self.model_id

    @property
    def elapsed(self) -> float:
        """Wall time of this run."""
        return time.perf_counter() - self.t0

    @property
    def latency(self) -> float:
        """Wall time with every replayed call counted at its originally measured latency."""
        return self.elapsed + self.replay_adjust_s


def build_record(*, system: str, cot: bool, sample: Sample, tables: DatasetTables, backend: Backend,
                 episode: Episode, options: dict, raw_answer: str, parsed: ParsedAnswer | None,
                 rationale: str | None = None, error: str | None = None) -> PredictionRecord:
    """A complete record: label, prediction or parse_error, raw text, rationale, transcript, usage."""
    return PredictionRecord(
        **sample_fields(sample),
        system=system,
        cot=cot,
        model=model_name(backend),
        model_id=episode.model_id or backend.model_id,
        options=options,
        prediction=parsed.value if parsed else None,
        parse_error=(parsed.error if parsed else "no answer produced"),
        raw_answer=raw_answer,
        rationale=rationale if rationale is not None else (parsed.rationale if parsed else ""),
        transcript=episode.transcript,
        n_steps=episode.n_calls,
        prompt_tokens=episode.prompt_tokens,
        completion_tokens=episode.completion_tokens,
        reasoning_tokens=episode.reasoning_tokens,
        latency_s=round(episode.latency, 4),
        wall_s=round(episode.elapsed, 4),
        error=error,
    )


def parse_for(tables: DatasetTables, text: str, *, score_sentence: bool = False) -> ParsedAnswer:
    return parse_answer(text, tables.target.scale_min, tables.target.scale_max, score_sentence=score_sentence)
