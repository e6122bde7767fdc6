"""Agents end to end on REAL PMData/GLOBEM windows with scripted backends: prompts, options, records.

The model is faked (its replies are scripted) so these tests check the harness: what each agent
sends, how it parses, and that every record is complete. Real-model runs are in test_agents_smollm.py.
"""

from __future__ import annotations

import datetime as dt

import pytest

from agent_fakes import ScriptedBackend, samples_of, use_hash_embedder
from balms.agents import prompts
from balms.agents.registry import SYSTEMS, agent_options, make_agent
from balms.models.seeds import sample_seed


@pytest.fixture(scope="module")
def pm(pmdata_dir):
    tables, samples = samples_of("real", "pmdata")
    return tables, samples


@pytest.fixture(scope="module")
def gl(globem_dir):
    tables, samples = samples_of("real", "globem")
    return tables, samples


@pytest.fixture()
def cheap(monkeypatch, isolated_cache):
    use_hash_embedder(monkeypatch)


def _complete(rec, sample, system):
    assert rec.sample_id == sample.sample_id and rec.system == system
    assert rec.label == sample.label and rec.target_date == sample.target_date.isoformat()
    assert rec.model_id and rec.model == "fake"
    assert rec.n_steps >= 1 and rec.prompt_tokens > 0 and rec.completion_tokens > 0
    assert rec.latency_s > 0
    assert rec.transcript and rec.transcript[0].kind in ("prompt", "retrieval", "summary")
    assert rec.raw_answer
    assert (rec.prediction is None) == (rec.parse_error is not None)


def test_healthllm_zero_shot_corrected_prompt(pm):
    tables, samples = pm
    s = samples[0]
    be = ScriptedBackend(["Answer: 4"])
    rec = make_agent("healthllm", style="corrected").predict(s, tables, be)
    _complete(rec, s, "healthllm")
    assert rec.prediction == 4 and rec.rationale == ""
    msgs, params = be.calls[0]
    assert msgs[0].role == "system" and msgs[0].content == prompts.SYSTEM_PROMPT
    user = msgs[1].content
    assert "an integer from 1 to 5" in user and "0 to 5" not in user
    assert user.count("\n- ") == 4  # the four Health-LLM channels, one line each
    for cap in ("Steps (steps): [", "Calories burned (kcal): [", "Resting heart rate (bpm): [",
                "Sleep minutes (minutes): ["):
        assert cap in user
    assert "User profile: age" in user
    assert "reported mood" in user and "fatigue" not in user.lower()
    assert user.rstrip().endswith("Do not explain.") and "'Answer: <int>'" in user
    assert params.max_tokens == prompts.ZERO_SHOT_MAX_TOKENS
    assert params.seed == sample_seed(s.sample_id, 0)
    assert rec.options["style"] == "corrected" and rec.options["prompt_version"] == prompts.PROMPT_VERSION
    assert rec.options["prompt_channels"] == ["steps", "calories", "resting_hr", "sleep_minutes"]
    assert rec.options["channel_recipe"] == "corrected"


def test_healthllm_zero_shot_paper_prompt_is_the_appendix_template(pm):
    """Default style: Appendix D's blocks in order, the range as printed, no dates, the paper's sleep recipe."""
    import re

    tables, samples = pm
    s = samples[0]
    be = ScriptedBackend(["Answer: 4"])
    rec = make_agent("healthllm").predict(s, tables, be)
    _complete(rec, s, "healthllm")
    assert rec.prediction == 4
    msgs, params = be.calls[0]
    assert [m.role for m in msgs] == ["system", "user"] and msgs[0].content == prompts.PAPER_SYSTEM_PROMPT
    lines = msgs[1].content.split("\n")
    assert lines[0] == ("Predict the user's stress level given wearable-derived physiological signals and "
                        "self-reported context.")
    assert lines[1:3] == ["Task instruction.", "You are a personalized healthcare agent trained to predict "
                          "Stress which ranges from 0 to 5."]
    assert lines[3] == "User profile." and re.fullmatch(
        r"The user is a \d+ years old \w+ with \d+ height with a measured maximum heart rate of \d+ bpm\.", lines[4])
    assert lines[5] == "Sensor signals (look-back window)."
    expected = [("Steps", "steps"), ("Burned Calories", "calories"), ("Resting Heart Rate", "beats/min"),
                ("SleepMinutes", "minutes")]
    for line, (name, unit) in zip(lines[6:10], expected, strict=True):
        m = re.fullmatch(rf"\[{name}\]: \[(.*)\] {re.escape(unit)}", line)
        assert m and len(m.group(1).split(", ")) == s.lookback, line
    assert re.fullmatch(r"\[Mood\]: (\d|NaN) out of 5", lines[10])
    assert lines[11:] == ["Question.", "What would be the predicted stress?", "Output format.",
                          "For example, the answer should be in the following format:", "Answer: 1"]
    assert not re.search(r"20\d\d-\d\d-\d\d", msgs[1].content)  # the paper's template shows no dates
    assert params.max_tokens == prompts.ZERO_SHOT_MAX_TOKENS
    assert rec.options["style"] == "paper" and rec.options["prompt_version"] == prompts.PAPER_PROMPT_VERSION
    assert rec.options["prompt_channels"] == ["steps", "calories", "resting_hr", "sleep_minutes_paper"]
    assert rec.options["channel_recipe"] == "paper"


@pytest.mark.parametrize("style", ["paper", "corrected"])
def test_healthllm_cot_rationale_and_budget(pm, style):
    tables, samples = pm
    s = samples[1]
    reply = "Sleep on day 14 was 325 minutes, lower than day 10.\nMood is 3 out of 5.\nAnswer: 3"
    be = ScriptedBackend([reply])
    rec = make_agent("healthllm", cot=True, seed=7, style=style).predict(s, tables, be)
    assert rec.cot and rec.prediction == 3
    assert rec.rationale == "Sleep on day 14 was 325 minutes, lower than day 10.\nMood is 3 out of 5."
    _, params = be.calls[0]
    assert params.max_tokens == prompts.COT_MAX_TOKENS and params.seed == sample_seed(s.sample_id, 7)
    user = be.calls[0][0][1].content
    if style == "corrected":
        assert "step by step" in user
    else:  # the paper's CoT only asks for a reasoning paragraph, then its answer sentence
        assert "step by step" not in user and "Cite" not in user
        assert user.endswith("the following format:\nReasoning: <your reasoning in one paragraph>\n"
                             "The user's stress score is 3.")
        zs = make_agent("healthllm").first_prompt(s, tables)[1].content
        assert user.replace("Reasoning: <your reasoning in one paragraph>\nThe user's stress score is 3.",
                            "Answer: 1") == zs
        assert rec.options["cot_format"] == "paper"
    assert rec.options["seed"] == 7


def test_out_of_range_answer_is_a_visible_parse_failure(pm):
    tables, samples = pm
    rec = make_agent("healthllm", cot=True).predict(samples[2], tables, ScriptedBackend(["x = 226\nAnswer: 226"]))
    assert rec.prediction is None and "out of range" in rec.parse_error
    assert rec.raw_answer == "x = 226\nAnswer: 226"


@pytest.mark.parametrize("style", ["paper", "corrected"])
def test_context_off_and_wearable_only_on_globem(gl, style):
    tables, samples = gl
    s = samples[0]
    be = ScriptedBackend(["Answer: 1"])
    rec = make_agent("healthllm", channels="wearable", context=False, style=style).predict(s, tables, be)
    user = be.calls[0][0][1].content
    wearable = [c for c in tables.channels if c.device == "wearable"]
    phone = [c for c in tables.channels if c.device == "phone"]
    assert wearable and phone
    line = "- {}" if style == "corrected" else "[{}]: ["
    assert all(line.format(c.label) in user for c in wearable)
    assert not any(c.label in user for c in phone)
    assert ("an integer from 0 to 3" if style == "corrected" else "which ranges from 0 to 3.") in user
    if style == "paper":  # no profile fields and no same-day self-report on GLOBEM: those blocks are left out
        assert "User profile." not in user and "self-reported context" not in user
    assert rec.options["channels"] == "wearable" and rec.options["context"] is False
    assert rec.prediction == 1


def test_pmdata_recipe_follows_style_unless_channels_are_named(pm):
    """A style selects one sleep recipe for the default set, "all" and devices; a named channel is used as given."""
    tables, samples = pm
    s = samples[3]
    for style, own, other in (("paper", "sleep_minutes_paper", "sleep_minutes"),
                              ("corrected", "sleep_minutes", "sleep_minutes_paper")):
        for channels in (None, "all", "wearable"):
            rec = make_agent("healthllm", style=style, channels=channels).predict(s, tables, ScriptedBackend())
            assert own in rec.options["prompt_channels"] and other not in rec.options["prompt_channels"]
            assert rec.options["channel_recipe"] == style
    rec = make_agent("healthllm", style="paper", channels=["steps", "sleep_minutes"]).predict(
        s, tables, ScriptedBackend())
    assert rec.options["prompt_channels"] == ["steps", "sleep_minutes"]
    assert rec.options["channel_recipe"] == "corrected"
    with pytest.raises(ValueError, match="style"):
        make_agent("rag", style="verbatim")


@pytest.mark.parametrize("style", ["paper", "corrected"])
def test_rag_prompt_holds_only_the_retrieved_days_and_the_query_day(pm, cheap, style):
    tables, samples = pm
    s = samples[40]
    be = ScriptedBackend(["Answer: 2"])
    rec = make_agent("rag", style=style).predict(s, tables, be)
    _complete(rec, s, "rag")
    ret = next(st for st in rec.transcript if st.kind == "retrieval")
    assert len(ret.meta["dates"]) == 3 and ret.meta["n_candidates"] == s.lookback - 1
    # memory = the look-back days before the query day
    assert all(s.window_start.isoformat() <= d < s.window_end.isoformat() for d in ret.meta["dates"])
    user = be.calls[0][0][1].content
    window_days = [s.window_start + dt.timedelta(days=i) for i in range(s.lookback)]
    if style == "corrected":
        for d in ret.meta["dates"]:
            assert f"] {d} (" in user
        shown = [d for d in window_days if d.isoformat() in user]
        assert sorted(x.isoformat() for x in shown) == sorted([*ret.meta["dates"], s.window_end.isoformat()])
        assert "Daily data for the" not in user  # not the whole window
    else:
        labels = [f"Day {(dt.date.fromisoformat(d) - s.window_start).days + 1}:"
                  for d in ret.meta["dates"]]
        assert all(lab in user for lab in labels) and f"Day {s.lookback}:" in user
        assert user.count("\nDay ") == 4 and "Sensor signals (look-back window)." not in user
    assert rec.options["top_k"] == 3 and rec.options["memory"] == "lookback"
    assert rec.options["context_window"] is False and rec.options["style"] == style


def test_rag_context_window_option_keeps_the_whole_window(pm, cheap):
    tables, samples = pm
    s = samples[40]
    for style, marker in (("paper", "Sensor signals (look-back window)."), ("corrected", "Daily data for the")):
        be = ScriptedBackend()
        rec = make_agent("rag", style=style, context_window=True, memory="history").predict(s, tables, be)
        assert marker in be.calls[0][0][1].content
        ret = next(st for st in rec.transcript if st.kind == "retrieval")
        assert ret.meta["n_candidates"] > s.lookback - 1  # history: every earlier day of the user
        assert rec.options["context_window"] is True and rec.options["memory"] == "history"


def test_raptor_summaries_cached_per_day(pm, cheap):
    tables, samples = pm
    user_samples = [x for x in samples if x.user == "p03"]
    s1, s2 = user_samples[0], user_samples[1]
    be = ScriptedBackend(default="Summary: an ordinary day.")
    rec1 = make_agent("raptor", top_k=3).predict(s1, tables, be)
    ret1 = next(st for st in rec1.transcript if st.kind == "retrieval")
    assert ret1.meta["summaries_generated"] >= 1
    assert len(ret1.meta["ids"]) == 3
    n_calls = len(be.calls)
    rec2 = make_agent("raptor", top_k=3).predict(s2, tables, be)
    ret2 = next(st for st in rec2.transcript if st.kind == "retrieval")
    # s2 is one day later: only the day that entered the memory needs a new summary.
    assert ret2.meta["summaries_generated"] <= 1
    assert len(be.calls) - n_calls == ret2.meta["summaries_generated"] + 1
    assert "leaf" in ",".join(ret1.meta["kinds"] + ret2.meta["kinds"]) or "summary" in ret1.meta["kinds"]


class SleepyBackend(ScriptedBackend):
    """Takes `delay` seconds per call and reports what it took, like a real model."""

    def __init__(self, delay, **kw):
        super().__init__(**kw)
        self.delay = delay

    def generate(self, messages, params):
        import time

        t = time.perf_counter()
        time.sleep(self.delay)
        comp = super().generate(messages, params)
        comp.latency_s = time.perf_counter() - t
        return comp


def test_cache_replayed_calls_keep_their_measured_latency(pm, isolated_cache):
    """A warm re-run (every call from the response cache) reports the cold run's latency and tokens, with its
    own small wall time beside it: latency figures must not collapse to zero on a re-run."""
    from balms.models.cache import CachedBackend, ResponseCache

    tables, samples = pm
    be = CachedBackend(SleepyBackend(0.3), ResponseCache(isolated_cache / "r.sqlite"))
    cold = make_agent("healthllm").predict(samples[5], tables, be)
    warm = make_agent("healthllm").predict(samples[5], tables, be)
    assert warm.transcript[-1].meta["cached"] and not cold.transcript[-1].meta["cached"]
    assert cold.latency_s >= 0.3 and cold.wall_s == pytest.approx(cold.latency_s, abs=0.01)
    assert warm.latency_s == pytest.approx(cold.latency_s, rel=0.2) and warm.wall_s < 0.2
    assert (warm.prompt_tokens, warm.completion_tokens, warm.n_steps) == (cold.prompt_tokens,
                                                                          cold.completion_tokens, cold.n_steps)


def test_raptor_reused_summaries_are_charged_to_every_sample(pm, cheap):
    """A sample's RAPTOR cost counts every day summary its tree uses, generated now or reused from the summary
    cache, so tokens and latency do not depend on which sample ran first."""
    tables, samples = pm
    s = [x for x in samples if x.user == "p03"][0]
    be = SleepyBackend(0.02, default="Summary: an ordinary day.\nAnswer: 3")
    first = make_agent("raptor", top_k=3).predict(s, tables, be)
    calls = len(be.calls)
    again = make_agent("raptor", top_k=3).predict(s, tables, be)
    assert len(be.calls) == calls + 1  # only the answer: every summary came from the summary cache
    n_summ = sum(st.kind == "summary" for st in first.transcript)
    assert n_summ >= 5 and sum(st.kind == "summary" and st.meta["cached"] for st in again.transcript) == n_summ
    assert (again.prompt_tokens, again.completion_tokens, again.n_steps) == (first.prompt_tokens,
                                                                             first.completion_tokens, first.n_steps)
    # each reused summary is charged at the latency recorded when it was generated (the sum of the sample's steps),
    # not at the near-zero cost of the lookup; compared step by step, so machine load cannot flip it
    charged = [st.meta.get("latency_s") for st in again.transcript if st.kind == "summary"]
    generated = [st.meta.get("latency_s") for st in first.transcript if st.kind == "summary"]
    assert charged == generated and all(x is not None and x >= 0.02 for x in charged)
    assert again.latency_s >= sum(charged) and again.wall_s < first.wall_s


@pytest.mark.parametrize("executor", ["faithful", "improved"])
def test_phia_episode_transcript(pm, executor):
    tables, samples = pm
    s = [x for x in samples if x.user == "p03"][3]
    script = [
        "[Thought] recent sleep\n[Act]\n```python\nm = daily_df['sleep_minutes'].tail(7).mean()\n"
        "print(round(m, 1))\n```\n[Observe] 400",
        "[Act]\n```python\nm\n```",
        "[Finish] Sleep was average.\nAnswer: 2",
    ]
    be = ScriptedBackend(script)
    rec = make_agent("phia", executor=executor, max_iters=5).predict(s, tables, be)
    kinds = [st.kind for st in rec.transcript]
    assert kinds == ["prompt", "completion", "code", "observation", "completion", "code", "observation",
                     "completion"]
    obs = [st for st in rec.transcript if st.kind == "observation"]
    assert obs[0].meta["status"] == "ok"
    if executor == "faithful":
        assert obs[1].meta["error_type"] == "NameError"  # fresh scope: the original contract (F2)
    else:
        assert obs[1].meta["status"] == "ok"
        assert round(float(obs[1].content.strip()), 1) == float(obs[0].content.strip())  # state persisted
        assert "baseline" in be.calls[0][0][1].content  # schema card in the improved prompt
    assert rec.prediction == 2 and rec.rationale == "Sleep was average."
    assert rec.n_steps == 3 and rec.options["executor"] == executor
    # the hallucinated "[Observe] 400" was cut before it entered the conversation
    assert "[Observe] 400" not in be.calls[1][0][2].content
    assert be.calls[0][1].stop and "\n[Observe]" in be.calls[0][1].stop
    # the frames, named as in the paper's trace, span the full record up to the day before the target day
    fr = rec.options["frames"]
    assert s.window_end == s.target_date - dt.timedelta(days=1)
    assert fr["daily_df"]["end"] == s.window_end.isoformat() and fr["daily_df"]["columns"][0] == "date"
    assert fr["daily_df"]["start"] < s.window_start.isoformat()  # more than the look-back window
    assert "`daily_df`: one row per day" in be.calls[0][0][1].content


def test_phia_subday_frame_as_in_the_paper_trace(pm):
    """`subday_df` (date, segment, channels) is in the sandbox; aggregating it per day is the model's job."""
    tables, samples = pm
    s = [x for x in samples if x.user == "p03"][3]
    code = ("[Act]\n```python\nd = subday_df.groupby('date')['steps'].sum()\n"
            "print(list(subday_df.columns[:2]), str(subday_df['date'].max().date()), len(d))\n```")
    be = ScriptedBackend([code, "Answer: 3"])
    rec = make_agent("phia", max_iters=2).predict(s, tables, be)
    fr = rec.options["frames"]["subday_df"]
    assert fr["columns"][:2] == ["date", "segment"] and "slot_index" not in fr["columns"]
    obs = [st for st in rec.transcript if st.kind == "observation"][0]
    cols, last, n_days = obs.content.strip().rsplit(" ", 2)
    assert cols == "['date', 'segment']" and last == fr["end"] <= s.window_end.isoformat(), obs.content
    assert int(n_days) > 1  # several days of sub-day rows, aggregated by the model's own groupby
    assert "`subday_df`: one row per" in be.calls[0][0][1].content


def test_phia_forced_finish_when_budget_runs_out(pm):
    tables, samples = pm
    s = samples[5]
    be = ScriptedBackend(["[Act]\n```python\nprint(len(daily_df))\n```"] * 2 + ["Answer: 4"])
    rec = make_agent("phia", max_iters=2).predict(s, tables, be)
    assert rec.transcript[-1].kind == "forced_finish"
    assert rec.prediction == 4 and rec.n_steps == 3
    assert "used all your steps" in be.calls[-1][0][-1].content


@pytest.mark.parametrize("finish_reply, expect, asked", [
    ("My analysis shows low steps, so stress is moderate.", 4, True),  # no answer line: asked once more
    ("Answer: 9", None, False),  # an answer out of range stays a visible failure
    ("Answer: 2", 2, False),  # parsed: never asked again
])
def test_phia_forced_answer_after_a_forced_finish_without_one(pm, finish_reply, expect, asked):
    tables, samples = pm
    s = samples[5]
    code = "[Act]\n```python\nprint(len(daily_df))\n```"
    be = ScriptedBackend([code, finish_reply, "Answer: 4"])
    rec = make_agent("phia", max_iters=1, force_answer=True).predict(s, tables, be)
    kinds = [st.kind for st in rec.transcript if st.kind in ("forced_finish", "forced_answer")]
    assert rec.options["force_answer"] is True and rec.prediction == expect
    assert kinds == (["forced_finish", "forced_answer"] if asked else ["forced_finish"])
    assert len(be.calls) == (3 if asked else 2)
    if asked:
        assert be.calls[2][0][-1].content == prompts.FORCE_ANSWER_MISSING
        assert be.calls[2][0][-2].content == finish_reply  # the forced finish stays in the conversation
        assert rec.rationale == finish_reply and rec.raw_answer == "Answer: 4"
    # without the option (the paper's harness) the same episode ends at the forced finish, nothing recorded
    be = ScriptedBackend([code, finish_reply, "Answer: 4"])
    plain = make_agent("phia", max_iters=1, force_answer=False).predict(s, tables, be)
    assert "force_answer" not in plain.options and len(be.calls) == 2
    assert plain.prediction == (2 if expect == 2 else None)


def test_registry_rejects_unknown_system_and_options():
    assert SYSTEMS == ["healthllm", "rag", "raptor", "phia"]
    with pytest.raises(ValueError, match="unknown system"):
        make_agent("gpt")
    with pytest.raises(ValueError, match="unknown option"):
        make_agent("healthllm", executor="faithful")
    with pytest.raises(ValueError, match="executor"):
        make_agent("phia", executor="yolo")
    assert "executor" in agent_options("phia") and "top_k" in agent_options("rag")


def test_wearable_only_ablation_reaches_memories_and_frames(gl, cheap):
    """GLOBEM Fitbit-only: no phone channel in the prompt, the RAPTOR leaves or the PHIA frames."""
    tables, samples = gl
    s = samples[0]
    phone = [c for c in [*tables.channels, *tables.subday_channels] if c.device == "phone"]
    be = ScriptedBackend(default="Summary.")
    rec = make_agent("raptor", channels="wearable", memory="lookback", top_k=50).predict(s, tables, be)
    texts = [m.content for msgs, _ in be.calls for m in msgs if m.role == "user"]
    ret = next(st for st in rec.transcript if st.kind == "retrieval")
    assert ret.meta["n_leaves"] > 0 and "Steps" in ret.content
    for c in phone:
        assert c.label not in ret.content and all(c.label not in t for t in texts), c.label
    _, frames, _ = make_agent("phia", channels="wearable")._setup(s, tables)
    cols = {col for df in frames.values() for col in df.columns}
    assert "steps" in cols and not cols & {c.name for c in phone}
    _, frames_all, _ = make_agent("phia")._setup(s, tables)
    assert {c.name for c in phone} <= {col for df in frames_all.values() for col in df.columns}


def test_summary_cache_written_before_usage_was_kept_still_reads(tmp_path):
    """Old caches (no usage columns) are migrated in place: their summaries are reused, with unknown cost."""
    import sqlite3

    from balms.agents.raptor import SummaryCache

    db = tmp_path / "raptor_summaries.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE summaries (dataset TEXT, user TEXT, day TEXT, model_id TEXT, leaves_sha TEXT, "
                "summary TEXT, PRIMARY KEY (dataset, user, day, model_id, leaves_sha))")
    con.execute("INSERT INTO summaries VALUES ('pmdata','p01','2019-11-01','m','sha','old summary')")
    con.commit()
    con.close()
    cache = SummaryCache(db)
    assert cache.get(("pmdata", "p01", "2019-11-01", "m", "sha")) == ("old summary", None)
    cache.put(("pmdata", "p01", "2019-11-02", "m", "sha"), "new", {"prompt_tokens": 9, "completion_tokens": 2,
                                                                  "latency_s": 1.5})
    assert cache.get(("pmdata", "p01", "2019-11-02", "m", "sha")) == (
        "new", {"prompt_tokens": 9, "completion_tokens": 2, "latency_s": 1.5})
    assert cache.get(("pmdata", "p01", "2019-11-03", "m", "sha")) is None


def test_paper_style_without_the_paper_recipe_is_a_clear_error(pm):
    import dataclasses

    tables, samples = pm
    old = dataclasses.replace(tables, channels=[c for c in tables.channels if c.name != "sleep_minutes_paper"],
                              daily=tables.daily.drop(columns="sleep_minutes_paper"))
    with pytest.raises(ValueError, match="sleep_minutes_paper"):
        make_agent("healthllm").first_prompt(samples[0], old)
    assert make_agent("healthllm", style="corrected").first_prompt(samples[0], old)


@pytest.mark.parametrize("name", ["pmdata", "globem"])
def test_rag_prompt_size_does_not_grow_with_the_look_back(name, cheap, real_data):
    """Same target days at look-back 7 and 28: the paper's RAG prompt stays within 10% (the full-window
    prompt, context_window=True, grows)."""
    import dataclasses

    tables, s28 = samples_of("real", name, 28)
    s28 = s28[:: max(len(s28) // 5, 1)][:5]
    s7 = [dataclasses.replace(s, lookback=7, window_start=s.window_end - dt.timedelta(days=6)) for s in s28]
    for style in ("paper", "corrected"):
        n = {L: sum(len(make_agent("rag", style=style).first_prompt(s, tables)[1].content) for s in ss)
             for L, ss in ((7, s7), (28, s28))}
        assert abs(n[28] / n[7] - 1) < 0.10, (style, n)
        full = {L: sum(len(make_agent("rag", style=style, context_window=True).first_prompt(s, tables)[1].content)
                       for s in ss) for L, ss in ((7, s7), (28, s28))}
        assert full[28] > 1.2 * full[7], (style, full)


# ---------------------------------------------------------------- our labelled options: forced answer, PHIA primers


class FinishingBackend(ScriptedBackend):
    """Scripted replies, each with its finish reason: (text, "stop" | "length")."""

    def generate(self, messages, params):
        self.calls.append((list(messages), params))
        text, finish = self.replies.pop(0) if self.replies else (self.default, "stop")
        from balms.models.base import Completion

        return Completion(text=text, model_id=self.model_id, finish_reason=finish, prompt_tokens=11,
                          completion_tokens=3, latency_s=0.001)


@pytest.mark.parametrize("system", ["healthllm", "rag"])
@pytest.mark.parametrize("first, finish, asked, expect", [
    ("Steps fell on day 12, so stress rises to", "length", prompts.FORCE_ANSWER, 4),  # cut by the budget
    ("Steps fell on day 12. Therefore the stress level is 4.", "stop", prompts.FORCE_ANSWER_MISSING, 4),  # no line
    ("Steps fell on day 12.\nAnswer: 9", "stop", None, None),  # an invalid answer stays a visible failure
    ("Steps fell on day 12.\nAnswer: 2", "stop", None, 2),  # parsed: never asked again
])
def test_cot_forced_answer_when_the_reply_has_no_answer(pm, cheap, system, first, finish, asked, expect):
    tables, samples = pm
    be = FinishingBackend([(first, finish), ("Answer: 4", "stop")])
    rec = make_agent(system, cot=True, force_answer=True, force_missing=True).predict(samples[1], tables, be)
    forced = [st for st in rec.transcript if st.kind == "forced_answer"]
    assert rec.options["force_answer"] is True and rec.prediction == expect
    assert rec.rationale.startswith("Steps fell on day 12")
    if asked is None:
        assert not forced and len(be.calls) == 1
    else:
        assert len(forced) == 1 and be.calls[1][0][-1].content == asked
        assert forced[0].meta["reason"] == ("length" if finish == "length" else "no_answer")
        assert be.calls[1][0][-2].content == first  # the reasoning stays in the conversation
    # without the option the same reply is a parse failure, and nothing is recorded about forcing
    be = FinishingBackend([(first, finish)])
    plain = make_agent(system, cot=True, force_answer=False).predict(samples[1], tables, be)
    assert "force_answer" not in plain.options and len(be.calls) == 1
    assert plain.prediction == (2 if expect == 2 else None)
    # force_answer alone (the demo's setting) asks only when the budget cut the reply
    be = FinishingBackend([(first, finish), ("Answer: 4", "stop")])
    cut_only = make_agent(system, cot=True, force_answer=True, force_missing=False).predict(samples[1], tables, be)
    assert len(be.calls) == (2 if finish == "length" else 1)
    assert cut_only.prediction == (4 if finish == "length" else expect if asked is None else None)


def test_phia_plain_prompt_has_no_primer_and_no_fence_stop(pm):
    tables, samples = pm
    be = ScriptedBackend(["Answer: 3"])
    rec = make_agent("phia", max_iters=1, primer="none", fence_stop=False).predict(samples[0], tables, be)
    (msgs, params) = be.calls[0]
    assert "primer" not in rec.options and "fence_stop" not in rec.options
    assert prompts.PHIA_FENCE_STOP not in params.stop
    assert msgs[1].content.endswith("Begin with your first [Thought].")
    assert "Example of a first step" not in msgs[0].content


@pytest.mark.parametrize("executor", ["faithful", "improved"])
def test_phia_code_first_primer_and_fence_stop_on_real_pmdata(pm, executor):
    """The code_first primer ends the prompt with the code request, the fence stop ends a step at its closing
    fence; a step cut there still runs (the block is closed by the harness), and the record says what was used."""
    tables, samples = pm
    s = [x for x in samples if x.user == "p03"][3]
    be = ScriptedBackend(["[Thought] how many days\n[Act]\n```python\nprint(len(daily_df))",
                          "[Finish] Steps were recorded.\nAnswer: 3"])
    rec = make_agent("phia", executor=executor, max_iters=3, primer="code_first", fence_stop=True).predict(
        s, tables, be)
    msgs, params = be.calls[0]
    assert msgs[1].content.endswith(prompts.PHIA_CODE_FIRST)
    assert params.stop[-1] == prompts.PHIA_FENCE_STOP and set(prompts.PHIA_STOP) <= set(params.stop)
    assert rec.options["primer"] == "code_first" and rec.options["fence_stop"] is True
    code = [st for st in rec.transcript if st.kind == "code"]
    obs = [st for st in rec.transcript if st.kind == "observation"]
    assert len(code) == 1 and obs[0].meta["status"] == "ok"
    assert int(obs[0].content) == rec.options["frames"]["daily_df"]["rows"] > s.lookback  # the real full record
    assert be.calls[1][0][2].content.endswith("```")  # the kept reply is closed before it enters the conversation
    assert rec.prediction == 3


def test_phia_example_primer_and_unknown_primer(pm):
    tables, samples = pm
    be = ScriptedBackend(["Answer: 3"])
    rec = make_agent("phia", max_iters=1, primer="example").predict(samples[0], tables, be)
    system = be.calls[0][0][0].content
    assert system.endswith(prompts.PHIA_EXAMPLE) and rec.options["primer"] == "example"
    assert be.calls[0][0][1].content.endswith("Begin with your first [Thought].")
    with pytest.raises(ValueError, match="primer must be one of"):
        make_agent("phia", primer="fewshot")
