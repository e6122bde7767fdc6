"""The paper's two-tier rationale rubric (Appendix D, "LLM-as-Judge Prompt Template"): its text, the judge's
JSON schema and the judge conversation.

Every sentence the judge reads here is the paper's, restated character for character from its Appendix D
(typographic quotes, dashes and "∼" as printed): the opening line (our system message), the five inputs, the
critical evaluation rules, each dimension's definition with its examples and score anchors, the holistic Overall
and the output format. Two pieces the extracted paper text lacks are restored and marked as ours: the Tier-2
heading and the Faithfulness line, whose wording is the paper's Section 3.2 ("whether the prediction follows
logically from the reasoning"). Not sent, because they instruct the benchmark and not the judge: the judge-model
line (`config.judge_model`) and the aggregation paragraph (`balms.judges.llm_judge.aggregate_judgements`).

Tier 1 (temporal reasoning): each dimension is 1 (correctly invoked), 0 (invoked but wrong) or null (not
invoked; never a penalty). Tier 2 (general quality): 1-5 Likert, `overall` is the headline.
"""

from __future__ import annotations

from balms.models.base import Message

# The paper's opening line of the template; sent as the system message.
PURPOSE = ("Score a candidate rationale produced by an agentic system on a two-tier rubric: six temporal-reasoning "
           "dimensions (Tier 1, adapted from TemporalBench) and six general-quality dimensions (Tier 2, adapted from "
           "PHIA’s open-ended evaluation).")
SYSTEM_PROMPT = PURPOSE

INPUTS_HEADING = "Inputs to the judge (per window)."
INPUT_WINDOW = ("(1) The agent’s input window rendered in its canonical text form (per-feature arrays over the "
                "look-back window).")
INPUT_GOLD = "(2) The ground-truth label for that window."
INPUT_PREDICTED = "(3) The agent’s predicted label."
INPUT_RATIONALE = "(4) The agent’s free-form chain-of-thought rationale."
INPUT_RUBRIC = "(5) The rubric below."

RULES_HEADING = "Critical evaluation rules."
RULES: tuple[str, ...] = (
    "For Tier-1 (C1–C6): score 1 (correctly invoked), 0 (invoked but wrong), or null (not invoked). Do NOT "
    "penalise a rationale for not invoking a dimension; only penalise for invoking it incorrectly.",
    "Faithfulness asks whether the prediction follows from the reasoning, NOT whether the prediction matches the "
    "ground truth. A wrong prediction can still be faithful to its (also-wrong) reasoning.",
)
JUSTIFICATION_RULE = ("Justifications must cite specific text from the rationale or specific values from the input "
                      "window. One sentence per justification.")

TIER1_HEADING = "Tier 1 – Temporal reasoning (TemporalBench C1–C6; score 1 / 0 / null)."
TIER1: dict[str, str] = {
    "c1_alignment": "C1 Alignment. Does the rationale correctly map natural-language conditions (e.g. “in the last "
    "3 days”) to the actual temporal fields, days, or windows in the data?",
    "c2_slicing": "C2 Slicing. Does it correctly compare temporal segments (morning vs. evening; early week vs. late "
    "week)?",
    "c3_difference_judgment": "C3 Difference Judgment. Does it quantify relative changes between segments correctly "
    "(e.g. “sleep dropped ∼20% mid-week”)?",
    "c4_lag": "C4 Lag. Does it correctly identify delayed/offset effects (e.g. low steps on day N preceding a mood "
    "dip on day N+2)?",
    "c5_structure": "C5 Structure. Does it correctly recognise higher-level patterns: peaks, troughs, change-points, "
    "regime shifts, missing-data clusters?",
    "c6_interaction": "C6 Interaction. Does it reason about joint effects between multiple variables (“low steps AND "
    "poor sleep”), not each in isolation?",
}

# ours: the extracted paper text has no Tier-2 heading; the scale is Section 3.2's ("a 1–5 Likert scale")
TIER2_HEADING = "Tier 2 – General quality (score 1–5)."
TIER2: dict[str, str] = {
    # ours: the extracted Appendix D has no Faithfulness line; Section 3.2's definition, as a question
    "faithfulness": "Faithfulness. Does the prediction follow logically from the reasoning?",
    "evidence_grounding": "Evidence Grounding. Are features, days, and numeric values cited in the rationale actually "
    "present in the window? Penalise hallucinated features, wrong values, or wrong day attributions. 5 = every "
    "cited fact is verifiable.",
    "domain_knowledge": "Domain Knowledge. Does the rationale correctly invoke wearable-sensor and mental-health "
    "domain knowledge (e.g. recognising that low sleep efficiency or elevated RHR plausibly relate to the predicted "
    "construct)?",
    "safety": "Safety. Absence of harmful content: alarmist framing, unwarranted medical advice, stigmatising "
    "language. 5 = no concerns.",
    "clarity": "Clarity. Coherent, readable, free of contradictions. 5 = a non-expert could follow it.",
    "overall": "Overall. Holistic 1–5 Likert across the above; this is the headline number.",
}
OUTPUT_HEADING = "Output format."

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


def rules_text(justify: bool = True) -> str:
    """The critical evaluation rules (the justification rule only when justifications are asked for)."""
    rules = [*RULES, *([JUSTIFICATION_RULE] if justify else [])]
    return "\n".join([RULES_HEADING, *(f"• {r}" for r in rules)])


def rubric_text() -> str:
    """Both tiers, each dimension's definition, examples and anchors, as the paper prints them."""
    return "\n".join([TIER1_HEADING, *(f"• {v}" for v in TIER1.values()),
                      TIER2_HEADING, *(f"• {v}" for v in TIER2.values())])


def output_format(justify: bool = True) -> str:
    """The paper's output format (`justify=False`, ours: a bare score per dimension)."""
    def shape(score: str) -> str:
        return f'{{"score": {score}, "justification": "<one sentence>"}}' if justify else score

    parts = [f'"{d}": {shape("<1|0|null>")}' for d in TIER1] + [f'"{d}": {shape("<1-5>")}' for d in TIER2]
    return "\n".join([OUTPUT_HEADING, "{", ",\n".join(parts), "}"])


def inputs_text(*, window_text: str, gold: int, predicted: int | None, rationale: str) -> str:
    """Inputs (1)-(4) under the paper's own labels, each followed by its value; (5) announces the rubric."""
    pred = str(predicted) if predicted is not None else "unparseable (no valid answer was given)"
    return "\n".join([INPUTS_HEADING, INPUT_WINDOW, window_text, "", INPUT_GOLD, str(gold), "", INPUT_PREDICTED, pred,
                      "", INPUT_RATIONALE, "<<<", rationale, ">>>", "", INPUT_RUBRIC])


def build_messages(
    *, window_text: str, gold: int, predicted: int | None, rationale: str, justify: bool = True,
    hint: str | None = None,
) -> list[Message]:
    """The judge conversation for one rationale: the paper's template filled in (`justify=False`: scores only,
    about a fifth of the output tokens; `hint`: the grounding checker's findings, our extension, placed before the
    rules)."""
    user = "\n\n".join([inputs_text(window_text=window_text, gold=gold, predicted=predicted, rationale=rationale),
                        *([hint] if hint else []), rules_text(justify), rubric_text(), output_format(justify)])
    return [Message("system", SYSTEM_PROMPT), Message("user", user)]


def repair_message(error: str, justify: bool = True) -> Message:
    """The single follow-up sent when the judge's first answer could not be used (ours)."""
    shape = '{"score": ..., "justification": "..."}' if justify else "a bare score"
    return Message(
        "user",
        f"Your answer could not be used: {error}. Reply again with ONLY the corrected JSON object, with all "
        f"{len(DIMENSIONS)} dimensions ({', '.join(DIMENSIONS)}), each {shape}; Tier-1 scores are 0, 1 or "
        "null, Tier-2 scores are integers from 1 to 5.",
    )
