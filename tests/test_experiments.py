"""The notebooks' shared layer: grids of cached, resumable runs, summaries, the paper-vs-ours tables, judging.

A scripted backend stands in for the model (the real-model path is covered by the smoke notebooks); the data
are the synthetic PMData cohort read through the real loader.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from balms import experiments as ex
from balms.experiments import cohorts
from balms.experiments.grid import eval_samples
from balms.judges.rubric import TIER1, TIER2
from balms.models.base import Completion


class Scripted:
    """Answers 'Answer: 3' to predictions and a fixed verdict to judge prompts; counts calls."""

    model_id = "scripted:test"
    name = "scripted"

    def __init__(self):
        self.calls = 0

    def generate(self, messages, params):
        self.calls += 1
        if params.json_schema is not None or "rubric" in messages[0].content.lower():
            v = {d: {"score": 1, "justification": "ok"} for d in TIER1}
            v.update({d: {"score": 4, "justification": "ok"} for d in TIER2})
            v["c4_lag"] = {"score": None, "justification": "not invoked"}
            text = json.dumps(v)
        else:
            text = "Sleep was 352 minutes on day 1, so stress is moderate.\nAnswer: 3"
        return Completion(text=text, model_id=self.model_id, prompt_tokens=100, completion_tokens=10, latency_s=0.01)


@pytest.fixture()
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("BALMS_RAW_DIR", str(tmp_path / "no_raw"))  # -> synthetic cohorts
    monkeypatch.setenv("BALMS_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("BALMS_OUTPUT_DIR", str(tmp_path / "out"))
    cohorts._cohort.cache_clear()
    backend = Scripted()
    import balms.models.registry as reg

    monkeypatch.setattr(reg, "get_backend", lambda name=None, **kw: backend)
    import balms.models.routing as routing

    monkeypatch.setattr(routing, "check_models", lambda *a, **kw: {})  # "scripted" is no registry model
    cfg = ex.ExperimentConfig(profile="t", datasets=["pmdata"], systems=["healthllm"], judge_systems=["healthllm"],
                              backbones=["scripted"],
                              n_samples=4, seed=0, judge_justify=True, judge_mode="paper",
                              judge_grounding_hint=False)
    yield cfg, backend
    cohorts._cohort.cache_clear()


def test_eval_samples_are_seeded_and_identical_across_calls(env):
    cfg, _ = env
    co = ex.cohort("pmdata", cfg)
    assert co.source == "synthetic"
    a, b = co.eval_samples(4, 0), co.eval_samples(4, 0)
    assert [s.sample_id for s in a] == [s.sample_id for s in b] and len(a) == 4
    assert [s.sample_id for s in co.eval_samples(4, 1)] != [s.sample_id for s in a]
    assert set(s.sample_id for s in a) <= set(s.sample_id for s in co.test)


def test_an_adhoc_run_is_cached_and_resumable(env):
    cfg, backend = env
    df = ex.run(cfg, ex.adhoc_cells(cfg, cots=(False, True)))
    assert len(df) == 8 and set(df["cot"]) == {False, True} and (df["prediction"] == 3).all()
    calls = backend.calls
    again = ex.run(cfg, ex.adhoc_cells(cfg, cots=(False, True)))
    assert backend.calls == calls  # every record read back from the run files, no model call
    pd.testing.assert_frame_equal(df.reset_index(drop=True), again.reset_index(drop=True))


def test_cot_cells_only_for_cot_systems_in_every_grid(env):
    """`cot_systems` decides which systems get CoT cells wherever a notebook asks for them (02, 04, 06)."""
    cfg, _ = env
    cfg = cfg.replace(systems=["healthllm", "rag"], cot_systems=["healthllm"], n_samples=1)
    df = ex.run(cfg, ex.adhoc_cells(cfg, cots=(False, True)))
    cells = sorted(set(zip(df.system, df.cot, strict=True)))
    assert cells == [("healthllm", False), ("healthllm", True), ("rag", False)]
    every = cfg.replace(cot_systems=None)
    assert len(ex.run(every, ex.adhoc_cells(every, cots=(True,)))) == 2  # None: every system


def test_with_lookback_keeps_target_and_window_end(env):
    cfg, _ = env
    s = ex.cohort("pmdata", cfg).eval_samples(1, 0)[0]
    t = ex.with_lookback(s, 7)
    assert (t.target_date, t.window_end, t.lookback) == (s.target_date, s.window_end, 7)
    assert len(t.window_dates) == 7


def test_config_lookback_cuts_every_cell_window_on_the_same_target_days(env):
    cfg, backend = env
    own = eval_samples(cfg, "pmdata")
    short = eval_samples(cfg.replace(lookback=3), "pmdata")
    assert own[0].lookback == 14 and {s.lookback for s in short} == {3}
    assert [(s.user, s.target_date, s.window_end) for s in short] == [
        (s.user, s.target_date, s.window_end) for s in own]
    assert eval_samples(cfg.replace(lookback=3), "pmdata", lookback=7)[0].lookback == 7  # an explicit sweep wins
    short = cfg.replace(lookback=3, n_samples=1)
    df = ex.run(short, ex.adhoc_cells(short))
    assert list(df["lookback"]) == [3]
    with pytest.raises(ex.ConfigError, match="lookback"):
        cfg.replace(lookback=0)


def test_summarize_and_table3_layout(env):
    cfg, _ = env
    df = ex.run(cfg, ex.adhoc_cells(cfg, cots=(False,)))
    summ = ex.summarize(df, cfg=cfg)
    row = summ.iloc[0]
    y = df["label"].to_numpy()
    assert row["mae"] == pytest.approx(abs(y - 3).mean())
    assert row["mae_ci_low"] <= row["mae"] <= row["mae_ci_high"]
    assert row["mean_predictor_mae"] == pytest.approx(abs(y - ex.cohort("pmdata", cfg).train_mean).mean())
    mp = ex.mean_predictor_rows(cfg)
    assert mp.iloc[0]["mae_raw_mean"] == pytest.approx(row["mean_predictor_mae"])
    t3 = ex.table3_paper_vs_ours(summ, mp, cot=False)
    assert t3.loc[0, "paper Qwen2.5-14B-Instruct"] == pytest.approx(0.62)  # the paper's PMData Health-LLM cell
    assert t3.loc[0, "paper mean predictor"] == pytest.approx(0.48)
    assert t3.loc[0, "ours scripted"] == pytest.approx(row["mae"])
    assert "diff scripted" not in t3.columns  # not a paper backbone: no diff is invented
    # the best constant for MAE beside the mean predictor: the training median, by hand
    med = np.median([s.label for s in ex.cohort("pmdata", cfg).train])
    assert t3.loc[0, "ours best constant (training median)"] == pytest.approx(abs(y - med).mean())


def test_judge_grid_writes_resumable_verdicts_and_aggregates(env):
    cfg, backend = env
    judged = ex.judge_grid(cfg, judge_model="scripted")
    assert len(judged) == 4 and (judged["judge_status"] == "scored").all()
    calls = backend.calls
    ex.judge_grid(cfg, judge_model="scripted")
    assert backend.calls == calls  # verdicts read back from <run>.judge.jsonl
    cfg_bare = cfg.replace(judge_justify=False)
    bare = ex.judge_grid(cfg_bare, judge_model="scripted")
    assert backend.calls == calls + 4  # a scores-only verdict is a different verdict: judged again
    assert all(not r.justify for r in bare["judge_result"]) and all(r.justify for r in judged["judge_result"])
    assert (judged["judge_mode"] == "paper").all() and not judged["judge_grounding_hint"].any()
    # geval mode is a different verdict too; the scripted backend gives no logprobs: unscored, with the reason
    geval = ex.judge_grid(cfg.replace(judge_mode="geval", judge_grounding_hint=True), judge_model="scripted")
    assert backend.calls == calls + 8 and (geval["judge_mode"] == "geval").all() and geval["judge_grounding_hint"].all()
    assert (geval["judge_status"] == "unscored").all()
    assert geval["judge_unscored_reason"].str.contains("log-probabilities").all()
    agg = ex.aggregate_judgements(judged, by=["dataset", "system"])
    assert agg.loc[0, "c1_alignment_cond_acc"] == 1.0 and agg.loc[0, "overall"] == 4.0
    assert pd.isna(agg.loc[0, "c4_lag_cond_acc"])  # never invoked: undefined, not zero
    ground = ex.ground_grid(cfg, judged)
    assert len(ground) == 4 and (ground["n_claims"] >= 1).all()
    # the checker sees the agent's real window: the scripted "352 minutes on day 1" is checked, not unverifiable
    assert (ground["unverifiable"] < ground["n_claims"]).all()


def test_run_announces_each_cell_and_the_runner_bar_on_stderr(env, capsys, monkeypatch):
    """`make paper` shows where it is: papermill forwards the kernel's stderr, so both must go there."""
    cfg, _ = env
    monkeypatch.setenv("BALMS_NOTEBOOK", "01_prediction")
    ex.run(cfg, ex.adhoc_cells(cfg, cots=(False, True), lookbacks=(7,)))
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if "] cell " in ln]
    assert lines == ["[01_prediction] cell 1/2: pmdata healthllm scripted zs L7",
                     "[01_prediction] cell 2/2: pmdata healthllm scripted cot L7"], err
    assert "[01_prediction] scheduler: samples: 100%" in err and "8/8" in err  # the scheduler's bar, on stderr too
    assert "[01_prediction] scheduler: 2/2 cells done" in err
    monkeypatch.delenv("BALMS_NOTEBOOK")
    ex.run(cfg, ex.adhoc_cells(cfg, cots=(False,), lookbacks=(7,), options={"context": False}), progress=False)
    assert capsys.readouterr().err == ""
    ex.run(cfg, ex.adhoc_cells(cfg, cots=(False,), lookbacks=(7,), options={"context": False}))
    assert "cell 1/1: pmdata healthllm scripted zs L7 context=False" in capsys.readouterr().err.splitlines()


def test_system_backbones_run_a_system_on_its_own_model_everywhere(env, monkeypatch):
    """`system_backbones` (e.g. the demo's PHIA on the 1.5B model): the grid, an explicit model list and the plan all
    run that system on its own backbone, the others on theirs; PHIA's primer options reach its records."""
    cfg, _ = env
    import balms.models.registry as reg
    from balms.experiments.plan import enumerate_cells

    made: dict = {}

    def backend_named(name=None, **kw):
        b = made.setdefault(name, Scripted())
        b.name, b.model_id = name, f"scripted:{name}"
        return b

    monkeypatch.setattr(reg, "get_backend", backend_named)
    cfg2 = cfg.replace(systems=["healthllm", "phia"], n_samples=2, system_backbones={"phia": "coder"},
                       phia_primer="code_first", phia_fence_stop=True)
    df = ex.run(cfg2, ex.adhoc_cells(cfg2))
    assert sorted(zip(df.system, df.model, strict=True)) == [("healthllm", "scripted")] * 2 + [("phia", "coder")] * 2
    phia_opts = df[df.system == "phia"].options.iloc[0]
    assert phia_opts["primer"] == "code_first" and phia_opts["fence_stop"] is True
    assert "primer" not in df[df.system == "healthllm"].options.iloc[0]
    df2 = ex.run(cfg2, ex.adhoc_cells(cfg2, models=["other"]))  # a notebook's own model list (03's look-back backbone)
    assert sorted(set(zip(df2.system, df2.model, strict=True))) == [("healthllm", "other"), ("phia", "coder")]
    cells = enumerate_cells(cfg2)
    assert {c.model for c in cells if c.system == "phia"} == {"coder"}
    assert {c.model for c in cells if c.system == "healthllm"} == {"scripted"}
    assert cfg2.models_for("phia", ["x", "y"]) == ["coder"] and cfg2.models_for("rag", ["x"]) == ["x"]
    with pytest.raises(ex.ConfigError, match="unknown system"):
        cfg.replace(system_backbones={"phai": "coder"})
