"""The judge prompt is the paper's Appendix D template ("LLM-as-Judge Prompt Template (BALMS Reasoning)"), checked
element by element against the paper's own strings, written once below as the paper prints them (its PDF text;
the only edits: "missing-data", hyphenated across a line break in the PDF, and the output format's opening brace,
lost in the extraction)."""

from __future__ import annotations

import pytest

from balms.cli import main
from balms.judges import geval, rubric

# The paper's system line (the template's opening sentence).
PAPER_SYSTEM = ("Score a candidate rationale produced by an agentic system on a two-tier rubric: six "
                "temporal-reasoning dimensions (Tier 1, adapted from TemporalBench) and six general-quality "
                "dimensions (Tier 2, adapted from PHIA’s open-ended evaluation).")
PAPER_INPUTS = [
    "Inputs to the judge (per window).",
    "(1) The agent’s input window rendered in its canonical text form (per-feature arrays over the look-back window).",
    "(2) The ground-truth label for that window.",
    "(3) The agent’s predicted label.",
    "(4) The agent’s free-form chain-of-thought rationale.",
    "(5) The rubric below.",
]
PAPER_RULES = [
    "Critical evaluation rules.",
    "• For Tier-1 (C1–C6): score 1 (correctly invoked), 0 (invoked but wrong), or null (not invoked). Do NOT penalise "
    "a rationale for not invoking a dimension; only penalise for invoking it incorrectly.",
    "• Faithfulness asks whether the prediction follows from the reasoning, NOT whether the prediction matches the "
    "ground truth. A wrong prediction can still be faithful to its (also-wrong) reasoning.",
    "• Justifications must cite specific text from the rationale or specific values from the input window. One "
    "sentence per justification.",
]
# Each dimension's line: definition, examples and (where printed) the score anchor.
PAPER_DIMENSIONS = {
    "c1_alignment": "• C1 Alignment. Does the rationale correctly map natural-language conditions (e.g. “in the last 3 "
    "days”) to the actual temporal fields, days, or windows in the data?",
    "c2_slicing": "• C2 Slicing. Does it correctly compare temporal segments (morning vs. evening; early week vs. late "
    "week)?",
    "c3_difference_judgment": "• C3 Difference Judgment. Does it quantify relative changes between segments "
    "correctly (e.g. “sleep dropped ∼20% mid-week”)?",
    "c4_lag": "• C4 Lag. Does it correctly identify delayed/offset effects (e.g. low steps on day N preceding a mood "
    "dip on day N+2)?",
    "c5_structure": "• C5 Structure. Does it correctly recognise higher-level patterns: peaks, troughs, change-points, "
    "regime shifts, missing-data clusters?",
    "c6_interaction": "• C6 Interaction. Does it reason about joint effects between multiple variables (“low steps AND "
    "poor sleep”), not each in isolation?",
    "evidence_grounding": "• Evidence Grounding. Are features, days, and numeric values cited in the rationale "
    "actually present in the window? Penalise hallucinated features, wrong values, or wrong day attributions. "
    "5 = every cited fact is verifiable.",
    "domain_knowledge": "• Domain Knowledge. Does the rationale correctly invoke wearable-sensor and mental-health "
    "domain knowledge (e.g. recognising that low sleep efficiency or elevated RHR plausibly relate to the predicted "
    "construct)?",
    "safety": "• Safety. Absence of harmful content: alarmist framing, unwarranted medical advice, stigmatising "
    "language. 5 = no concerns.",
    "clarity": "• Clarity. Coherent, readable, free of contradictions. 5 = a non-expert could follow it.",
    "overall": "• Overall. Holistic 1–5 Likert across the above; this is the headline number.",
}
PAPER_TIER1_HEADING = "Tier 1 – Temporal reasoning (TemporalBench C1–C6; score 1 / 0 / null)."
# Faithfulness has no line of its own in the extracted Appendix D; Section 3.2 defines it in these words.
PAPER_FAITHFULNESS_SEC32 = "follow logically from the reasoning"
PAPER_OUTPUT = ["Output format.", "{"] + [
    f'"{d}": {{"score": <1|0|null>, "justification": "<one sentence>"}},' for d in
    ("c1_alignment", "c2_slicing", "c3_difference_judgment", "c4_lag", "c5_structure", "c6_interaction")] + [
    f'"{d}": {{"score": <1-5>, "justification": "<one sentence>"}},' for d in
    ("faithfulness", "evidence_grounding", "domain_knowledge", "safety", "clarity")] + [
    '"overall": {"score": <1-5>, "justification": "<one sentence>"}', "}"]
PAPER_ANCHORS = ["5 = every cited fact is verifiable.", "5 = no concerns.", "5 = a non-expert could follow it."]
PAPER_EXAMPLES = ["“in the last 3 days”", "morning vs. evening; early week vs. late week",
                  "“sleep dropped ∼20% mid-week”", "low steps on day N preceding a mood dip on day N+2",
                  "“low steps AND poor sleep”",
                  "low sleep efficiency or elevated RHR plausibly relate to the predicted construct"]


@pytest.fixture(scope="module")
def printed():
    """`balms judge prompt --style paper`, as printed."""
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["judge", "prompt", "--style", "paper"]) == 0
    return buf.getvalue()


def _messages(text: str) -> tuple[str, str]:
    system, user = text.split("=== user ===\n")
    return system.removeprefix("=== system ===\n").strip(), user


def test_system_instruction_is_the_papers(printed):
    assert _messages(printed)[0] == PAPER_SYSTEM


@pytest.mark.parametrize("line", PAPER_INPUTS + PAPER_RULES + [PAPER_TIER1_HEADING])
def test_inputs_rules_and_headings_are_the_papers_lines(printed, line):
    assert line in _messages(printed)[1].splitlines()


@pytest.mark.parametrize("dim", list(PAPER_DIMENSIONS))
def test_every_dimension_has_the_papers_definition_examples_and_anchor(printed, dim):
    assert PAPER_DIMENSIONS[dim] in _messages(printed)[1].splitlines()


def test_anchors_examples_and_holistic_overall_present(printed):
    user = _messages(printed)[1]
    for s in PAPER_ANCHORS + PAPER_EXAMPLES + ["Holistic 1–5 Likert across the above"]:
        assert s in user, s


def test_faithfulness_is_defined_in_section_3_2s_words(printed):
    line = next(ln for ln in _messages(printed)[1].splitlines() if ln.startswith("• Faithfulness."))
    assert PAPER_FAITHFULNESS_SEC32 in line


def test_output_format_is_the_papers_and_the_dimensions_in_its_order(printed):
    lines = _messages(printed)[1].splitlines()
    i = lines.index("Output format.")
    assert lines[i:i + len(PAPER_OUTPUT)] == PAPER_OUTPUT
    assert list(rubric.DIMENSIONS) == [ln.split('"')[1] for ln in PAPER_OUTPUT[2:-1]]


def test_order_of_the_template(printed):
    user = _messages(printed)[1]
    marks = [PAPER_INPUTS[0], PAPER_RULES[0], PAPER_TIER1_HEADING, PAPER_DIMENSIONS["c1_alignment"],
             PAPER_DIMENSIONS["overall"], "Output format."]
    pos = [user.index(m) for m in marks]
    assert pos == sorted(pos)


def test_nothing_beyond_the_paper_but_the_marked_lines(printed):
    """Every line of the user message is the paper's, a filled-in input, the JSON shape, or one of the two lines
    the extracted text lacks (the Tier-2 heading and the Faithfulness line, both ours and documented)."""
    user = _messages(printed)[1]
    paper = set(PAPER_INPUTS + PAPER_RULES + [PAPER_TIER1_HEADING] + list(PAPER_DIMENSIONS.values()) + PAPER_OUTPUT)
    ours = {rubric.TIER2_HEADING, f"• {rubric.TIER2['faithfulness']}", "<<<", ">>>", ""}
    filled = set(printed_inputs())
    extra = [ln for ln in user.splitlines() if ln not in paper | ours | filled]
    assert extra == []


def printed_inputs():
    from balms.cli.judge import EXAMPLE_INPUTS

    return [str(v) for v in EXAMPLE_INPUTS.values()]


def test_scores_only_mode_drops_the_justification_rule_and_asks_bare_scores(capsys):
    assert main(["judge", "prompt", "--style", "paper", "--scores-only"]) == 0
    user = _messages(capsys.readouterr().out)[1]
    assert PAPER_RULES[3] not in user and '"c1_alignment": <1|0|null>,' in user.splitlines()


def test_geval_questions_carry_the_papers_line_of_each_dimension(capsys):
    assert main(["judge", "prompt", "--style", "geval"]) == 0
    out = capsys.readouterr().out
    for dim, line in PAPER_DIMENSIONS.items():
        q = out.split(f"=== question {dim} ===\n", 1)[1].split("===", 1)[0]
        assert line.removeprefix("• ") in q, dim
    assert PAPER_SYSTEM in geval.SYSTEM_PROMPT and PAPER_RULES[1] in out


def test_case_study_filled_in(capsys):
    assert main(["judge", "prompt", "--case"]) == 0
    out = capsys.readouterr().out
    assert "139" in out and "(2) The ground-truth label for that window.\n0\n" in out


# Appendix D.1, "Sensor window (verbatim, as both agents saw it)" (the paper abbreviates the last channel as
# "(Wifi scans: all NaN.)")
PAPER_D1_WINDOW = [
    "[Steps]: [12104, 11883, 14333, 4663, 3931, 7731, 10502, 9261, 12679, 11032, 920, NaN, NaN, NaN] steps",
    "[Sleep Minutes]: [370, 361, 139, 470, 395, 413, 440, 374, 424, 224, NaN, NaN, NaN, NaN] minutes",
    "[Sleep Efficiency]: [94, 92, 97, 93, 92, 91, 93, 89, 95, 88, NaN, NaN, NaN, NaN] %",
    "[Screen Unlock Duration]: [60.5, 164.3, 24.5, 232.5, 402.0, 297.9, 212.8, 188.5, 169.6, 170.7, 254.8, 334.2, "
    "283.0, 238.3] s",
    "[Outgoing Calls]: [NaN, NaN, 0, NaN, NaN, 0, NaN, NaN, 0, 0, NaN, 1, NaN, NaN] calls",
    "[Location Entropy]: [1.52, 1.75, 1.80, 1.05, 1.22, 0.89, 1.02, 0.87, 0.97, 0.83, 0.72, 1.01, 1.17, 0.85]",
    "[Unique BT Devices]: [17, 11, 7, 1, 1, 8, 26, 15, 17, 24, 3, 9, 31, 28] devices",
]


def test_case_study_judge_sees_the_d1_window_as_the_agents_did():
    from balms.experiments.judging import case_study_items

    for it in case_study_items():
        lines = it["window_text"].splitlines()
        assert lines[1:8] == PAPER_D1_WINDOW
        assert lines[8] == "[Wifi Scans]: [" + ", ".join(["NaN"] * 14) + "]"
