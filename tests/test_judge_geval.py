"""The "geval" judge mode: scores from the judge's token distribution, one question per dimension.

Fast tests drive a scripted backend that returns top log-probabilities; one slow test runs the real embedded
judge on case study D.1 and requires it to rank Claude's rationale above Qwen's on evidence grounding."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from balms import paths
from balms.judges import geval
from balms.judges.case_file import load_case, render_case_window
from balms.judges.llm_judge import JudgeResult, judge_rationale, judge_records
from balms.judges.rubric import TIER1, TIER2
from balms.models.base import BackendError, Completion, GenParams, Message
from balms.models.cache import CachedBackend, ResponseCache, cache_key
from balms.records import PredictionRecord

L = math.log


def dim_of(messages) -> str:
    """Which rubric dimension a geval question asks (the suffix after the shared prefix names it)."""
    q = messages[-1].content.rsplit(">>>", 1)[1]
    for d, text in {**TIER1, **TIER2}.items():  # each question carries the paper's line for its dimension
        if text in q:
            return d
    raise AssertionError(f"no dimension in {q[:200]!r}")


class LogprobJudge:
    """Scripted judge: per dimension, the top log-probabilities of the answer position (None = no logprobs)."""

    def __init__(self, tops: dict, model_id="fake-lp"):
        self.tops = tops
        self.model_id = model_id
        self.calls = []

    def generate(self, messages, params):
        self.calls.append((list(messages), params))
        d = dim_of(messages)
        top = self.tops.get(d, self.tops.get("*"))
        if isinstance(top, Exception):
            raise top
        text = max(top, key=top.get).strip() if top else "3"
        return Completion(text=text, model_id=self.model_id, logprobs=None if top is None else [top])


T1_TOP = {"N": L(0.5), "1": L(0.3), "0": L(0.15), "No": L(0.05)}
T2_TOP = {"5": L(0.5), "3": L(0.3), "Hello": L(0.2)}  # renormalised over digits: 5 -> .625, 3 -> .375
KW = dict(window_text="Daily data ...\n- Steps (steps): [1, 2, 3]", gold=0, predicted=3,
          rationale="Steps dropped on day 3 (3 steps).", scale=(0, 3), target="PHQ-4 anxiety")


def run(tops, **kw):
    be = LogprobJudge(tops)
    return judge_rationale(be, **{**KW, "mode": "geval", **kw}), be


def test_expectation_over_score_tokens():
    res, be = run({**{d: T1_TOP for d in TIER1}, "*": T2_TOP})
    assert res.status == "scored" and res.mode == "geval" and not res.grounding_hint
    assert all(res.tier2[d] == pytest.approx(0.625 * 5 + 0.375 * 3) for d in TIER2)
    assert res.probs["overall"] == pytest.approx({"5": 0.625, "3": 0.375})
    assert res.prob_mass["overall"] == pytest.approx(0.8)
    assert res.tier1 == {d: None for d in TIER1}  # "N" (not used) is the most probable of 1/0/N
    assert res.attempts == len(TIER1) + len(TIER2) == len(be.calls)


def test_tier1_takes_the_most_probable_outcome_and_tier2_keeps_the_distribution():
    tops = {"c1_alignment": {"1": L(0.6), "0": L(0.3), "N": L(0.1)},
            "c2_slicing": {"0": L(0.7), "N": L(0.2)},
            "*": {"2": L(0.9), " 4": L(0.05), "4": L(0.05)}}  # " 4" and "4" are both the answer 4
    tops.update({d: {"N": L(0.9)} for d in TIER1 if d not in tops})
    res, _ = run(tops)
    assert res.tier1["c1_alignment"] == 1 and res.tier1["c2_slicing"] == 0 and res.tier1["c4_lag"] is None
    assert res.tier2["clarity"] == pytest.approx(0.9 * 2 + 0.1 * 4)
    assert res.probs["clarity"] == pytest.approx({"2": 0.9, "4": 0.1})


def test_missing_score_tokens_are_just_absent_not_invented():
    res, _ = run({"*": {"4": L(0.2), "x": L(0.8)}, **{d: {"1": L(0.1)} for d in TIER1}})
    assert res.status == "scored" and res.tier2["overall"] == 4.0 and res.probs["overall"] == {"4": 1.0}
    assert res.tier1 == {d: 1 for d in TIER1}


def test_no_score_token_is_unscored_with_the_dimension_named():
    tops = {**{d: T1_TOP for d in TIER1}, "*": T2_TOP, "evidence_grounding": {"The": L(0.7), "A": L(0.3)}}
    res, _ = run(tops)
    assert res.status == "unscored" and res.unscored_code == "no_score_tokens"
    assert "evidence_grounding" in res.unscored_reason and "'The'" in res.unscored_reason
    assert res.tier2 == {d: None for d in TIER2}  # nothing partial is reported as a score


def test_backend_without_logprobs_is_unscored_and_says_so():
    res, be = run({"*": None})
    assert res.status == "unscored" and res.unscored_code == "no_logprobs" and "paper" in res.unscored_reason
    assert len(be.calls) == 1  # stops at the first dimension


def test_backend_error_is_unscored():
    res, _ = run({"*": BackendError("model crashed")})
    assert res.unscored_code == "backend_error" and "model crashed" in res.unscored_reason


def test_requests_one_character_with_logprobs_and_a_shared_prefix():
    _, be = run({**{d: T1_TOP for d in TIER1}, "*": T2_TOP})
    prefixes = set()
    for msgs, params in be.calls:
        assert params.temperature == 0 and params.max_tokens == 1 and params.logprobs == geval.TOP_LOGPROBS
        assert params.grammar == geval.grammar_for(dim_of(msgs))
        prefixes.add((msgs[0].content, msgs[1].content.rsplit(">>>", 1)[0]))
    assert len(prefixes) == 1  # a prefix cache evaluates the window and rationale once
    assert KW["rationale"] in next(iter(prefixes))[1]


def test_grounding_hint_only_in_the_evidence_question_and_it_names_the_wrong_days():
    case = load_case(paths.CASE_STUDY_D1)
    r = case["rationales"]["Qwen2.5-7B-Instruct"]
    be = LogprobJudge({**{d: T1_TOP for d in TIER1}, "*": T2_TOP})
    res = judge_rationale(be, **{**KW, "rationale": r["text"]}, mode="geval", grounding_hint=True,
                          window=case["window"])
    assert res.grounding_hint
    hinted = [dim_of(m) for m, _ in be.calls if "Automatic fact-check" in m[-1].content]
    assert hinted == ["evidence_grounding"]
    msg = next(m for m, _ in be.calls if dim_of(m) == "evidence_grounding")[-1].content
    assert msg.count("WRONG DAY") == 2 and "shows this value on day 3" in msg and "on day 12" in msg


def test_grounding_hint_without_a_window_is_a_clear_error():
    with pytest.raises(ValueError, match="needs the window"):
        run({"*": T2_TOP}, grounding_hint=True)


def test_paper_mode_is_the_default_and_can_take_the_hint():
    from test_judge import FakeJudge, verdict

    case = load_case(paths.CASE_STUDY_D1)
    be = FakeJudge([json.dumps(verdict())])
    res = judge_rationale(be, **{**KW, "rationale": case["rationales"]["Qwen2.5-7B-Instruct"]["text"]},
                          grounding_hint=True, window=case["window"])
    assert res.mode == "paper" and res.grounding_hint and res.status == "scored"
    assert "WRONG DAY" in be.calls[0][0][1].content and be.calls[0][1].logprobs == 0
    with pytest.raises(ValueError, match="unknown judge mode"):
        judge_rationale(be, **KW, mode="greedy")


def test_verdict_records_carry_the_mode():
    rec = PredictionRecord(sample_id="globem/INS-W_010/2018-05-02/L14", dataset="globem", user="INS-W_010",
                           target_date="2018-05-02", lookback=14, label=0, source="real", system="healthllm",
                           cot=True, model="m", model_id="m", rationale="Sleep was short on day 3.", prediction=2)
    be = LogprobJudge({**{d: T1_TOP for d in TIER1}, "*": T2_TOP})
    [res] = judge_records([rec], {rec.sample_id: "window text"}, be, mode="geval")
    dumped = json.loads(res.model_dump_json())
    assert dumped["mode"] == "geval" and dumped["grounding_hint"] is False and dumped["probs"]["overall"]
    back = JudgeResult.model_validate(dumped)
    assert back.tier2 == res.tier2 and isinstance(back.tier2["overall"], float)
    old = JudgeResult.model_validate({"status": "scored", "tier2": {d: 3 for d in TIER2}})  # a pre-geval verdict
    assert old.mode == "paper" and old.tier2["overall"] == 3 and isinstance(old.tier2["overall"], int)


def test_judge_key_and_config_name_the_mode():
    from balms.experiments.config import ExperimentConfig, load
    from balms.experiments.judging import judge_key

    demo = ExperimentConfig()
    assert demo.judge_mode == "geval" and demo.judge_grounding_hint is True
    paper = load("paper")
    assert paper.judge_mode == "paper" and paper.judge_grounding_hint is False
    k = judge_key(demo, "m", "id")
    assert judge_key(demo.replace(judge_mode="paper"), "m", "id") != k
    assert judge_key(demo.replace(judge_grounding_hint=False), "m", "id") != k
    assert judge_key(demo, "m", "id") == k


# ---------------------------------------------------------------- logprobs through the model layer


def test_logprobs_enter_the_cache_key_only_when_asked():
    msgs = [Message("user", "x")]
    assert "logprobs" not in GenParams().cache_key_fields()  # every existing key is unchanged
    assert cache_key("m", msgs, GenParams(logprobs=20)) != cache_key("m", msgs, GenParams())
    assert cache_key("m", msgs, GenParams(logprobs=20)) != cache_key("m", msgs, GenParams(logprobs=5))


def test_cached_completion_keeps_its_logprobs(tmp_path):
    class LP:
        model_id = "lp"
        calls = 0

        def generate(self, messages, params):
            LP.calls += 1
            return Completion(text="4", model_id="lp", logprobs=[{"4": L(0.6), "3": L(0.4)}])

    path = tmp_path / "c.sqlite"
    first = CachedBackend(LP(), ResponseCache(path)).generate([Message("user", "x")], GenParams(logprobs=20))
    again = CachedBackend(LP(), ResponseCache(path), mode="replay").generate([Message("user", "x")],
                                                                             GenParams(logprobs=20))
    assert again.cached and again.logprobs == first.logprobs and LP.calls == 1


def test_llamacpp_logprob_recorder_is_a_log_softmax_top_k():
    np = pytest.importorskip("numpy")
    from balms.models.llamacpp import LlamaCppBackend

    class Vocab:
        words = ["1", "2", "3", " 3", "<|im_end|>"]

        def detokenize(self, ids, special=False):
            return self.words[ids[0]].encode()

    logits = np.array([0.0, 1.0, 2.0, 2.0, -1.0], dtype=np.float32)
    steps: list = []
    out = LlamaCppBackend._logprob_recorder(Vocab(), 3, steps)([], logits)
    assert out is logits  # the distribution is only read, never changed
    p = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    assert list(steps[0]) == ["3", " 3", "2"]
    assert steps[0]["3"] == pytest.approx(math.log(p[2])) and steps[0]["2"] == pytest.approx(math.log(p[1]))


# ---------------------------------------------------------------- the real embedded judge on case study D.1


@pytest.mark.slow
def test_real_geval_judge_ranks_claude_above_qwen_on_evidence_grounding(isolated_cache):
    """Case study D.1: Qwen's rationale puts two of its four values on the wrong day, Claude's none. The demo's
    judge configuration (geval + grounding hint) with the real embedded model must grade Claude's higher.

    The real model's answers come from the demo's committed responses (notebook 07 judged D.1 with this
    configuration), keyed by the exact request: while no prompt changed, no model runs; a change to what the judge
    is sent misses the cache and the real model answers (the test then takes minutes, as it did before)."""
    from balms import bundle
    from balms.experiments.config import ExperimentConfig
    from balms.models.registry import get_backend

    bundle.import_responses(paths.PROJECT_ROOT / "results" / "demo" / "responses.jsonl.gz", cache_dir=isolated_cache)
    cfg = ExperimentConfig()
    case = load_case(Path(paths.CASE_STUDY_D1))
    be = get_backend(cfg.judge_model, cache_mode="rw")
    eg = {}
    for name, r in case["rationales"].items():
        res = judge_rationale(be, window_text=render_case_window(case), gold=case["gold_label"],
                              predicted=r["prediction"], rationale=r["text"], scale=tuple(case["scale"]),
                              target="PHQ-4 anxiety subscale item (feel_anxious)", mode=cfg.judge_mode,
                              grounding_hint=cfg.judge_grounding_hint, window=case["window"])
        assert res.status == "scored", res.unscored_reason
        assert res.mode == cfg.judge_mode and res.grounding_hint == cfg.judge_grounding_hint
        assert all(1 <= v <= 5 for v in res.tier2.values()) and set(res.tier1.values()) <= {0, 1, None}
        eg[name] = res.tier2["evidence_grounding"]
    assert eg["Claude-Haiku-4.5"] > eg["Qwen2.5-7B-Instruct"], eg


@pytest.mark.slow
def test_real_llamacpp_logprobs_match_the_greedy_token(isolated_cache):
    """SmolLM2 (cheap): one top-k dict per generated token, log-probabilities, and the greedy token is the top
    one of its step (so the recorder reads the logits in token-id order); with a grammar the text obeys the
    grammar while the recorded distribution stays the model's own."""
    from balms.models.registry import get_backend

    be = get_backend("smollm2-135m", cache_mode="off")
    msgs = [Message("system", "You answer briefly."), Message("user", "Count: one, two, three,")]
    comp = be.generate(msgs, GenParams(max_tokens=3, logprobs=5))
    assert comp.logprobs and len(comp.logprobs) == comp.completion_tokens
    for step in comp.logprobs:
        assert 1 <= len(step) <= 5 and all(lp <= 0 for lp in step.values())
        assert sum(math.exp(lp) for lp in step.values()) <= 1 + 1e-6
    top0 = max(comp.logprobs[0], key=comp.logprobs[0].get)
    assert comp.text.startswith(top0) or top0.strip() == "" or comp.text.lstrip().startswith(top0.strip())
    g = be.generate(msgs, GenParams(max_tokens=1, grammar="root ::= [1-5]", logprobs=20))
    assert g.text in {"1", "2", "3", "4", "5"} and len(g.logprobs) == 1
    assert be.generate(msgs, GenParams(max_tokens=1)).logprobs is None
