"""What every agent shares: option handling, channel selection, the window, model calls that are
logged into the transcript, and assembly of a complete PredictionRecord.

One `Episode` per (sample, agent): it times the whole prediction, counts model calls and tokens, and
keeps every prompt, completion, retrieval, code block and observation as `Step`s, so that records
(never agent internals) feed metrics, the judge and the failure taxonomy.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from balms.agents.parsing import ParsedAnswer, parse_answer
from balms.data.schema import Channel, DatasetTables, Sample, Window
from balms.models.base import Backend, Completion, GenParams, Message
from balms.records import PredictionRecord, Step, sample_fields

DEVICES = ("wearable", "phone", "self_report")


# The paper's prompt channels where it names them (PMData: the Health-LLM recipe's four channels);
# other datasets use every daily channel of their tables (GLOBEM's loader already keeps a compact set).
DEFAULT_PROMPT_CHANNELS = {"pmdata": ["steps", "calories", "resting_hr", "sleep_minutes"]}
# Same-day context the paper puts in the prompt (PMData: mood "N out of 5"); others: all context channels.
DEFAULT_CONTEXT_CHANNELS = {"pmdata": ["mood"]}


def resolve_channels(tables: DatasetTables, channels) -> list[Channel] | None:
    """Channel selection option -> Channel objects (None = every daily channel of the tables).

    `channels` may be None (the dataset's default prompt set, DEFAULT_PROMPT_CHANNELS, else all),
    "all", a device name ("wearable" for the GLOBEM Fitbit-only ablation, "phone"), or a list of
    channel names (unknown names are an error naming the dataset).
    """
    if channels is None:
        default = DEFAULT_PROMPT_CHANNELS.get(tables.name)
        have = {c.name for c in tables.channels}
        if default and all(n in have for n in default):
            return [tables.channel(n) for n in default]
        return None
    if channels == "all":
        return None
    if isinstance(channels, str):
        if channels in DEVICES:
            picked = [c for c in tables.channels if c.device == channels]
            if not picked:
                raise ValueError(f"{tables.name}: no channel with device {channels!r}")
            return picked
        channels = [channels]
    return [tables.channel(n) for n in channels]


def select_subday_channels(tables: DatasetTables, chans: list[Channel] | None) -> list[Channel]:
    """Sub-day channels matching the daily selection: those of the selected devices (so the GLOBEM
    Fitbit-only ablation drops phone segments too); all when nothing is selected."""
    if chans is None:
        return list(tables.subday_channels)
    devices = {c.device for c in chans}
    return [c for c in tables.subday_channels if c.device in devices]


def channels_option(channels) -> Any:
    """The JSON-able form of the channel option, for PredictionRecord.options."""
    if channels is None:
        return "default"
    if isinstance(channels, str):
        return channels
    return list(channels)


def restrict_context(window: Window, tables: DatasetTables, context) -> Window:
    """Keep only the context channels the prompt uses: `context` True = the dataset default
    (DEFAULT_CONTEXT_CHANNELS, else all), False = none, a list of names = those."""
    if context is False or context is None:
        window.context, window.context_channels = {}, []
        return window
    names = DEFAULT_CONTEXT_CHANNELS.get(tables.name) if context is True else list(context)
    if names is not None:
        window.context_channels = [c for c in window.context_channels if c.name in names]
        window.context = {k: v for k, v in window.context.items() if k in names}
    return window


def get_window(tables: DatasetTables, sample: Sample, *, context,
               channels: list[Channel] | None) -> Window:
    """The look-back window (never a label, nothing after window_end), via the data layer."""
    from balms.data.samples import window_of

    names = None if channels is None else [c.name for c in channels]
    window = window_of(tables, sample, context=bool(context), channels=names)
    return restrict_context(window, tables, context)


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
    completion_tokens: int = 0
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
        self.completion_tokens += int(comp.completion_tokens or 0) + int(comp.reasoning_tokens or 0)
        self.model_id = comp.model_id or self.model_id
        step_meta = dict(prompt_tokens=comp.prompt_tokens, completion_tokens=comp.completion_tokens,
                         finish_reason=comp.finish_reason, latency_s=round(comp.latency_s, 4),
                         cached=comp.cached, **meta)
        if comp.reasoning:
            step_meta["reasoning"] = comp.reasoning
            step_meta["reasoning_tokens"] = comp.reasoning_tokens
        self.log(kind, comp.text, **step_meta)
        return comp

    def replay(self, kind: str, content: str, *, prompt_tokens: int, completion_tokens: int, latency_s: float,
               **meta) -> Step:
        """A model output reused from an agent-level cache (RAPTOR's day summaries): logged and counted as the
        call it was, at its recorded tokens and latency, so a sample's cost does not depend on run order."""
        self.n_calls += 1
        self.prompt_tokens += int(prompt_tokens or 0)
        self.completion_tokens += int(completion_tokens or 0)
        self.replay_adjust_s += float(latency_s or 0.0)
        return self.log(kind, content, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                        latency_s=round(float(latency_s or 0.0), 4), cached=True, **meta)

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
        latency_s=round(episode.latency, 4),
        wall_s=round(episode.elapsed, 4),
        error=error,
    )


def parse_for(tables: DatasetTables, text: str) -> ParsedAnswer:
    return parse_answer(text, tables.target.scale_min, tables.target.scale_max)
