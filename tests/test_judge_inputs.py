"""The judge sees what the agent saw: for one real PMData record of each system, the window text in the judge's
request equals the profile, sensor and mood lines of the prompt the agent was given (PHIA, whose prompt holds no
values: its profile and mood lines, and the values of the DataFrames its sandbox was given, sub-day rows included).
And notebook 07's judge loop and `balms judge run` send the same request for the same record."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from agent_fakes import ScriptedBackend, real_tables, samples_of, use_hash_embedder
from balms.agents.registry import make_agent
from balms.judges import rubric
from balms.judges.llm_judge import judge_records

pytestmark = pytest.mark.realdata

T = {d: None for d in rubric.TIER1} | {d: 3 for d in rubric.TIER2}
VERDICT = json.dumps({d: {"score": v, "justification": "x"} for d, v in T.items()})
RATIONALE = "Sleep was short on day 3 and steps fell.\nAnswer: 3"


class FakeJudge:
    def __init__(self):
        self.calls = []
        self.model_id = "fake-judge"

    def generate(self, messages, params):
        from balms.models.base import Completion

        self.calls.append((list(messages), params))
        return Completion(text=VERDICT, model_id=self.model_id)


def judge_window(rec, tables) -> str:
    """The window text of the judge's request for `rec` (input (1) of the paper's template)."""
    fake = FakeJudge()
    res = judge_records([rec], tables, fake)[0]
    assert res.status == "scored"
    user = fake.calls[0][0][1].content
    return user.split(rubric.INPUT_WINDOW + "\n", 1)[1].split("\n\n" + rubric.INPUT_GOLD, 1)[0]


def data_lines(prompt: str, first: str, stop: str) -> str:
    """The prompt's lines from the first one starting with `first` up to the first one starting with `stop`."""
    lines = prompt.splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.startswith(first))
    j = next(k for k, ln in enumerate(lines) if k > i and ln.startswith(stop))
    return "\n".join(lines[i:j])


@pytest.fixture(scope="module")
def pm():
    tables, samples = samples_of("real", "pmdata")
    if tables is None:
        pytest.skip("real PMData not at ../shared/data")
    # a p01 sample with a same-day mood, so the [Mood] line is there to be compared
    s = next(s for s in samples if s.user == "p01" and (s.user, pd.Timestamp(s.target_date)) in tables.context.index)
    return tables, s


@pytest.mark.parametrize("system", ["healthllm", "rag", "raptor"])
@pytest.mark.parametrize("style", ["paper", "corrected"])
def test_judge_window_is_the_prompts_profile_sensor_and_mood_lines(system, style, pm, monkeypatch, isolated_cache):
    tables, s = pm
    use_hash_embedder(monkeypatch)
    be = ScriptedBackend([], default=RATIONALE)
    rec = make_agent(system, cot=True, style=style).predict(s, tables, be)
    prompt = be.calls[-1][0][-1].content  # the answering call (RAPTOR's summaries come first)
    first, stop = ("User profile.", "Question.") if style == "paper" else ("User profile:", "Question:")
    expected = data_lines(prompt, first, stop)
    assert judge_window(rec, tables) == expected
    mood = "[Mood]: " if style == "paper" else "On the target day the user reported mood"
    assert mood in expected and ("Sensor signals" in expected if style == "paper" else "- Steps" in expected
                                 or "Steps " in expected)


class FrameSpy:
    """Stands in for the sandbox: keeps the DataFrames PHIA hands it; no code runs (the agent answers at once)."""

    frames: dict = {}

    def __init__(self, frames, **kw):
        FrameSpy.frames = frames
        self.mechanisms = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_phia_judge_window_is_its_profile_mood_and_the_frames_it_had(pm, monkeypatch):
    from balms.data.render import channel_caption, format_value

    tables, s = pm
    monkeypatch.setattr("balms.sandbox.Sandbox", FrameSpy)
    be = ScriptedBackend([], default=RATIONALE)
    rec = make_agent("phia", cot=True).predict(s, tables, be)
    prompt = be.calls[0][0][-1].content
    text = judge_window(rec, tables).splitlines()
    profile = next(ln for ln in prompt.splitlines() if ln.startswith("User profile:"))
    mood = next(ln for ln in prompt.splitlines() if ln.startswith("On the target day the user reported"))
    assert text[0] == profile and text[-1] == mood
    daily = FrameSpy.frames["daily_df"].set_index("date")
    days = pd.date_range(daily.index.min(), s.window_end, freq="D")  # one value per calendar day, NaN = no row
    chans = {c.name: c for c in tables.channels}
    for col in daily.columns:
        c = chans[col]
        vals = ", ".join(format_value(v, c.decimals) for v in daily[col].reindex(days))
        assert f"- {channel_caption(c)}: [{vals}]" in text, col
    sub = FrameSpy.frames["subday_df"]
    look = sub[(sub["date"] >= pd.Timestamp(s.window_start)) & (sub["date"] <= pd.Timestamp(s.window_end))]
    assert len(look) > 0
    sub_chans = {c.name: c for c in tables.subday_channels}
    cols = [c for c in sub.columns if c not in ("date", "segment")]
    for r in look.to_dict("records"):
        line = (f"{r['date'].date().isoformat()}, {r['segment']}, "
                + ", ".join(format_value(r[c], sub_chans[c].decimals) for c in cols))
        assert line in text
    assert sum(1 for ln in text if ln[:4].isdigit() and ", " in ln) == len(look)  # every look-back row, no other


def test_notebook_07_and_the_cli_send_the_same_judge_request(pm, monkeypatch, tmp_path, isolated_cache):
    """One loop, one renderer: `judge_grid` (notebook 07) and `balms judge run` build the same request."""
    from balms.cli import main
    from balms.experiments import config, judging
    from balms.models import registry

    tables, s = pm
    _, samples = samples_of("real", "pmdata")
    be = ScriptedBackend([], default=RATIONALE)
    recs = [make_agent("healthllm", cot=True).predict(x, tables, be) for x in (s, samples[0])]
    run = tmp_path / "cell.jsonl"
    run.write_text("".join(r.model_dump_json() + "\n" for r in recs))
    cli_judge, nb_judge = FakeJudge(), FakeJudge()
    monkeypatch.setattr("balms.data.loading.load_dataset", lambda name, *a, **k: real_tables(name))
    monkeypatch.setattr(registry, "get_backend", lambda name, **kw: cli_judge)
    assert main(["judge", "run", "--records", str(run), "--model", "fake", "--mode", "paper", "--json"]) == 0
    cfg = config.load("demo", judge_mode="paper", judge_grounding_hint=False, judge_justify=True,
                      judge_max_tokens=1024, datasets=["pmdata"], judge_datasets=["pmdata"])

    class Co:
        def __init__(self, d):
            self.tables = real_tables(d)

    monkeypatch.setattr(judging, "make_cell", lambda *a, **k: None)
    monkeypatch.setattr(judging, "records_of", lambda cfg, cells: [recs])
    monkeypatch.setattr(judging, "run_path_of", lambda cfg, rec: tmp_path / "nb" / "cell.jsonl")
    monkeypatch.setattr(judging, "cohort", lambda d, cfg: Co(d))
    monkeypatch.setattr(judging, "_judge_backend", lambda cfg, m: nb_judge)
    (tmp_path / "nb").mkdir()
    judged = judging.judge_grid(cfg, systems=["healthllm"])
    assert len(judged) == len(recs) and set(judged.judge_status) == {"scored"}
    assert [c[0] for c in nb_judge.calls] == [c[0] for c in cli_judge.calls]  # same messages, record by record
    assert [c[1] for c in nb_judge.calls] == [c[1] for c in cli_judge.calls]  # same decoding parameters
