"""The paper style against the paper: p01's prompt (target 2019-11-15, look-back 14) must equal the worked
example of Appendix D digit for digit, and the corrected style must differ exactly where its recipe does.

The expected lines below are the one place the paper's printed numbers are quoted (as test fixtures).
"""

from __future__ import annotations

import datetime as dt
import json

import pytest

from balms.agents import paper_prompts, prompts
from balms.agents.registry import make_agent

# Appendix D, "Health-LLM Prompt Template (Stress Prediction)", as printed (its resting-HR line is wrapped
# in the PDF; joined here).
PAPER_P01_SENSOR_LINES = [
    "[Steps]: [4664, 3035, NaN, 1284, 4966, NaN, NaN, 2094, 4185, 4698, 3384, 867, NaN, 7742] steps",
    "[Burned Calories]: [494, 354, NaN, 145, 517, NaN, NaN, 252, 454, 470, 339, 104, NaN, 1120] calories",
    "[Resting Heart Rate]: [53.7411, 52.8815, 53.222, 54.3111, 52.2591, 54.2032, 53.09, 53.3421, 53.0407, "
    "52.4206, 52.5101, 52.1151, 51.8893, 51.9333] beats/min",
    "[SleepMinutes]: [NaN, 430, 821, NaN, 362, 1096, 392, NaN, 391, 422, 779, NaN, 361, 367] minutes",
]
PAPER_P01_MOOD_LINE = "[Mood]: 3 out of 5"
# "Health-LLM Prompt Template with Reasoning": the reasoning paragraph ends with this answer sentence
PAPER_COT_ANSWER_SENTENCE = "The user's stress score is 3."
# The template's blocks with the slots ({Stress}, {0}, {5}, {48}, {male}, {195}, {182}) as printed.
PAPER_P01_PROMPT = "\n".join([
    "Predict the user's stress level given wearable-derived physiological signals and self-reported context.",
    "Task instruction.",
    "You are a personalized healthcare agent trained to predict Stress which ranges from 0 to 5.",
    "User profile.",
    "The user is a 48 years old male with 195 height with a measured maximum heart rate of 182 bpm.",
    "Sensor signals (look-back window).",
    *PAPER_P01_SENSOR_LINES,
    PAPER_P01_MOOD_LINE,
    "Question.",
    "What would be the predicted stress?",
    "Output format.",
    "For example, the answer should be in the following format:",
    "Answer: 1",
])


@pytest.fixture(scope="module")
def p01(pmdata_dir):
    from balms.data.pmdata import load_pmdata
    from balms.data.samples import build_samples

    tables = load_pmdata(pmdata_dir)
    ss = build_samples(tables, lookback=14)
    sample = next(s for s in ss.samples if s.user == "p01" and s.target_date == dt.date(2019, 11, 15))
    return tables, sample


def _user(tables, sample, **opts) -> str:
    msgs = make_agent("healthllm", **opts).first_prompt(sample, tables)
    assert [m.role for m in msgs] == ["system", "user"]
    return msgs[1].content


def test_p01_sensor_and_mood_lines_equal_the_paper(p01):
    tables, sample = p01
    lines = _user(tables, sample, style="paper").split("\n")
    assert lines[6:10] == PAPER_P01_SENSOR_LINES
    assert lines[10] == PAPER_P01_MOOD_LINE


def test_p01_whole_paper_prompt_is_the_printed_template(p01):
    tables, sample = p01
    assert _user(tables, sample) == PAPER_P01_PROMPT  # the default style is the paper's
    # CoT, as the paper's "Health-LLM Prompt Template with Reasoning" prints its answer: a Reasoning paragraph,
    # then "The user's stress score is 3."
    cot = _user(tables, sample, cot=True)
    assert cot == PAPER_P01_PROMPT.replace(
        "\nAnswer: 1", "\nReasoning: <your reasoning in one paragraph>\n" + PAPER_COT_ANSWER_SENTENCE)
    # our earlier reconstruction, a named option (the CPU study's committed CoT prompts)
    old = _user(tables, sample, cot=True, cot_format="answer_line")
    assert old == PAPER_P01_PROMPT.replace("\nAnswer: 1", "\nReasoning: <your reasoning in one paragraph>\nAnswer: 1")
    with pytest.raises(ValueError, match="unknown cot_format 'json'"):
        make_agent("healthllm", cot=True, cot_format="json")


def test_paper_cot_answer_sentence_parses_only_where_asked(p01):
    from balms.agents.parsing import parse_answer

    reply = "Reasoning: sleep fell on day 13.\n\nThe user's stress score is 4."
    got = parse_answer(reply, 1, 5, score_sentence=True)
    assert (got.value, got.rationale) == (4, "Reasoning: sleep fell on day 13.")
    assert parse_answer(reply, 1, 5).value is None  # other prompts' replies parse as before
    assert parse_answer("The user's PHQ-4 anxiety score is 2. Answer: 1", 0, 3, score_sentence=True).value == 1


def test_prompt_help_states_the_agents_context_window_defaults(capsys):
    from balms.agents.rag import RAGAgent
    from balms.agents.raptor import RaptorAgent
    from balms.cli import main
    from balms.cli.prompt import context_window_defaults

    with pytest.raises(SystemExit):
        main(["prompt", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    want = {False: "no", True: "yes"}
    rag, raptor = want[RAGAgent.context_window], want[RaptorAgent.context_window]
    assert context_window_defaults() == f"rag {rag}, raptor {raptor}"
    assert f"default: {context_window_defaults()}" in out and "raptor no" in out


def test_corrected_style_differs_where_its_recipe_does(p01):
    """Same window: steps and calories identical, resting HR the same values at 1 decimal, sleep differs on
    13 of 14 days (the paper sums time in bed by log start; corrected = minutes asleep of that night)."""
    tables, sample = p01
    user = _user(tables, sample, style="corrected")
    rows = {line.split(":")[0][2:]: line.split(": [")[1].rstrip("]").split(", ")
            for line in user.split("\n") if line.startswith("- ")}
    paper = {line.split("]:")[0][1:]: line.split(": [")[1].split("]")[0].split(", ") for line in PAPER_P01_SENSOR_LINES}
    assert rows["Steps (steps)"] == paper["Steps"]
    assert rows["Calories burned (kcal)"] == paper["Burned Calories"]
    hr = [round(float(v), 1) for v in paper["Resting Heart Rate"]]
    assert [float(v) for v in rows["Resting heart rate (bpm)"]] == hr
    pairs = zip(rows["Sleep minutes (minutes)"], paper["SleepMinutes"], strict=True)
    diff = [i + 1 for i, (a, b) in enumerate(pairs) if a != b]
    assert len(diff) == 13 and diff == list(range(2, 15))  # day 1 is NaN in both
    assert "an integer from 1 to 5" in user and "0 to 5" not in user


def test_balms_prompt_cli_prints_the_agent_messages(p01, pmdata_dir, capsys):
    from balms.cli import main

    tables, sample = p01
    argv = ["prompt", "--dataset", "pmdata", "--user", "p01", "--target", "2019-11-15", "--style", "paper",
            "--lookback", "14", "--raw", str(pmdata_dir)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out == f"=== system ===\n{prompts.PAPER_SYSTEM_PROMPT}\n=== user ===\n{PAPER_P01_PROMPT}\n"
    assert main([*argv[:-2], "--style", "corrected", "--cot", "--json", "--raw", str(pmdata_dir)]) == 0
    got = json.loads(capsys.readouterr().out)
    exp = make_agent("healthllm", style="corrected", cot=True).first_prompt(sample, tables)
    assert [m["content"] for m in got["messages"]] == [m.content for m in exp]
    assert got["options"]["style"] == "corrected" and got["options"]["prompt_version"] == prompts.PROMPT_VERSION


def test_prompt_preview_comes_from_the_systems_spec(pmdata_dir, capsys, monkeypatch):
    """`balms prompt` reads what to show from the system's spec, not its name: a system registered with a preview
    shows the preview's messages and notes (and gets `--model` when its spec says so); a spec without
    `preview_model` refuses `--model`, and an agent without a `context_window` option refuses `--context-window`."""
    import dataclasses

    from balms.agents import registry
    from balms.cli import main

    seen = []

    def preview(agent, sample, tables, model):
        seen.append(model)
        return prompts.messages("S", f"U {sample.user}"), ["from the spec"]

    spec = dataclasses.replace(registry.get_system("healthllm"), name="previewed", preview=preview,
                               preview_model=True)
    monkeypatch.setitem(registry._SYSTEMS, "previewed", spec)
    argv = ["prompt", "--dataset", "pmdata", "--user", "p01", "--target", "2019-11-15", "--raw", str(pmdata_dir)]
    assert main([*argv, "--system", "previewed", "--model", "any-model", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert [m["content"] for m in got["messages"]] == ["S", "U p01"] and "from the spec" in got["info"]
    assert seen == ["any-model"]
    with pytest.raises(SystemExit, match="--model is only needed for raptor, previewed; healthllm calls no model"):
        main([*argv, "--system", "healthllm", "--model", "any-model"])
    with pytest.raises(SystemExit, match="--context-window applies to rag and raptor only"):
        main([*argv, "--system", "previewed", "--context-window", "yes"])


def test_paper_number_formats():
    """PMData rounds and drops trailing zeros (53.222); GLOBEM's case study prints fixed decimals (1.80, 402.0)."""
    pm = paper_prompts.PaperChannel("Resting Heart Rate", "beats/min", 4)
    assert [paper_prompts.format_paper(v, pm) for v in (53.22202396392822, 53.09000301361084, float("nan"))] == [
        "53.222", "53.09", "NaN"]
    gl = paper_prompts.PaperChannel("Location Entropy", "", 2, fixed=True)
    assert paper_prompts.format_paper(1.8, gl) == "1.80"
    assert paper_prompts.format_paper(4664.0, paper_prompts.PaperChannel("Steps", "steps", 0)) == "4664"


def _as_printed(pid: str) -> list[str]:
    """A template passage of tests/fixtures/paper/ as the code should render it: the template's slot braces
    ({Stress}) dropped, the PDF's typographic apostrophe as ASCII (our prompts use "'")."""
    import re

    from balms.fidelity import paper_passage

    text = re.sub(r"\{([^{}]*)\}", r"\1", paper_passage(pid)).replace("’", "'")
    return text.split("\n")


def test_p01_prompt_is_the_transcribed_template(p01):
    """Appendix D's Health-LLM template, from the transcription fixture (not from this file's constants)."""
    tables, sample = p01
    assert _user(tables, sample, style="paper").split("\n") == _as_printed("healthllm_template")


def test_printed_cot_form_is_the_transcribed_template_with_reasoning(p01):
    """Appendix D's "Health-LLM Prompt Template with Reasoning": the paper profile's CoT prompt shows the printed
    worked paragraph and answer sentence as its example; the blocks before the (abbreviated) sensor lines are the
    printed ones. The demo's placeholder form is an option that keeps its committed prompts."""
    from balms.experiments import config

    tables, sample = p01
    printed = _as_printed("healthllm_cot_template")
    assert config.load("paper").cot_format == "printed" and config.load("demo").cot_format == "paper"
    got = _user(tables, sample, cot=True, cot_format="printed").split("\n")
    assert got[:5] == printed[:5]  # purpose, task instruction, profile, as printed
    assert got[-2:] == printed[-2:]  # the worked Reasoning paragraph, then "The user's stress score is 3."
    assert printed[5].startswith("[Burned Calories]: [494, 354, NaN") and got[7].startswith(printed[5][:32])
    placeholder = _user(tables, sample, cot=True).split("\n")
    assert placeholder[-2] == "Reasoning: <your reasoning in one paragraph>" and placeholder[-1] == printed[-1]
    # the printed form asks for the paper's answer sentence, so its reply parses
    agent = make_agent("healthllm", cot=True, cot_format="printed")
    assert agent.score_sentence


def test_phia_prompt_never_contradicts_its_frame_span_and_takes_the_traces_fence(p01):
    """PHIA's prompts are our reconstruction (the paper prints only a trace): with look-back frames the prompt does
    not say "full record"; code_fence="tool_code" writes the fence the paper's trace labels its [Act] blocks with,
    and such a block is run."""
    from balms.agents.phia import extract_code
    from balms.fidelity import paper_passage

    tables, sample = p01
    record = make_agent("phia").first_prompt(sample, tables)
    look = make_agent("phia", frame_span="lookback").first_prompt(sample, tables)
    assert "full record" in record[1].content and "full record" not in look[1].content
    assert f"the {sample.lookback} days" in look[1].content
    assert "[Act]: tool_code" in paper_passage("phia_trace")
    tool = make_agent("phia", code_fence="tool_code")
    msgs = tool.first_prompt(sample, tables)
    assert "```tool_code" in msgs[0].content and "```python" not in msgs[0].content + msgs[1].content
    assert "```python" in record[0].content  # the default (every committed response) is unchanged
    assert tool.options()["code_fence"] == "tool_code" and "code_fence" not in make_agent("phia").options()
    reply = "[Thought] steps\n[Act]\n```tool_code\nprint(daily_df.steps.mean())\n```\n"
    assert extract_code(reply, "tool_code")[0] == "print(daily_df.steps.mean())"
    assert extract_code(reply)[0] is None  # the default fence does not run a tool_code block
    with pytest.raises(ValueError, match="code_fence"):
        make_agent("phia", code_fence="js")
