"""Reasoning models (DeepSeek-R1 distills, QwQ...) write `<think>...</think>` before the answer.

The answer is what gets parsed; the reasoning is kept for the transcript and its tokens are counted.
R1 distills' chat templates open `<think>` inside the prompt, so the completion may hold only the
closing tag: everything before it is then reasoning.
"""

from __future__ import annotations

import re

_OPEN, _CLOSE = "<think>", "</think>"
_BLOCK = re.compile(r"<think>(.*?)</think>", re.DOTALL)


def split_reasoning(text: str) -> tuple[str, str | None]:
    """Return (answer, reasoning). `reasoning` is None when the text has no think tags.

    An unclosed `<think>` (generation cut by max_tokens) makes the whole tail reasoning and the answer empty,
    so a truncated thought is never parsed as an answer.
    """
    if _OPEN not in text and _CLOSE not in text:
        return text, None
    parts: list[str] = []
    if _CLOSE in text and (_OPEN not in text or text.index(_CLOSE) < text.index(_OPEN)):
        head, text = text.split(_CLOSE, 1)
        parts.append(head)
    parts.extend(m.group(1) for m in _BLOCK.finditer(text))
    answer = _BLOCK.sub("", text)
    if _OPEN in answer:  # unclosed thought: truncated generation
        answer, tail = answer.split(_OPEN, 1)
        parts.append(tail)
    reasoning = "\n".join(p.strip() for p in parts).strip()
    return answer.strip(), reasoning


def estimate_reasoning_tokens(full_text: str, reasoning: str | None, completion_tokens: int) -> int:
    """Share of `completion_tokens` spent on reasoning, by character share, when the provider reports none."""
    if not reasoning or not full_text or completion_tokens <= 0:
        return 0
    return min(completion_tokens, round(completion_tokens * len(reasoning) / len(full_text)))


def split_completion(text: str, finish_reason: str | None, reasoning_model: bool) -> tuple[str, str | None]:
    """`split_reasoning`, plus the case tags cannot show: an R1 distill's template opens `<think>` in the prompt,
    so a generation cut by max_tokens before `</think>` carries no tag at all. For a reasoning model such a
    text is all thought (answer empty: a parse failure, never a number picked out of a half-finished thought)."""
    answer, reasoning = split_reasoning(text)
    if reasoning_model and reasoning is None and finish_reason == "length" and text.strip():
        return "", text.strip()
    return answer, reasoning
