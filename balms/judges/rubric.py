"""The paper's two-tier rationale rubric: dimensions, the judge's JSON schema and its prompt.

Tier 1 (temporal reasoning): each dimension is 1 (invoked correctly), 0 (invoked wrongly) or null
(not invoked; never a penalty). Tier 2 (general quality): 1-5 Likert, `overall` is the headline.
The judge sees the canonical window text (`balms.data.render.render_window`, the same text the agents
see), the gold label, the predicted label and the rationale (METHOD.md, "Judge").
"""

from __future__ import annotations

from balms.models.base import Message

TIER1: dict[str, str] = {
    "c1_alignment": "temporal alignment: maps phrases such as 'last 3 days' or 'day 5' to the right days "
    "and fields of the window",
    "c2_slicing": "slicing: compares segments of the window, e.g. early vs late week, weekdays vs weekend",
    "c3_difference_judgment": "difference judgment: quantifies relative change (increase, drop, by how "
    "much) correctly",
    "c4_lag": "lag: reasons about delayed effects (e.g. poor sleep two days before affecting the target day)",
    "c5_structure": "structure: identifies peaks, troughs, change points, regime shifts or clusters of "
    "missing data",
    "c6_interaction": "interaction: reasons about the joint effect of several channels",
}

TIER2: dict[str, str] = {
    "faithfulness": "the predicted label follows from the rationale's own reasoning, whether or not it "
    "matches the gold label",
    "evidence_grounding": "every cited feature, value and day exists in the window; invented features, "
    "wrong values and wrong-day attributions are penalised",
    "domain_knowledge": "the links drawn between behaviour and the target are consistent with mental "
    "health and sensing knowledge",
    "safety": "no alarmism, no unwarranted medical advice, no stigmatising language",
    "clarity": "clear, concise and well organised",
    "overall": "overall quality of the rationale (the headline score)",
}

DIMENSIONS: tuple[str, ...] = (*TIER1, *TIER2)
TIER1_VALUES = (0, 1)
TIER2_RANGE = (1, 5)


def _dim_schema(score: dict, justify: bool = True) -> dict:
    if not justify:
        return score
    return {
        "type": "object",
        "properties": {"score": score, "justification": {"type": "string"}},
        "required": ["score", "justification"],
        "additionalProperties": False,
    }


def judge_json_schema(justify: bool = True) -> dict:
    """JSON schema of the judge's answer: one {score, justification} object per dimension, or (with
    `justify=False`, the scores-only budget mode) one bare score per dimension.

    Scores are enums (nullable), which llama.cpp turns into a grammar and vLLM into guided decoding,
    so a constrained backend can only emit in-range scores.
    """
    props = {d: _dim_schema({"enum": [*TIER1_VALUES, None]}, justify) for d in TIER1}
    lo, hi = TIER2_RANGE
    props.update({d: _dim_schema({"enum": [*range(lo, hi + 1), None]}, justify) for d in TIER2})
    return {
        "type": "object",
        "properties": props,
        "required": list(DIMENSIONS),
        "additionalProperties": False,
    }


SYSTEM_PROMPT = (
    "You are a careful evaluator of explanations written by AI agents that predict a person's "
    "self-reported wellbeing score from passive sensing data. You grade one rationale against the "
    "data it was written from, following a two-tier rubric, and you answer with JSON only."
)


def _rubric_text() -> str:
    t1 = "\n".join(f"- {k}: {v}" for k, v in TIER1.items())
    t2 = "\n".join(f"- {k}: {v}" for k, v in TIER2.items())
    return (
        "Tier 1, temporal reasoning. For each dimension give 1 if the rationale uses it correctly, 0 if "
        "it uses it incorrectly (check it against the window), null if the rationale does not use it at "
        "all (null is not a penalty).\n"
        f"{t1}\n\n"
        "Tier 2, general quality. Score each dimension on a 1-5 scale (1 = very poor, 5 = excellent); "
        "null only if the rationale is empty.\n"
        f"{t2}"
    )


def _example_json(justify: bool = True) -> str:
    def shape(score: str) -> str:
        return f'{{"score": {score}, "justification": "<one sentence>"}}' if justify else score

    parts = [f'"{d}": {shape("<0, 1 or null>")}' for d in TIER1] + [f'"{d}": {shape("<1-5>")}' for d in TIER2]
    return "{\n  " + ",\n  ".join(parts) + "\n}"


def build_messages(
    *, window_text: str, gold: int, predicted: int | None, rationale: str, scale: tuple[int, int], target: str,
    justify: bool = True, hint: str | None = None,
) -> list[Message]:
    """The judge conversation for one rationale (`justify=False`: scores only, about a fifth of the tokens;
    `hint`: the grounding checker's findings, our extension, placed before the rubric)."""
    pred = str(predicted) if predicted is not None else "unparseable (no valid answer was given)"
    user = (
        f"Target: {target}, an integer from {scale[0]} to {scale[1]}.\n\n"
        f"Sensing window shown to the agent:\n{window_text}\n\n"
        f"Gold (self-reported) label: {gold}\n"
        f"Agent's predicted label: {pred}\n\n"
        f"Agent's rationale:\n<<<\n{rationale}\n>>>\n\n"
        + (f"{hint}\n\n" if hint else "")
        + f"{_rubric_text()}\n\n"
        + ("Each justification is one sentence that quotes the rationale or a value of the window.\n"
           if justify else "")
        + "Answer with a single JSON object and nothing else, in exactly this shape:\n"
        f"{_example_json(justify)}"
    )
    return [Message("system", SYSTEM_PROMPT), Message("user", user)]


def repair_message(error: str, justify: bool = True) -> Message:
    """The single follow-up sent when the judge's first answer could not be used."""
    shape = '{"score": ..., "justification": "..."}' if justify else "a bare score"
    return Message(
        "user",
        f"Your answer could not be used: {error}. Reply again with ONLY the corrected JSON object, with all "
        f"{len(DIMENSIONS)} dimensions ({', '.join(DIMENSIONS)}), each {shape}; Tier-1 scores are 0, 1 or "
        "null, Tier-2 scores are integers from 1 to 5.",
    )
