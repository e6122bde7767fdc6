"""Token budgets per model: reasoning models (registry `is_reasoning`) think inside the same max_tokens.

A DeepSeek-R1 distill writes a `<think>` trace of hundreds to thousands of tokens before its answer; at the
budget of a direct model (32 tokens zero-shot, 1,024 CoT) it is cut mid-thought and never answers (an unclosed
`<think>` parses as no answer: balms.models.reasoning). So such models get the config's `reasoning_*` budgets.

Rule (`budget_for(model, role, cfg)`), `cfg` being any object with the ExperimentConfig fields:

| role | direct model | reasoning model |
|---|---|---|
| "zs" | zs_max_tokens | reasoning_zs_max_tokens |
| "cot" | cot_max_tokens | reasoning_cot_max_tokens |
| "phia_step" | phia_step_tokens | reasoning_phia_step_tokens |
| "raptor_summary" | raptor_summary_tokens | max(raptor_summary_tokens, reasoning_zs_max_tokens) |
| "judge" | judge_max_tokens | judge_max_tokens (the judge is not a reasoning model in the paper) |
"""

from __future__ import annotations

ROLES = ("zs", "cot", "phia_step", "raptor_summary", "judge")


def budget_for(model: str, role: str, cfg) -> int:
    """max_tokens for one model call of `role` by `model` (a registry or served name) under `cfg`."""
    from balms.models.registry import is_reasoning

    if role not in ROLES:
        raise ValueError(f"unknown budget role {role!r}; known: {', '.join(ROLES)}")
    reasoning = is_reasoning(model)
    if role == "zs":
        return int(cfg.reasoning_zs_max_tokens if reasoning else cfg.zs_max_tokens)
    if role == "cot":
        return int(cfg.reasoning_cot_max_tokens if reasoning else cfg.cot_max_tokens)
    if role == "phia_step":
        return int(cfg.reasoning_phia_step_tokens if reasoning else cfg.phia_step_tokens)
    if role == "raptor_summary":
        base = int(cfg.raptor_summary_tokens)
        return max(base, int(cfg.reasoning_zs_max_tokens)) if reasoning else base
    return int(cfg.judge_max_tokens)
