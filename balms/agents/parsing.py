"""The ONE answer parser every agent uses: the last "Answer: N" of a model's text, range-checked.

Why one parser: MAE must be comparable across systems, and a parse failure must stay visible (a
small model that answers "Answer: 226" has failed, not predicted 5). Accepted forms, matched
case-insensitively, the LAST occurrence wins:

    Answer: 3        **Answer:** 3       Answer: 3/5      Final answer: 3
    answer is 3      The answer is **3**  Answer = 3       Answer: I estimate 3

A value outside [scale_min, scale_max], a non-integer ("3.5"), a range ("3-4") or no answer at all
gives `value=None` with an `error`; the caller keeps the raw text. The rationale is the text before
the answer line (the CoT reasoning, which is also the T2 rationale).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from balms.records import OUT_OF_RANGE_ERROR, out_of_range_value  # noqa: F401  (re-exported for the parser's users)

_NUM = r"(?P<num>[-+]?\d+(?:\.\d+)?)(?![\d.]\d)"
# "Answer:" / "Final answer:" / "answer =" may be followed by a short non-digit filler ("I estimate ");
# "answer is" / "answer would be" only by markdown emphasis.
_PATTERN = re.compile(
    r"(?P<head>(?:final\s+)?answer)\s*[*_]*\s*(?:"
    r"[:=]\s*[*_]*[^\d\n*_:]{0,24}?[*_]*\s*"
    r"|(?:is|would\s+be|will\s+be)\s*[*_`\"']*\s*"
    r")" + _NUM + r"(?P<tail>[ \t]*(?:/[ \t]*\d+|out\s+of\s+\d+|(?:-|–|to)[ \t]*\d+)?)",
    re.IGNORECASE,
)


# The paper's CoT answer sentence (Appendix D, "Health-LLM Prompt Template with Reasoning": "The user's stress
# score is 3."); accepted only where the prompt asked for it (`score_sentence=True`), so no other reply parses
# differently.
_SCORE_SENTENCE = re.compile(
    r"(?P<head>user(?:'|’)?s?\s+[\w\- ]{0,40}?score)\s+(?:is|would\s+be|will\s+be)\s*[*_`\"']*\s*" + _NUM
    + r"(?P<tail>[ \t]*(?:/[ \t]*\d+|out\s+of\s+\d+|(?:-|–|to)[ \t]*\d+)?)",
    re.IGNORECASE,
)


NO_ANSWER = "no 'Answer: <int>' found"  # the parse error of a text with no answer statement at all
# the parse error of an integer answer outside the scale is written in the one format balms.records reads back
# (`out_of_range_value`), so the metrics count these failures without a second format


@dataclass(frozen=True)
class ParsedAnswer:
    value: int | None  # the integer on the native scale, None when parsing failed
    error: str | None  # why parsing failed (None when value is set)
    rationale: str  # text before the answer line (the whole text when no answer was found)
    matched: str = ""  # the exact answer snippet that was used, for the transcript


def _to_number(tok: str) -> float:
    return float(tok)


def _rationale_before(text: str, start: int) -> str:
    """Text before the answer: the preceding lines when the answer opens its line, else up to the match."""
    line_start = text.rfind("\n", 0, start) + 1
    prefix = text[line_start:start]
    # "**Answer:** 3", "The answer is 3", "So my final answer is 3": the whole line is the answer line.
    short_lead = len(prefix.split()) <= 4 and not re.search(r"\d", prefix)
    cut = line_start if short_lead else start
    return text[:cut].strip()


def parse_answer(text: str | None, scale_min: int, scale_max: int, *, score_sentence: bool = False) -> ParsedAnswer:
    """Parse the LAST answer statement in `text`; range-check it against [scale_min, scale_max].
    `score_sentence`: also accept the paper's CoT sentence "The user's <target> score is N"."""
    text = text or ""
    matches = list(_PATTERN.finditer(text))
    if score_sentence:
        matches = sorted([*matches, *_SCORE_SENTENCE.finditer(text)], key=lambda m: m.start())
    if not matches:
        return ParsedAnswer(None, NO_ANSWER, text.strip())
    m = matches[-1]
    rationale = _rationale_before(text, m.start())
    snippet = m.group(0).strip()
    tail = (m.group("tail") or "").strip().lower()
    if tail and not (tail.startswith("/") or tail.startswith("out")):
        return ParsedAnswer(None, f"ambiguous answer (a range): {snippet!r}", rationale, snippet)
    num = _to_number(m.group("num"))
    if not num.is_integer():
        return ParsedAnswer(None, f"non-integer answer {m.group('num')!r}", rationale, snippet)
    value = int(num)
    if not scale_min <= value <= scale_max:
        return ParsedAnswer(
            None, OUT_OF_RANGE_ERROR.format(value=value, lo=scale_min, hi=scale_max), rationale, snippet
        )
    return ParsedAnswer(value, None, rationale, snippet)
