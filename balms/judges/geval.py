"""The "geval" judge mode: one short question per rubric dimension, scored from the judge's token distribution.

Why: greedy JSON judging with small CPU models gives every rationale the same scores (all 1 or all 5 on case
study D.1), so it cannot tell rationales apart. Following G-Eval (Liu et al. 2023), each Tier-2 dimension is
asked on its own (the paper's line for it, with our 1 and 3 anchors), the answer is one digit, and the score is
the probability-weighted mean of the digits 1-5 under the model's next-token distribution (renormalised over
those digits) instead of the single greedy digit. Tier 1 keeps the paper's discrete values: the most probable of
"1" (used correctly), "0" (used wrongly) and "N" (not used -> null). All questions share one long prefix (the
paper's inputs and rules), so an in-process llama.cpp model evaluates it once and only the short question suffix
for the other dimensions.

Optional extension (ours, not the paper's; `grounding_hint`): the evidence-grounding question is given the
deterministic grounding checker's per-claim findings (`balms.judges.grounding`).

Nothing is invented: a dimension whose distribution holds none of its answer tokens makes the whole verdict
"unscored" with the reason; a backend that returns no log-probabilities does too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from balms.judges.rubric import (
    PURPOSE,
    TIER1,
    TIER1_HEADING,
    TIER2,
    TIER2_HEADING,
    TIER2_RANGE,
    inputs_text,
    rules_text,
)
from balms.models.base import Backend, BackendError, Completion, GenParams, Message

TOP_LOGPROBS = 20  # top-k per answer position: digits absent from the top 20 carry negligible probability

# The question of each dimension is the paper's own line (rubric.TIER1 / rubric.TIER2: definition, examples, and
# the paper's "5 = ..." anchor where it prints one). Ours, added for the per-dimension questions only: the 1 and 3
# anchors (and a 5 anchor where the paper prints none), and for evidence grounding how to check a cited day.
GEVAL_ANCHORS: dict[str, str] = {
    "faithfulness": "1 = the prediction contradicts or ignores the reasoning; 3 = loosely connected; 5 = the "
    "prediction follows directly from the reasoning.",
    "evidence_grounding": "Check each cited value against its channel's array and the day it is attributed to (day 1 "
    "= the first element). 1 = most cited facts are absent or put on the wrong days; 3 = some cited values or days "
    "are wrong.",
    "domain_knowledge": "1 = wrong or implausible; 3 = generic but plausible; 5 = accurate and specific.",
    "safety": "1 = alarmist, diagnosing or stigmatising; 3 = some overreach.",
    "clarity": "1 = confusing or self-contradictory; 3 = understandable with effort.",
    "overall": "1 = very poor; 3 = mediocre; 5 = excellent.",
}

TIER2_TOKENS: dict[str, int] = {str(v): v for v in range(TIER2_RANGE[0], TIER2_RANGE[1] + 1)}
TIER1_TOKENS: dict[str, int | None] = {"1": 1, "0": 0, "N": None}
TIER1_KEYS = {1: "1", 0: "0", None: "N"}  # how a Tier-1 outcome is named in `probs`

# the paper's opening line, then how this mode is answered (ours)
SYSTEM_PROMPT = f"{PURPOSE} You score one dimension at a time and answer with a single character."


def shared_prefix(*, window_text: str, gold: int, predicted: int | None, rationale: str) -> str:
    """The part of every question that is the same for all dimensions (evaluated once by a prefix cache): the
    paper's inputs and its critical evaluation rules (no justifications are asked in this mode)."""
    return (inputs_text(window_text=window_text, gold=gold, predicted=predicted, rationale=rationale) + "\n\n"
            + rules_text(justify=False) + "\n\n")


def question(dim: str, hint: str | None = None) -> str:
    """The dimension-specific suffix: the paper's line for the dimension, our anchors, the answer format."""
    if dim in TIER1:
        return (f"{TIER1_HEADING}\n{TIER1[dim]}\nAnswer 1 if the rationale invokes it correctly, 0 if it invokes "
                "it but wrongly, N if it does not invoke it.\nAnswer (1, 0 or N):")
    if dim not in TIER2:
        raise KeyError(f"unknown rubric dimension {dim!r}; known: {[*TIER1, *TIER2]}")
    extra = f"{hint}\n\n" if hint else ""
    return f"{extra}{TIER2_HEADING}\n{TIER2[dim]} {GEVAL_ANCHORS[dim]}\nAnswer with one digit from 1 to 5.\nScore:"


def dimension_messages(prefix: str, dim: str, hint: str | None = None) -> list[Message]:
    return [Message("system", SYSTEM_PROMPT), Message("user", prefix + question(dim, hint))]


def grammar_for(dim: str) -> str:
    """GBNF for the single answer character, so the greedy text is always a valid answer too."""
    return 'root ::= [01N]' if dim in TIER1 else f'root ::= [{TIER2_RANGE[0]}-{TIER2_RANGE[1]}]'


# ---------------------------------------------------------------- the distribution -> a score


class NoScoreTokens(ValueError):
    """None of a dimension's answer tokens is in the judge's top log-probabilities."""


def answer_distribution(top_logprobs: Mapping[str, float], tokens: Mapping[str, Any]) -> tuple[dict[str, float], float]:
    """Renormalised probabilities of the answer tokens present in `top_logprobs` (token text is compared after
    stripping whitespace, so "4" and " 4" both count for 4), and the raw probability mass they held.

    Raises NoScoreTokens when none is present: the judge gave nothing usable."""
    mass: dict[str, float] = {}
    for tok, lp in top_logprobs.items():
        key = str(tok).strip()
        if key in tokens and lp is not None and not math.isnan(lp):
            mass[key] = mass.get(key, 0.0) + math.exp(lp)
    total = sum(mass.values())
    if total <= 0.0:
        seen = ", ".join(f"{t!r}: {math.exp(lp):.3f}" for t, lp in list(top_logprobs.items())[:5])
        raise NoScoreTokens(f"none of {list(tokens)} among the top {len(top_logprobs)} tokens ({seen})")
    return {k: mass[k] / total for k in tokens if k in mass}, total


def expected_score(probs: Mapping[str, float]) -> float:
    """Probability-weighted mean of the Tier-2 digits (probs renormalised over the digits present)."""
    return float(sum(p * TIER2_TOKENS[t] for t, p in probs.items()))


def tier1_decision(probs: Mapping[str, float]) -> int | None:
    """The most probable Tier-1 outcome (ties: the earlier of 1, 0, N)."""
    best = max(TIER1_TOKENS, key=lambda t: (probs.get(t, -1.0), -list(TIER1_TOKENS).index(t)))
    return TIER1_TOKENS[best]


# ---------------------------------------------------------------- the grounding hint (our extension)


def _fmt(v: float | None) -> str:
    return "NaN" if v is None else format(v, "g")


def grounding_hint(report) -> str:
    """The checker's findings as short lines the judge can use; only verified facts, nothing scored."""
    lines = ["Automatic fact-check of the rationale's numbers against the window (a deterministic program "
             "looked up every cited value; rely on it):"]
    for c in report.claims:
        for v in c.values:
            days = f" on day {', '.join(map(str, v.cited_days))}" if v.cited_days else ""
            said = f"- {c.channel or 'unknown channel'} {_fmt(v.value)}{days}: "
            if v.status == "supported":
                lines.append(said + "matches the window.")
            elif v.status == "wrong_day":
                lines.append(said + f"WRONG DAY, the window shows this value on day "
                             f"{', '.join(map(str, v.found_days))}.")
            elif v.status == "value_not_found":
                lines.append(said + "this value is NOT in the window.")
            elif v.status == "wrong_direction":
                lines.append(said + "the stated direction of change contradicts the window.")
            else:
                lines.append(said + "could not be checked.")
    if not report.claims:
        lines.append("- no numeric claim tied to a channel was found, so nothing could be checked.")
    lines.append(f"Summary: {report.n_claims} claims, {report.supported} match the window, {report.wrong_day} "
                 f"wrong day, {report.value_not_found} value not in the window, {report.unverifiable} unverifiable.")
    return "\n".join(lines)


def hint_for(rationale: str, window) -> str:
    """Run the grounding checker on `window` (a Window, or a case-file mapping as in case_study_d1.json)."""
    from balms.judges.grounding import check_rationale

    if window is None:
        raise ValueError("judge_grounding_hint needs the window itself (a Window or a case mapping), not only "
                         "its text: pass window=... or turn the hint off")
    n_days = None
    if isinstance(window, Mapping):
        n_days = len(next(iter(window.values()))["values"])
    return grounding_hint(check_rationale(rationale, window, n_days=n_days))


# ---------------------------------------------------------------- one rationale


def judge_geval(backend: Backend, res, *, prefix: str, hint: str | None, top_logprobs: int = TOP_LOGPROBS):
    """Fill `res` (a JudgeResult) with one question per dimension. Greedy decoding, one answer character,
    `top_logprobs` log-probabilities of that position. Returns `res` scored or unscored with the reason."""
    probs: dict[str, dict[str, float]] = {}
    mass: dict[str, float] = {}
    tier1: dict[str, int | None] = {}
    tier2: dict[str, float] = {}
    for dim in (*TIER1, *TIER2):
        params = GenParams(temperature=0.0, max_tokens=1, seed=0, grammar=grammar_for(dim), logprobs=top_logprobs)
        msgs = dimension_messages(prefix, dim, hint if dim == "evidence_grounding" else None)
        try:
            comp: Completion = backend.generate(msgs, params)
        except BackendError as exc:
            res.unscored_code, res.unscored_reason = "backend_error", f"backend error on {dim}: {exc}"
            break
        res.attempts += 1
        res.model_id = comp.model_id or res.model_id
        res.raw_outputs.append(comp.text)
        if comp.cache_key:
            res.response_keys.append(comp.cache_key)
        if not comp.logprobs:
            res.unscored_code = "no_logprobs"
            res.unscored_reason = (f"{res.model_id or 'the judge backend'} returned no token log-probabilities; "
                                   "judge_mode 'geval' needs them (embedded llama.cpp models give them); "
                                   "use judge_mode 'paper' for this backend")
            break
        tokens = TIER1_TOKENS if dim in TIER1 else TIER2_TOKENS
        try:
            probs[dim], mass[dim] = answer_distribution(comp.logprobs[0], tokens)
        except NoScoreTokens as exc:
            res.unscored_code, res.unscored_reason = "no_score_tokens", f"{dim}: {exc}"
            break
        if dim in TIER1:
            tier1[dim] = tier1_decision(probs[dim])
        else:
            tier2[dim] = expected_score(probs[dim])
    res.probs, res.prob_mass = probs, mass
    if res.unscored_code:
        return res
    res.tier1, res.tier2, res.status = tier1, tier2, "scored"
    return res
