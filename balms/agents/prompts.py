"""Every prompt the four agents send in the "corrected" style, in our words, following METHOD.md.
The paper's own template (the default "paper" style of Health-LLM, RAG and RAPTOR) is in
`balms.agents.paper_prompts`; `balms.data.channels` says which channels each style shows.

All numbers come from `balms.data.render` (the canonical window text), so the judge and the grounding
checker see exactly what the agent saw. The system message is always set explicitly: embedded chat
templates otherwise inject their own default ("You are Qwen, ..."), and prompts must be identical on
every backend.

Scale note: the paper's Health-LLM example says stress "ranges from 0 to 5" while PMData stress is
1-5. We state the dataset's real scale (Target.scale_min..scale_max) and do not copy the inconsistency.
"""

from __future__ import annotations

import pandas as pd

from balms.data import render
from balms.data.agent_input import input_lines
from balms.data.schema import Target, Window
from balms.models.base import Message

SYSTEM_PROMPT = (
    "You are a careful analyst of personal sensing data. You estimate a person's self-reported "
    "well-being from their wearable and phone data, and you always finish with a final line of the "
    "form 'Answer: <int>' holding one integer on the requested scale."
)

# The paper prints no system message; this content-free one only stops chat templates from injecting
# their own (e.g. Qwen's), so paper-style prompts stay identical on every backend.
PAPER_SYSTEM_PROMPT = "You are a helpful assistant."

# Bump when any prompt text changes (recorded in PredictionRecord.options as prompt_version), one per
# style so records and response caches tell them apart.
PROMPT_VERSION = "v6"  # corrected style. v6: RAG shows the retrieved days + the query day only
PAPER_PROMPT_VERSION = "paper-v1"  # Appendix D template (balms.agents.paper_prompts)
PHIA_PROMPT_VERSION = "v5"  # PHIA's prompts (unchanged by the styles)


def prompt_version(style: str) -> str:
    return PAPER_PROMPT_VERSION if style == "paper" else PROMPT_VERSION


def system_prompt(style: str) -> str:
    return PAPER_SYSTEM_PROMPT if style == "paper" else SYSTEM_PROMPT

# Decoding budgets (parameters, recorded in PredictionRecord.options by the agents): a bare agent's defaults, and the
# configuration's (balms.experiments.config reads these), so a bare agent and a configured cell agree.
ZERO_SHOT_MAX_TOKENS = 16
COT_MAX_TOKENS = 256
SUMMARY_MAX_TOKENS = 48
PHIA_STEP_MAX_TOKENS = 160
# Forced answer (our budget technique, off in the paper profile): when a CoT reply ends without an answer statement
# (cut off by its token limit, or finished without one, e.g. "... so the stress level is 1."), the reasoning is kept
# as the rationale and the model is asked for the answer alone, as PHIA's harness forces a final answer when its step
# budget runs out. A reply WITH an answer that fails the parser (out of range, a range, not an integer) is never
# asked again: that failure stays visible.
FORCE_ANSWER = ("Your reasoning was cut off by the length limit. Stop reasoning now and reply with your final "
                "answer only, in the format 'Answer: <integer>'.")
FORCE_ANSWER_MISSING = ("Your reply did not end with the answer line. Reply with your final answer only, in the "
                        "format 'Answer: <integer>'.")
FORCED_ANSWER_MAX_TOKENS = 12


def scale_phrase(target: Target) -> str:
    desc = f" ({target.description})" if target.description else ""
    return f"an integer from {target.scale_min} to {target.scale_max}{desc}"


def task_line(window: Window) -> str:
    s, t = window.sample, window.target
    day = pd.Timestamp(s.target_date)
    return (
        f"Task: estimate the {t.label} this person self-reported on the target day "
        f"{day.date().isoformat()} ({day.day_name()}), on the scale {scale_phrase(t)}."
    )


def question_line(window: Window) -> str:
    t = window.target
    return (
        f"Question: what {t.label} did this person report on the target day? "
        f"Give {scale_phrase(t)}."
    )


def answer_format(target: Target, cot: bool) -> str:
    if cot:
        return (
            "Think step by step before answering. Cite the channels, values and days you use "
            "(for example 'sleep on day 12 was 310 minutes, below the earlier days'), compare recent "
            "days with earlier ones, and say how each observation moves your estimate. Then end with "
            f"a final line 'Answer: <int>' where <int> is an integer from {target.scale_min} to "
            f"{target.scale_max}."
        )
    return (
        f"Reply with one line only, 'Answer: <int>', where <int> is an integer from "
        f"{target.scale_min} to {target.scale_max}. Do not explain."
    )


def prompt_around(window: Window, lines: list[str], *, cot: bool) -> str:
    """Our prompt around a prompt's data lines (`balms.data.agent_input.input_lines`: profile, sensor lines, same-day
    context): task, the lines, question, answer format (Health-LLM, RAG and RAPTOR in the corrected style)."""
    return "\n".join([task_line(window), *lines, question_line(window), answer_format(window.target, cot)])


def healthllm_prompt(window: Window, *, cot: bool) -> str:
    """Health-LLM user prompt: task, profile, one per-day array per channel, context, question, format."""
    return prompt_around(window, input_lines(window, {"style": "corrected"}), cot=cot)


def summary_prompt(day: str, records: str, subday_unit: str) -> str:
    """RAPTOR internal node: summarise one day's leaves, given as one compact table (cached per user,
    day, model)."""
    unit = subday_unit or "record"
    return (
        f"Below are the sensing records of one person for {day}, one row per {unit} (blank = no value)."
        f"\n{records}\n"
        "Summarise this day in at most three sentences: overall activity, sleep and heart rate, "
        "and anything unusual (peaks, gaps, missing data). Keep the key numbers with their units. "
        "Do not guess the person's mood or stress."
    )


SUMMARY_SYSTEM_PROMPT = (
    "You summarise a person's daily sensing records faithfully and briefly. You never invent numbers."
)


# ---------------------------------------------------------------- PHIA (ReAct)

# Stop when the model starts writing its own observation on a new line (after its code block). Not at
# the very start of a reply: small models often open their turn by echoing "[Observe]".
# Code models also like to invent a "```output" block after their code: stop there too.
PHIA_STOP = ("\n[Observe]", "\n[Observation]", "\nObservation:", "\n[Observe:", "\n```output")


# PHIA's code fence (ours: the paper prints none of PHIA's prompts, only a trace whose [Act] blocks are marked
# `tool_code`): "python" (default, every committed response) or "tool_code" (the trace's label, an option)
PHIA_CODE_FENCES = ("python", "tool_code")


def check_code_fence(fence: str) -> str:
    if fence not in PHIA_CODE_FENCES:
        raise ValueError(f"PHIA code_fence must be one of {PHIA_CODE_FENCES}, got {fence!r}")
    return fence


def _fenced(text: str, fence: str) -> str:
    """A prompt text written with ```python fences, in the given fence."""
    return text.replace("```python", "```" + check_code_fence(fence))


def phia_system_prompt(scale_min: int, scale_max: int, primer: str = "none", fence: str = "python") -> str:
    example = _fenced(PHIA_EXAMPLE, fence) if check_primer(primer) == "example" else ""
    return _fenced(
        "You are a careful analyst of personal sensing data who answers by writing Python. "
        "You work in steps. Each step has this form:\n"
        "[Thought] what you want to find out next\n"
        "[Act]\n```python\n# code that PRINTS what you need\n```\n"
        "Then STOP and wait: the system runs your code and replies with '[Observe]' and the output. "
        "Never write the [Observe] part yourself.\n"
        "When you know enough, finish instead with:\n"
        "[Finish] your reasoning, citing the values and days you computed\n"
        f"Answer: <int>   (one integer from {scale_min} to {scale_max})", fence
    ) + example


# PHIA code primers (ours; "none", the paper profile's, sends the prompt above unchanged). Small CPU models given
# that prompt answer the question in prose and never open a code block (the demo's PHIA wrote no code at all), so
# nothing of the sandbox, the executor contracts or F1/F2/F4/F5 is exercised. A primer is recorded in every
# record's options as "primer"; its effect (code-block rate with vs without) is measured by bench/bench_roles.py.
# - "code_first": the prompt's last line asks for a first step that is a [Thought] and an [Act] with one python
#   block computing something from the DataFrames, before any answer.
# - "example": a worked first step on made-up data is appended to the system prompt (few-shot); small models
#   tend to copy it verbatim (bench_roles reports how often).
PHIA_PRIMERS = ("none", "code_first", "example")
PHIA_CODE_FIRST = ("Begin with your first [Thought], then [Act] with one ```python block that computes something "
                   "from the DataFrames and prints it. Do not give an answer before you have seen an [Observe].")
PHIA_EXAMPLE = (
    "\n\nExample of a first step (another person, another question):\n"
    "[Thought] I compare the last 7 days of steps with the days before them.\n"
    "[Act]\n```python\nd = daily_df.set_index('date')\n"
    "print(d['steps'].tail(7).mean(), d['steps'].iloc[:-7].mean())\n```"
)
# Code-fence stop (ours, PhiaAgent(fence_stop=True)): generation ends at the first closing fence. The conversation
# keeps only the reply up to its first code block anyway (phia.extract_code), so this only saves the tokens a small
# model spends after its code (invented outputs, repeated [Finish] lines) up to the step budget.
PHIA_FENCE_STOP = "\n```\n"


def check_primer(primer: str) -> str:
    if primer not in PHIA_PRIMERS:
        raise ValueError(f"PHIA primer must be one of {PHIA_PRIMERS}, got {primer!r}")
    return primer


def phia_frames_description(frames: dict[str, pd.DataFrame], subday_unit: str,
                            executor: str) -> str:
    lines = ["These pandas DataFrames are already loaded as Python variables (pandas is `pd`, numpy is "
             "`np`); there are no files to read:"]
    for name, df in frames.items():
        cols = ", ".join(map(str, df.columns))
        grain = "one row per day" if name.startswith("daily") else f"one row per {subday_unit or 'sub-day slot'}"
        lines.append(f"- `{name}`: {grain}, {len(df)} rows, columns: {cols}")
    if executor == "faithful":
        # As in the original PHIA setup, the prompt does NOT warn that each block runs in a fresh scope:
        # the lost-state failure (F2) is part of what the faithful executor reproduces.
        lines.append("Print what you need to see.")
    else:
        lines.append("Variables persist between blocks, and the value of a block's last expression is "
                     "shown as in a notebook.")
    return "\n".join(lines)


def phia_span_line(window: Window, frame_span: str = "record") -> str:
    """What the DataFrames hold, as the frames were built (never "full record" for look-back frames)."""
    s = window.sample
    if frame_span == "lookback":
        return (f"The DataFrames hold this person's look-back window: the {s.lookback} days "
                f"{s.window_start.isoformat()} to {s.window_end.isoformat()}, ending the day before the target day.")
    return (f"The DataFrames hold this person's full record up to {s.window_end.isoformat()}, the day "
            f"before the target day; the most recent {s.lookback} days ({s.window_start.isoformat()} to "
            f"{s.window_end.isoformat()}) are the look-back window of interest.")


def phia_user_prompt(window: Window, frames: dict[str, pd.DataFrame], *, executor: str,
                     context: bool, schema: str | None, cot: bool, primer: str = "none",
                     frame_span: str = "record", fence: str = "python") -> str:
    parts = [
        task_line(window),
        render.render_profile(window.profile),
        phia_span_line(window, frame_span),
        phia_frames_description(frames, window.subday_unit, executor),
    ]
    if schema:
        parts.append(schema)
    ctx = render.render_context(window) if context else ""
    parts += [*([ctx] if ctx else []), question_line(window)]
    if cot:
        parts.append("Reason step by step in your [Thought]s and your [Finish], citing the values you "
                     "computed and the days they come from.")
    parts.append(_fenced(PHIA_CODE_FIRST, fence) if check_primer(primer) == "code_first"
                 else "Begin with your first [Thought].")
    return "\n".join(parts)


def phia_observation(text: str) -> str:
    return f"[Observe]\n{text}"


def phia_nudge(scale_min: int, scale_max: int, fence: str = "python") -> str:
    return _fenced("Your reply had neither a ```python code block to run nor a valid final line. Either write "
                   "[Act] with one ```python block, or finish with [Finish] and "
                   f"'Answer: <int>' (an integer from {scale_min} to {scale_max}).", fence)


def phia_force_finish(scale_min: int, scale_max: int) -> str:
    return ("You have used all your steps. Do not write more code. Give your final estimate now: one "
            "or two sentences of reasoning based only on what you observed, then a final line "
            f"'Answer: <int>' with an integer from {scale_min} to {scale_max}.")


def messages(system: str, user: str) -> list[Message]:
    return [Message("system", system), Message("user", user)]
