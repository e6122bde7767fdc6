"""A backend that answers by rule: what `balms plan` runs the real agents against to count their calls and tokens,
and what the loopback simulator (bench/sim_vllm.py) answers, so the plan's counting and the simulated fleet agree.

Why: the calls a system makes per sample (a ReAct loop, day summaries, a plugin's own chain) are the system's code;
running that code against a stand-in counts them for any system, where pricing each system by hand could not.

The rules (`Behaviour`): every reply claims `output_share` of its `max_tokens` as completion tokens and is padded to
about that length (4 characters a token), so a conversation grows as it would; a request whose system prompt asks
for Python code (PHIA's ReAct steps) gets `code_steps` replies with one code block before it gets an answer; a
request with a JSON schema (the judge) gets the smallest instance of the schema; one asking for log-probabilities
(the G-Eval judge) gets a flat distribution over the digits; everything else ends "Answer: k", k in 1-5 from the
request's hash. Identical requests are answered identically (the response cache makes them one call in a run).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

from balms.models.base import Completion, GenParams, Message


@dataclass(frozen=True)
class Behaviour:
    """How the stand-in answers (module doc)."""

    name: str
    output_share: float  # completion tokens = output_share x max_tokens
    code_steps: int  # replies with a code block before the answer, in a conversation that asks for code


# The loopback simulator's servers (bench/sim_vllm.py): half the budget, one code step then the answer.
SIMULATOR = Behaviour("simulator", 0.5, 1)
# What small backbones mostly do: half the budget; code, code, code, then the answer.
TYPICAL = Behaviour("typical", 0.5, 3)
# Every budget spent and a ReAct loop that never answers (it runs to its iteration cap and a forced finish).
UPPER = Behaviour("upper", 1.0, 10**6)
BEHAVIOURS = {b.name: b for b in (SIMULATOR, TYPICAL, UPPER)}

CODE_FENCE = "```python"
PHIA_CODE = "[Thought] Look at the last days.{pad}\n[Act]\n```python\nprint(daily_df.tail(3))\n```"
ANSWER = "The record points this way{by}.{pad}\nAnswer: {k}"
_FILLER = " The record points this way."


def completion_tokens(max_tokens: int | None, behaviour: Behaviour) -> int:
    return max(1, int((max_tokens or 16) * behaviour.output_share))


def _pad(tokens: int, used_chars: int) -> str:
    n = max(0, 4 * tokens - used_chars)
    return (_FILLER * (n // len(_FILLER) + 1))[:n]


def _instance(schema: dict):
    """The smallest value a JSON schema accepts (enough for the schemas balms sends: objects, integers, strings)."""
    if "enum" in schema:
        return schema["enum"][0]
    for alt in ("anyOf", "oneOf"):
        if alt in schema:
            return _instance(next((s for s in schema[alt] if s.get("type") != "null"), schema[alt][0]))
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        props = schema.get("properties", {})
        return {k: _instance(props[k]) for k in schema.get("required", props)}
    if kind in ("integer", "number"):
        return schema.get("minimum", 1)
    if kind == "array":
        return []
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    return "ok"


def reply_for(messages: Sequence[dict], max_tokens: int | None, behaviour: Behaviour,
              json_schema: dict | None = None, model: str = "") -> str:
    """The stand-in's reply to one chat request (messages as OpenAI dicts; module doc). An answer names `model`, so
    two models' rationales differ, as real ones do (the judge gets a request per model, not one from its cache)."""
    if json_schema:
        return json.dumps(_instance(json_schema))
    tokens = completion_tokens(max_tokens, behaviour)
    system = (messages[0].get("content") or "") if messages else ""
    n_assistant = sum(m.get("role") == "assistant" for m in messages)
    if CODE_FENCE in system and n_assistant < behaviour.code_steps:
        return PHIA_CODE.format(pad=_pad(tokens, len(PHIA_CODE)))
    h = int(hashlib.sha256(json.dumps(list(messages), sort_keys=True).encode()).hexdigest()[:8], 16)
    by = f" (by {model})" if model else ""
    return ANSWER.format(pad=_pad(tokens, len(ANSWER) + len(by)), k=h % 5 + 1, by=by)


def chars_over_4(messages: Sequence[Message]) -> int:
    """Prompt tokens when no tokenizer is at hand: characters / 4, plus 4 per message."""
    return sum(math.ceil(len(m.content) / 4) + 4 for m in messages)


@dataclass
class Usage:
    calls: int = 0
    prompt_tokens: int = 0
    output_tokens: int = 0

    def add(self, other: "Usage") -> None:
        self.calls += other.calls
        self.prompt_tokens += other.prompt_tokens
        self.output_tokens += other.output_tokens


@dataclass
class StandInBackend:
    """A `Backend` answering by `behaviour`'s rules and counting what it is asked. A request identical to one already
    answered (same messages and decoding parameters) is counted once, as the response cache makes it one call."""

    model_id: str
    behaviour: Behaviour = SIMULATOR
    count_tokens: Callable[[Sequence[Message]], int] = chars_over_4
    name: str = ""
    usage: Usage = field(default_factory=Usage)
    _seen: set = field(default_factory=set)

    def generate(self, messages: Sequence[Message], params: GenParams) -> Completion:
        msgs = [m.to_dict() for m in messages]
        text = reply_for(msgs, params.max_tokens, self.behaviour, params.json_schema, self.name or self.model_id)
        p, c = self.count_tokens(messages), completion_tokens(params.max_tokens, self.behaviour)
        key = hashlib.sha256(json.dumps([msgs, params.cache_key_fields()], sort_keys=True, default=str)
                             .encode()).hexdigest()
        if key not in self._seen:
            self._seen.add(key)
            self.usage.add(Usage(1, p, c))
        logprobs = [{str(d): math.log(1 / 6) for d in range(6)}] if params.logprobs else None
        return Completion(text=text, model_id=self.model_id, prompt_tokens=p, completion_tokens=c,
                          logprobs=logprobs)
