"""The paper's prompt style: the Health-LLM template of the paper's Appendix D, restated as code.

Blocks, in the order the paper prints them: a one-line purpose; "Task instruction." (the personalised
agent and the target's range AS PRINTED); "User profile." (age, gender, height, maximum heart rate);
"Sensor signals (look-back window)." with one `[Name]: [v1, ..., vN] unit` line per channel, oldest day
first, NaN for missing, no dates; the same-day self-report (`[Mood]: 3 out of 5`); "Question.";
"Output format." with its `Answer: 1` example. The CoT variant (`cot_format`) prescribes no operations:
`printed` (the paper profile) shows the paper's CoT template as printed, its worked `Reasoning:` paragraph and then
the sentence "The user's stress score is 3."; `paper` (default, the demo's committed responses) the same with a
placeholder paragraph; `answer_line` (our earlier reconstruction, kept for the CPU study's committed responses) a
placeholder paragraph and then `Answer: 1`. Zero-shot and CoT share everything else.

The paper prints this for PMData only. What is extrapolated here, and why:
- PMData range: "0 to 5" as printed (stress is 1-5 in the data; the corrected style states 1-5). Other
  datasets: their native range, since the paper prints none for them (GLOBEM 0-3, DiversityOne 1-5).
- GLOBEM channel names, units and decimals follow the paper's GLOBEM case-study window (Appendix D.1),
  including its "s" unit on screen-unlock duration (RAPIDS minutes); other channels use their own label.
- Purpose line: the signal phrase follows the devices shown, "self-reported context" only when a
  same-day self-report is shown (GLOBEM and DiversityOne have none).
- Profile: a field the dataset lacks is NaN, the paper's missing marker; with no field at all (GLOBEM,
  DiversityOne) the block is left out rather than filled with four NaNs.
- Memory agents (the paper prints no RAG/RAPTOR prompt): the same blocks, with the sensor block holding
  the retrieved days (RAG) or records (RAPTOR) and the query, days labelled "Day k" on the look-back
  numbering (day 1 = oldest window day; 0 and below = before the window).
- System message: the paper shows none. We send a content-free generic one (`prompts.PAPER_SYSTEM_PROMPT`)
  because with no system message some chat templates inject their own, which would make prompts differ
  across backends.
"""

from __future__ import annotations

from balms.data.agent_input import SENSOR_HEADER, input_lines
from balms.data.paper_notation import (
    PaperChannel,
    channel_line,
    context_lines,
    day_label,
    day_values,
    format_paper,
    paper_channel,
    profile_block,
    sensor_lines,
)
from balms.data.registry import PromptTarget as PaperTarget
from balms.data.registry import get_dataset
from balms.data.schema import Channel, Window

__all__ = ["SENSOR_HEADER", "PaperChannel", "channel_line", "context_lines", "day_label", "day_values",
           "format_paper", "healthllm_prompt", "paper_channel", "profile_block", "prompt_around", "sensor_lines"]


def paper_target(window: Window) -> PaperTarget:
    """How the template names the window's target: its dataset's declared `prompt`, else from the target's label."""
    t = window.target
    try:
        got = get_dataset(window.sample.dataset).prompt
    except ValueError:  # a window of no registered dataset (a test's, a harness's own samples)
        got = None
    return got or PaperTarget(t.label, t.label[:1].upper() + t.label[1:], t.label)


def printed_range(window: Window) -> tuple[int, int]:
    pt = paper_target(window)
    return pt.printed_range or (window.target.scale_min, window.target.scale_max)


def _signals_phrase(chans: list[Channel]) -> str:
    devices = {c.device for c in chans}
    if devices == {"phone"}:
        return "smartphone-derived behavioral signals"
    if "phone" in devices:
        return "wearable- and smartphone-derived signals"
    return "wearable-derived physiological signals"


def purpose_line(window: Window, chans: list[Channel]) -> str:
    ctx = " and self-reported context" if window.context_channels else ""
    return f"Predict the user's {paper_target(window).purpose} given {_signals_phrase(chans)}{ctx}."


def task_block(window: Window) -> list[str]:
    lo, hi = printed_range(window)
    return ["Task instruction.",
            f"You are a personalized healthcare agent trained to predict {paper_target(window).name} "
            f"which ranges from {lo} to {hi}."]


def question_block(window: Window) -> list[str]:
    return ["Question.", f"What would be the predicted {paper_target(window).question}?"]


# CoT output formats: "printed" = the paper's template as printed, its worked reasoning paragraph and answer sentence
# as the example (the paper profile); "paper" = our placeholder paragraph with the paper's answer sentence (the
# demo's committed responses); "answer_line" = our earlier placeholder and "Answer: 1" (the CPU study's)
COT_FORMATS = ("paper", "answer_line", "printed")
SCORE_SENTENCE_FORMATS = ("paper", "printed")  # the formats that ask for the paper's answer sentence
# the paper's CoT answer sentence and the value its example prints ("The user's stress score is 3.")
PAPER_COT_EXAMPLE_VALUE = 3
# "Health-LLM Prompt Template with Reasoning" (Appendix D): the worked reasoning paragraph, as printed (its PMData
# example, carried to every dataset as the template is; tests compare it with tests/fixtures/paper/)
PAPER_COT_EXAMPLE_REASONING = (
    "The participant's resting heart rate has been relatively stable over the last few days, ranging between "
    "65.6404 and 68.7387 bpm, indicating no significant physiological stress. However, sleep patterns have been "
    "inconsistent, with notably low sleep minutes on day 13 (261 minutes) and day 14 (290 minutes), suggesting "
    "potential fatigue or stress. Additionally, the mood score of 3 out of 5 indicates moderate satisfaction, which "
    "could imply some level of stress or dissatisfaction. Considering these factors, the overall stress level seems "
    "to be moderately elevated but not extremely high.")


def check_cot_format(cot_format: str) -> None:
    if cot_format not in COT_FORMATS:
        raise ValueError(f"unknown cot_format {cot_format!r}; expected one of {COT_FORMATS}")


def score_sentence(window: Window, value: int | str) -> str:
    """The paper's CoT answer sentence for this window's target ("The user's stress score is 3.")."""
    return f"The user's {paper_target(window).question} score is {value}."


# The format example's answer: "paper" prints the paper's "Answer: 1"; "neutral" a placeholder that names no value
# (issue 39: the 1.5B model answered 1, the example's number, on every day of two cells).
FORMAT_EXAMPLES = {"paper": "Answer: 1", "neutral": "Answer: <integer>"}


def check_format_example(name: str) -> str:
    if name not in FORMAT_EXAMPLES:
        raise ValueError(f"unknown format_example {name!r}; expected one of {tuple(FORMAT_EXAMPLES)}")
    return name


def output_block(cot: bool, window: Window | None = None, cot_format: str = "paper",
                 format_example: str = "paper") -> list[str]:
    check_cot_format(cot_format)
    answer = FORMAT_EXAMPLES[check_format_example(format_example)]
    lines = ["Output format.", "For example, the answer should be in the following format:"]
    if not cot:
        return [*lines, answer]
    lines.append("Reasoning: " + (PAPER_COT_EXAMPLE_REASONING if cot_format == "printed"
                                  else "<your reasoning in one paragraph>"))
    if cot_format == "answer_line" or window is None:
        return [*lines, answer]
    return [*lines, score_sentence(window, PAPER_COT_EXAMPLE_VALUE)]


def prompt_around(window: Window, chans: list[Channel], lines: list[str], *, cot: bool,
                  cot_format: str = "paper", format_example: str = "paper") -> str:
    """The template around a prompt's data lines (`balms.data.agent_input.input_lines`: profile, sensor lines,
    same-day self-report): purpose, task instruction, then the lines, question and output format."""
    return "\n".join([purpose_line(window, chans), *task_block(window), *lines, *question_block(window),
                      *output_block(cot, window, cot_format, format_example)])


def healthllm_prompt(window: Window, chans: list[Channel], *, cot: bool, cot_format: str = "paper",
                     format_example: str = "paper", sensors: bool = True) -> str:
    """Appendix D's Health-LLM prompt for one window (`sensors` False: no sensor line, issue 39)."""
    return prompt_around(window, chans, input_lines(window, {"style": "paper", "sensors": sensors}), cot=cot,
                         cot_format=cot_format, format_example=format_example)
