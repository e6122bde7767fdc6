"""LLM judge: hand-written judge outputs for every Tier-1 / Tier-2 path, every failure path ending as
"unscored" with a reason, the paper's aggregation, and one slow run with a real embedded model."""

from __future__ import annotations

import json
import math
from importlib import resources

import pytest

from balms.judges.llm_judge import (
    JudgeResult,
    aggregate_judgements,
    extract_json,
    judge_rationale,
    judge_records,
    judgement_table,
)
from balms.judges.rubric import DIMENSIONS, TIER1, TIER2, build_messages, judge_json_schema
from balms.models.base import BackendError, Completion
from balms.records import PredictionRecord


class FakeJudge:
    """Scripted judge backend; remembers every request. A reply may be an exception to raise."""

    def __init__(self, replies, finish_reason="stop"):
        self.replies = list(replies)
        self.calls = []
        self.model_id = "fake-judge"
        self.finish_reason = finish_reason

    def generate(self, messages, params):
        self.calls.append((list(messages), params))
        r = self.replies.pop(0)
        if isinstance(r, Exception):
            raise r
        return Completion(text=r, model_id=self.model_id, finish_reason=self.finish_reason)


T1 = {"c1_alignment": 1, "c2_slicing": 0, "c3_difference_judgment": None, "c4_lag": None, "c5_structure": 1,
      "c6_interaction": 0}
T2 = {"faithfulness": 4, "evidence_grounding": 2, "domain_knowledge": 5, "safety": 5, "clarity": 3, "overall": 1}


def verdict(t1=T1, t2=T2, **override) -> dict:
    d = {k: {"score": v, "justification": f"because of {k}"} for k, v in {**t1, **t2}.items()}
    d.update(override)
    return d


KW = dict(window_text="Daily data ...\n- Steps (steps): [1, 2, 3]", gold=0, predicted=3,
          rationale="Steps dropped on day 3 (3 steps).", scale=(0, 3), target="PHQ-4 anxiety")


def judge(replies, **kw):
    be = FakeJudge(replies, finish_reason=kw.pop("finish_reason", "stop"))
    return judge_rationale(be, **{**KW, **kw}), be


# ---------------------------------------------------------------- scored paths


def test_clean_json_every_tier1_and_tier2_value():
    res, be = judge([json.dumps(verdict())])
    assert res.status == "scored" and res.attempts == 1 and res.model_id == "fake-judge"
    assert res.tier1 == T1 and res.tier2 == T2  # 1, 0 and null; 1..5
    assert res.justifications["c4_lag"] == "because of c4_lag"
    params = be.calls[0][1]
    assert params.temperature == 0 and params.json_schema == judge_json_schema()
    user = be.calls[0][0][1].content
    assert KW["window_text"] in user and "(2) The ground-truth label for that window.\n0\n" in user
    assert KW["rationale"] in user and res.meta["target"] == "PHQ-4 anxiety" and res.meta["scale"] == [0, 3]


@pytest.mark.parametrize("t2", [{d: s for d in TIER2} for s in (1, 2, 3, 4, 5)] + [{d: None for d in TIER2}])
def test_each_tier2_value(t2):
    res, _ = judge([json.dumps(verdict(t2=t2))])
    assert res.status == "scored" and res.tier2 == t2


@pytest.mark.parametrize("t1", [{d: s for d in TIER1} for s in (0, 1, None)])
def test_each_tier1_value(t1):
    res, _ = judge([json.dumps(verdict(t1=t1))])
    assert res.status == "scored" and res.tier1 == t1


def _py_literal(d: dict) -> str:
    return repr(d)  # single quotes, None


@pytest.mark.parametrize("wrap", [
    lambda s: f"Here is my evaluation:\n```json\n{s}\n```\nI hope this helps.",  # fenced + prose
    lambda s: f"{s}\n\nThe rationale overall is weak because it cites wrong days.",  # trailing prose
    lambda s: f"<think>let me think {{not json}}</think>{s}",  # reasoning block
    lambda s: s[:-1].rstrip() + ",}",  # trailing comma
    lambda s: _py_literal(json.loads(s)),  # single quotes, None
    lambda s: json.dumps({"tier1": {k: v for k, v in json.loads(s).items() if k in TIER1},
                          "tier2": {k: v for k, v in json.loads(s).items() if k in TIER2}}),  # nested tiers
])
def test_robust_extraction(wrap):
    res, _ = judge([wrap(json.dumps(verdict()))])
    assert res.status == "scored" and res.tier1 == T1 and res.tier2 == T2


def test_lenient_score_forms():
    v = {**{d: {"score": str(s) if s is not None else "N/A", "reason": "r"} for d, s in T1.items()},
         **{d: float(s) for d, s in T2.items()}}  # strings, "N/A", bare floats, 'reason' key
    res, _ = judge([json.dumps(v)])
    assert res.status == "scored" and res.tier1 == T1 and res.tier2 == T2
    assert res.justifications["c1_alignment"] == "r" and res.justifications["overall"] == ""


def test_repair_retry_fixes_a_bad_score():
    bad = json.dumps(verdict(overall={"score": 6, "justification": "great"}))
    res, be = judge([bad, json.dumps(verdict())])
    assert res.status == "scored" and res.attempts == 2 and len(res.raw_outputs) == 2
    repair = be.calls[1][0]
    assert repair[-2].role == "assistant" and repair[-2].content == bad
    assert "overall: Tier-2 score 6 is outside 1-5" in repair[-1].content


# ---------------------------------------------------------------- unscored paths (each with its reason)


@pytest.mark.parametrize("bad,reason", [
    ("I think the rationale is fine, overall 4/5.", "no JSON object found"),
    ("{this is: not json at all", "no parseable JSON object"),
    (json.dumps(verdict(c2_slicing={"score": 2, "justification": "x"})),
     "c2_slicing: Tier-1 score 2 is not 0, 1 or null"),
    (json.dumps(verdict(clarity={"score": 0, "justification": "x"})), "clarity: Tier-2 score 0 is outside 1-5"),
    (json.dumps(verdict(safety={"score": 3.5, "justification": "x"})), "safety: score 3.5 is not an integer"),
    (json.dumps(verdict(safety={"score": "high", "justification": "x"})), "safety: score 'high' is not an integer"),
    (json.dumps(verdict(safety={"score": True, "justification": "x"})), "boolean"),
    (json.dumps(verdict(c4_lag={"justification": "x"})), "c4_lag: no 'score' field"),
    (json.dumps({k: v for k, v in verdict().items() if k != "c6_interaction"}), "missing dimension(s): c6_interaction"),
    ("[1, 2, 3]", "no JSON object found"),
])
def test_invalid_twice_is_unscored_with_reason(bad, reason):
    res, be = judge([bad, bad])
    assert res.status == "unscored" and res.unscored_code == "invalid_output"
    assert reason in res.unscored_reason and "after one repair" in res.unscored_reason
    assert res.attempts == 2 and len(be.calls) == 2  # exactly one repair, then stop
    assert all(v is None for v in (*res.tier1.values(), *res.tier2.values()))  # never a silent score


def test_truncated_output_reason_mentions_max_tokens():
    res, _ = judge(['{"c1_alignment": {"score": 1', '{"c1_alignment": {"score": 1'], finish_reason="length",
                   max_tokens=20)
    assert res.status == "unscored" and "max_tokens=20" in res.unscored_reason


def test_empty_rationale_is_unscored_without_a_call():
    res, be = judge([], rationale="   ")
    assert res.status == "unscored" and res.unscored_code == "empty_rationale" and be.calls == []


@pytest.mark.parametrize("first", [True, False])
def test_backend_error_is_unscored(first):
    # a non-transient error is retried once without the schema (a backend may refuse schemas), then gives up
    replies = [BackendError("model exploded")] * 2
    replies = replies if first else ["no json", *replies]
    res, _ = judge(replies)
    assert res.status == "unscored" and res.unscored_code == "backend_error"
    assert "model exploded" in res.unscored_reason and f"attempt {1 if first else 2}" in res.unscored_reason


def test_extract_json_prefers_fenced_object():
    assert extract_json('prose {"a": 1} more ```json\n{"b": 2}\n```') == {"b": 2}


def test_schema_compiles_to_a_llama_cpp_grammar():
    """The schema must be one llama.cpp can enforce (it becomes a GBNF grammar)."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    g = json_schema_to_gbnf(json.dumps(judge_json_schema()))
    assert "c6_interaction" in g and "overall" in g


def test_scores_only_mode_asks_for_bare_scores_and_parses_them():
    """justify=False (the demo's budget mode): schema, prompt and repair ask for bare scores only."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    bare = {**T1, **T2}
    res, be = judge(["not json", json.dumps(bare)], justify=False)
    assert res.status == "scored" and res.attempts == 2 and not res.justify
    assert res.tier1 == T1 and res.tier2 == T2 and set(res.justifications.values()) == {""}
    schema = be.calls[0][1].json_schema
    assert schema == judge_json_schema(False) and schema["properties"]["overall"] == {"enum": [1, 2, 3, 4, 5, None]}
    assert "justification" not in be.calls[0][0][1].content and '"overall": <1-5>' in be.calls[0][0][1].content
    assert "a bare score" in be.calls[1][0][-1].content
    assert "justification" not in json_schema_to_gbnf(json.dumps(schema))
    # an out-of-range bare score is still refused, not clipped
    res, _ = judge([json.dumps({**bare, "overall": 9})] * 2, justify=False)
    assert res.status == "unscored" and "overall" in res.unscored_reason


# ---------------------------------------------------------------- aggregation (METHOD.md)


def R(t1, t2, **meta) -> JudgeResult:
    return JudgeResult(tier1={d: t1.get(d) for d in TIER1}, tier2={d: t2.get(d) for d in TIER2},
                       status="scored", meta=meta)


def test_aggregation_exactly_as_the_paper():
    res = [
        R({"c1_alignment": 1, "c2_slicing": 0}, {"overall": 4, "safety": 5}),
        R({"c1_alignment": 0}, {"overall": 2, "safety": None}),
        R({"c1_alignment": 1, "c2_slicing": 1}, {"overall": 3}),
        R({}, {"overall": 5}),
        JudgeResult(unscored_code="invalid_output", unscored_reason="x"),
        JudgeResult(unscored_code="empty_rationale", unscored_reason="y"),
    ]
    agg = aggregate_judgements(res)
    assert (agg["n"], agg["n_scored"], agg["n_unscored"]) == (6, 4, 2)
    assert agg["unscored_by_reason"] == {"invalid_output": 1, "empty_rationale": 1}
    t1 = agg["tier1"]
    assert t1.loc["c1_alignment", "invocation_rate"] == 3 / 4
    assert t1.loc["c1_alignment", "conditional_accuracy"] == 2 / 3
    assert t1.loc["c1_alignment", "coverage"] == 2 / 4
    assert t1.loc["c2_slicing", "conditional_accuracy"] == 1 / 2 and t1.loc["c2_slicing", "coverage"] == 1 / 4
    assert t1.loc["c4_lag", "invocation_rate"] == 0 and math.isnan(t1.loc["c4_lag", "conditional_accuracy"])
    assert agg["tier1_headline"] == pytest.approx((2 / 3 + 1 / 2) / 2)  # over the two defined dimensions
    assert agg["tier1_headline_dims"] == ["c1_alignment", "c2_slicing"] and "2 of 6" in agg["tier1_headline_note"]
    assert agg["tier2"].loc["overall", "mean"] == pytest.approx(3.5) and agg["tier2"].loc["overall", "n"] == 4
    assert agg["tier2"].loc["safety", "mean"] == 5 and agg["tier2"].loc["safety", "n"] == 1
    assert math.isnan(agg["tier2"].loc["clarity", "mean"])


def test_aggregation_nothing_scored():
    agg = aggregate_judgements([JudgeResult(unscored_code="backend_error", unscored_reason="down")])
    assert agg["n_scored"] == 0 and math.isnan(agg["tier1_headline"]) and agg["n_unscored"] == 1


def test_judgement_table_groups_by_meta():
    res = [R({"c1_alignment": 1}, {"overall": 4}, system="rag", model="a"),
           R({"c1_alignment": 0}, {"overall": 2}, system="rag", model="a"),
           R({}, {"overall": 5}, system="phia", model="a")]
    t = judgement_table(res, by=("system", "model")).set_index("system")
    assert t.loc["rag", "n"] == 2 and t.loc["rag", "c1_alignment_cond_acc"] == 0.5 and t.loc["rag", "overall"] == 3
    assert t.loc["phia", "c1_alignment_invocation"] == 0 and math.isnan(t.loc["phia", "tier1_headline"])


# ---------------------------------------------------------------- records in, results out


def test_judge_records_with_text_and_window_sources():
    import datetime as dt

    import pandas as pd

    from balms.data.schema import Channel, Sample, Target, Window

    rec = PredictionRecord(sample_id="globem/u1/2018-05-02/L3", dataset="globem", user="u1", target_date="2018-05-02",
                           lookback=3, label=0, source="real", system="healthllm", cot=True, model="m", model_id="m",
                           prediction=2, rationale="Steps fell to 920 on day 3.")
    be = FakeJudge([json.dumps(verdict())] * 2)
    out = judge_records([rec], {rec.sample_id: "WINDOW TEXT"}, be)
    assert out[0].status == "scored" and out[0].meta["system"] == "healthllm"
    assert out[0].meta["sample_id"] == rec.sample_id
    assert "WINDOW TEXT" in be.calls[0][0][1].content and out[0].meta["scale"] == [0, 3]
    s = Sample("globem", "u1", dt.date(2018, 5, 2), 0, 3, dt.date(2018, 4, 29), dt.date(2018, 5, 1))
    w = Window(s, Target("anx", "anxiety", 0, 3),
               pd.DataFrame({"steps": [1.0, 2.0, 920.0]}, index=pd.date_range("2018-04-29", periods=3)),
               [Channel("steps", "Steps", "steps", "wearable", decimals=0)])
    judge_records([rec], lambda r: w, be)
    assert "- Steps (steps): [1, 2, 920]" in be.calls[1][0][1].content  # the canonical render_window text
    with pytest.raises(KeyError, match="no window"):
        judge_records([rec], {}, be)


def test_prompt_names_every_dimension():
    msgs = build_messages(**{k: v for k, v in KW.items() if k not in ("scale", "target")})
    assert all(d in msgs[1].content for d in DIMENSIONS) and msgs[0].role == "system"


# ---------------------------------------------------------------- a real embedded model


@pytest.mark.slow
def test_real_embedded_judge_scores_or_says_why(isolated_cache):
    """SmolLM2-135M as judge under the JSON-schema grammar: it must end scored with in-range values or
    unscored with a reason; either way nothing silent."""
    from balms.models.registry import get_backend

    case = json.loads((resources.files("balms") / "resources" / "case_study_d1.json").read_text())
    window_text = "\n".join(f"- {k} ({v['unit']}): {v['values']}" for k, v in case["window"].items())
    be = get_backend("smollm2-135m", cache_mode="off")
    r = case["rationales"]["Qwen2.5-7B-Instruct"]
    res = judge_rationale(be, window_text=window_text, gold=0, predicted=r["prediction"], rationale=r["text"],
                          scale=(0, 3), target="PHQ-4 anxiety", max_tokens=400)
    assert res.raw_outputs and res.model_id
    if res.status == "scored":
        assert all(v in (0, 1, None) for v in res.tier1.values())
        assert all(v is None or 1 <= v <= 5 for v in res.tier2.values())
        assert res.attempts == 1  # the grammar makes the first answer valid
    else:
        assert res.unscored_reason


@pytest.mark.realdata
def test_cli_judge_run_on_real_pmdata_windows(pmdata_dir, tmp_path, monkeypatch, capsys):
    """`balms judge run` rebuilds each record's window from the real data: the judge sees exactly the
    channel arrays the (Health-LLM) agent was shown, and one verdict per line is written."""
    from agent_fakes import ScriptedBackend, real_tables, samples_of
    from balms.agents.registry import make_agent
    from balms.cli import main
    from balms.models import registry

    tables, samples = samples_of("real", "pmdata")
    monkeypatch.setattr("balms.data.loading.load_dataset", lambda name, *a, **k: real_tables(name))
    agent_be = ScriptedBackend(["Sleep was short on day 3.\nAnswer: 3", "Answer: 2", "Steps rose.\nAnswer: 4"])
    recs = [make_agent("healthllm", cot=True, style="corrected").predict(s, tables, agent_be) for s in samples[:3]]
    path = tmp_path / "run.jsonl"
    path.write_text("\n".join(r.model_dump_json() for r in recs) + "\n")
    fake = FakeJudge([json.dumps(verdict())] * 2)
    monkeypatch.setattr(registry, "get_backend", lambda name, **kw: fake)
    assert main(["judge", "run", "--records", str(path), "--model", "fake", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["n"] == 3 and summary["n_scored"] == 2 and summary["unscored_by_reason"] == {"empty_rationale": 1}
    lines = (tmp_path / "run.judge.jsonl").read_text().splitlines()
    assert len(lines) == 3 and json.loads(lines[2])["meta"]["sample_id"] == recs[2].sample_id
    agent_prompt = agent_be.calls[0][0][-1].content
    judge_prompt = fake.calls[0][0][1].content
    window_lines = [ln for ln in judge_prompt.splitlines() if ln.startswith("- ") and ": [" in ln]
    assert len(window_lines) >= 3 and all(ln in agent_prompt for ln in window_lines)
    # the library form: DatasetTables in, same window text
    fake2 = FakeJudge([json.dumps(verdict())])
    judge_records(recs[:1], tables, fake2)
    assert fake2.calls[0][0][1].content == judge_prompt
    # the budget mode from the command line: bare scores, the given output budget
    fake3 = FakeJudge([json.dumps({**T1, **T2})])
    monkeypatch.setattr(registry, "get_backend", lambda name, **kw: fake3)
    assert main(["judge", "run", "--records", str(path), "--model", "fake", "--limit", "1", "--scores-only",
                 "--max-tokens", "200", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["n_scored"] == 1
    assert fake3.calls[0][1].max_tokens == 200 and fake3.calls[0][1].json_schema == judge_json_schema(False)


def test_backend_refusing_the_schema_falls_back_to_free_text():
    class NoSchema(FakeJudge):
        def generate(self, messages, params):
            if params.json_schema is not None:
                self.calls.append((list(messages), params))
                raise BackendError("schema not supported")
            return super().generate(messages, params)

    be = NoSchema([f"Sure! {json.dumps(verdict())}"])
    res = judge_rationale(be, **KW)
    assert res.status == "scored" and res.tier2 == T2 and "schema not supported" in res.meta["schema_refused"]
    assert be.calls[0][1].json_schema is not None and be.calls[1][1].json_schema is None


# ---------------------------------------------------------------- retries: exactly one layer


def test_remote_judge_from_registry_retries_in_one_layer(isolated_cache):
    """get_backend puts a retry layer under the cache of a remote model; the judge must not add its own on
    top (3 judge tries x 3 backend tries = 9 requests to a server that keeps failing)."""
    from balms.models.registry import get_backend
    from fake_servers import FakeOpenAIServer

    with FakeOpenAIServer(faults=["500"] * 20) as srv:
        be = get_backend("Qwen2.5-7B-Instruct", base_urls=[srv.url], retries=2, cache_mode="off")
        res = judge_rationale(be, **KW)
        assert len(srv.requests) == 3  # the backend's own 1 + 2 retries, nothing more
    assert res.status == "unscored" and res.unscored_code == "backend_error"
    assert "gave up after 3 attempts" in res.unscored_reason


def test_judge_records_shares_the_backends_retry_layer(isolated_cache):
    from balms.models.registry import get_backend
    from fake_servers import FakeOpenAIServer

    recs = [PredictionRecord(sample_id=f"pmdata/p01/2020-01-1{i}/L14", dataset="pmdata", user="p01",
                             target_date=f"2020-01-1{i}", lookback=14, label=3, source="real", system="cot",
                             cot=True, model="fake", model_id="fake", rationale="Steps fell.", prediction=4)
            for i in (1, 2)]
    with FakeOpenAIServer(faults=["503"] * 20) as srv:
        be = get_backend("Qwen2.5-7B-Instruct", base_urls=[srv.url], retries=1, cache_mode="off")
        res = judge_records(recs, {r.sample_id: "window text" for r in recs}, be)
        assert len(srv.requests) == 4  # 2 records x (1 + 1 retry)
    assert [r.unscored_code for r in res] == ["backend_error"] * 2


def test_bare_backend_gets_the_judges_own_retries():
    """A backend without a retry layer (an in-process fake here) is still retried on transient errors."""
    from fake_servers import FakeBackend

    be = FakeBackend(errors=[BackendError("overloaded", transient=True)] * 10)
    res = judge_rationale(be, **KW)
    assert be.calls == 3 and res.unscored_code == "backend_error"
    be = FakeBackend(errors=[BackendError("overloaded", transient=True)] * 2)  # then a (non-JSON) answer
    res = judge_rationale(be, **KW)
    assert be.calls == 4 and res.unscored_code == "invalid_output"  # 3 tries, then the repair call


@pytest.mark.realdata
def test_judge_sees_a_paper_style_window_as_the_agent_did(pmdata_dir):
    """Paper-style records: the judge gets the agent's own sensor lines (paper sleep recipe, 4-decimal resting
    HR), not the corrected rendering."""
    from agent_fakes import ScriptedBackend, samples_of
    from balms.agents.registry import make_agent

    tables, samples = samples_of("real", "pmdata")
    be = ScriptedBackend(["Sleep was long on day 3.\nAnswer: 3"])
    rec = make_agent("healthllm", cot=True).predict(samples[7], tables, be)
    fake = FakeJudge([json.dumps(verdict())])
    judge_records([rec], tables, fake)
    judge_prompt = fake.calls[0][0][1].content
    lines = [ln for ln in judge_prompt.splitlines() if ln.startswith("[") and "]: [" in ln]
    assert [ln.split("]")[0] for ln in lines] == ["[Steps", "[Burned Calories", "[Resting Heart Rate", "[SleepMinutes"]
    assert all(ln in be.calls[0][0][1].content for ln in lines)


def test_case_study_items_carry_the_papers_audit():
    from balms.experiments.judging import case_study_items

    items = {it["name"]: it for it in case_study_items()}
    assert set(items) == {"Qwen2.5-7B-Instruct", "Claude-Haiku-4.5"}
    assert items["Qwen2.5-7B-Instruct"]["paper_wrong_day"] == 2 and items["Claude-Haiku-4.5"]["paper_wrong_day"] == 0
    assert "[Steps]: [12104," in items["Claude-Haiku-4.5"]["window_text"] and items["Claude-Haiku-4.5"]["rationale"]


def test_judge_vs_grounding_rank_correlation():
    """Negative when the judge scores rationales with more wrong claims lower; NaN (not a number made up) when
    the judge gives everything the same score or too few rationales have a checked claim."""
    import pandas as pd

    from balms.experiments.judging import judge_vs_grounding

    keys = dict(dataset="pmdata", system="healthllm", model="m")
    judged = pd.DataFrame([dict(keys, sample_id=f"s{i}", judge_status="scored", overall=5.0 - i) for i in range(5)])
    ground = pd.DataFrame([dict(keys, sample_id=f"s{i}", n_claims=4, wrong_day=i % 3, value_not_found=i // 3)
                           for i in range(5)])  # wrong shares 0, .25, .5, .25, .5 (ranks tie)
    got = judge_vs_grounding(judged, ground)
    assert got["n"] == 5 and got["rho"] < -0.5
    flat = judge_vs_grounding(judged.assign(overall=3.0), ground)
    assert math.isnan(flat["rho"]) and flat["n"] == 5
    none = judge_vs_grounding(judged, ground.assign(n_claims=0))  # no checked claim: no share to rank
    assert math.isnan(none["rho"]) and none["n"] == 0
    unscored = judge_vs_grounding(judged.assign(judge_status="unscored"), ground)
    assert unscored["n"] == 0
    assert judge_vs_grounding(judged.drop(columns="overall"), ground)["n"] == 0  # no rationale scored at all


def test_judge_case_study_rows_are_numbers_even_when_unscored(monkeypatch):
    """Notebook 07 subtracts D.1's two evidence-grounding scores: a rationale the judge could not score must give
    NaN (the gap is then NaN and the check fails), never None (a TypeError that stopped the paper dry run)."""
    import balms.models.registry as registry
    from balms.experiments import judging
    from balms.experiments.config import load

    replies = [json.dumps(verdict()), "no json", "still no json"]  # Qwen's scored; Claude's twice invalid
    be = FakeJudge(replies)
    monkeypatch.setattr(registry, "get_backend", lambda *a, **k: be)
    monkeypatch.setattr("balms.models.routing.check_models", lambda *a, **k: {})
    cfg = load("paper")  # the paper's judge: one JSON answer per rationale
    d1 = judging.judge_case_study(cfg, judge_model="fake-judge").set_index("rationale")
    assert d1.loc["Qwen2.5-7B-Instruct", "evidence_grounding"] == 2.0
    assert d1.loc["Claude-Haiku-4.5", "judge_status"] != "scored"
    assert math.isnan(d1.loc["Claude-Haiku-4.5", "evidence_grounding"]) and len(be.calls) == 3
    assert d1["overall"].dtype == float


def test_judge_into_resumes_cuts_a_torn_line_and_retries_backend_errors(tmp_path):
    """The one judge loop (notebook 07 and `balms judge run`): a stored verdict under the same key is reused, a torn
    last line is cut off with a warning (so the next verdict appended is readable), a backend error is judged again."""
    from balms.judges.loop import judge_into

    recs = [PredictionRecord(sample_id=f"globem/u1/2018-05-0{i}/L3", dataset="globem", user="u1",
                             target_date=f"2018-05-0{i}", lookback=3, label=0, source="real", system="healthllm",
                             cot=True, model="m", model_id="m", prediction=2, rationale="Steps fell.")
            for i in (2, 3, 4)]
    windows = {r.sample_id: "WINDOW" for r in recs}
    path = tmp_path / "cell.judge.jsonl"
    first = judge_into(path, recs[:1], windows, FakeJudge([json.dumps(verdict())]), judge_model="j", key="k1")
    assert first[0]["status"] == "scored"
    err = judge_into(path, recs[1:2], windows, FakeJudge([BackendError("down")] * 2), judge_model="j", key="k1")
    assert err[0]["unscored_code"] == "backend_error"
    path.write_text(path.read_text() + '{"sample_id": "globem/u1/2018-05-04/L3", "sta')  # a crash mid-write
    be = FakeJudge([json.dumps(verdict())] * 2)
    with pytest.warns(UserWarning, match="torn last line"):
        out = judge_into(path, recs, windows, be, judge_model="j", key="k1")
    assert len(be.calls) == 2  # the backend error and the torn one; the first verdict was reused
    assert [v["status"] for v in out] == ["scored"] * 3
    lines = [json.loads(x) for x in path.read_text().splitlines()]  # every line readable
    # the backend error's line was dropped from the file (no verdict), its re-judged verdict appended
    assert [v["sample_id"] for v in lines] == [recs[0].sample_id, recs[1].sample_id, recs[2].sample_id]
    assert [v["status"] for v in lines] == ["scored"] * 3
    other = FakeJudge([json.dumps(verdict())] * 3)
    judge_into(path, recs, windows, other, judge_model="j", key="k2")  # another key: judged again
    assert len(other.calls) == 3
