"""`balms plan`: the cells notebooks 01-07 run, and their calls, tokens, GPU hours and Claude cost."""

from __future__ import annotations

import json
import math

import pytest

from balms.experiments.config import load
from balms.experiments.plan import build_plan, enumerate_cells, size_class


def test_paper_cells_enumerated_once_each(real_data):
    """The plan prices the cells the notebooks declare (balms.experiments.cells), each once under the first notebook
    that runs it (equal CellSpec keys), then one judge cell per judged CoT cell."""
    cfg = load("paper", raw_root=str(real_data))
    cells = enumerate_cells(cfg)
    by_nb: dict[str, int] = {}
    for c in cells:
        by_nb[c.notebook] = by_nb.get(c.notebook, 0) + 1
    from balms.experiments.cohorts import cohort
    from balms.experiments.grid import eval_samples

    nd, ns, nb = len(cfg.datasets), len(cfg.systems), len(cfg.backbones)
    # 03's cells at a dataset's own look-back are 01's when the longest look-back keeps the same target days
    same = {d for d in cfg.horizon_datasets
            if [(s.user, s.target_date)
                for s in cohort(d, cfg, lookback=max(cfg.lookbacks)).eval_samples(0, cfg.seed, 0)]
            == [(s.user, s.target_date) for s in eval_samples(cfg, d)]}
    n03 = sum(len(cfg.horizon_systems) for d in cfg.horizon_datasets for L in cfg.lookbacks
              if not (d in same and L == eval_samples(cfg, d)[0].lookback))
    # 01: every dataset x system x backbone; 02 adds the CoT half; 03: its look-backs on target days drawn with the
    # longest look-back's history (other samples than 01's, so new cells even at 14 days); 04: GLOBEM Fitbit-only
    # x {zs, CoT} (full = 01/02's cells), PMData 2 new channel sets and the corrected prompt style (paper = 01's);
    # 05: the improved executor (faithful = 01's PHIA cells); 06: nothing new; 07: a judge cell per judged CoT cell;
    # 08: the sensor test (issue 39): Health-LLM and RAG (RAPTOR and PHIA refuse it) x its five variants per backbone,
    # less Health-LLM's no-mood cell, which is 04's "no same-day mood" ablation cell (one key, counted under 04)
    from balms.experiments.cells import SENSOR_VARIANTS

    assert cfg.sensor_test_systems == ["healthllm", "rag"]
    assert by_nb == {
        "08_cpu_study": len(cfg.sensor_test_datasets) * nb * (2 * len(SENSOR_VARIANTS) - 1),
        "01_prediction": nd * ns * nb,
        "02_cot": nd * ns * nb,
        "03_long_horizon": n03,
        "04_ablations": 2 * len(cfg.ablation_systems) * nb + 3 * nb,
        "05_phia_failures": nd * nb,
        "07_rationale_quality": len(cfg.judged_datasets) * len(cfg.judge_systems) * nb,
    }
    assert {c.dataset for c in cells if c.notebook == "07_rationale_quality"} == {"globem"}
    agent_keys = [c.key for c in cells if c.system != "judge"]
    assert None not in agent_keys and len(set(agent_keys)) == len(agent_keys)
    judge = [c for c in cells if c.system == "judge"]
    assert {c.model for c in judge} == {"Llama-3.3-70B-Instruct"} and {c.judged_model for c in judge} == set(
        cfg.backbones
    )


def test_size_classes():
    assert [
        size_class(m)
        for m in (
            "Qwen2.5-7B-Instruct",
            "Mistral-7B-Instruct-v0.3",
            "DeepSeek-R1-Distill-Qwen-14B",
            "Llama-3.3-70B-Instruct",
            "qwen2.5-coder-0.5b",
        )
    ] == ["7b", "7b", "14b", "70b", "small"]


@pytest.fixture(scope="module")
def small_plan(real_data):
    cfg = load(
        "paper",
        raw_root=str(real_data),
        n_samples=3,
        datasets=["globem"],
        horizon_datasets=["globem"],
        lookbacks=[7, 14],
    )
    return cfg, build_plan(cfg, per_cell=2)


def test_plan_counts_real_prompts_and_prices(small_plan):
    from balms.agents.registry import make_agent
    from balms.experiments.cohorts import cohort
    from balms.experiments.grid import agent_options, eval_samples

    cfg, plan = small_plan
    d = plan.to_dict()
    assert d["data_sources"] == {"globem": "real", "pmdata": "real"} and d["notebooks"]["06_latency"] == {}
    # a Health-LLM zero-shot cell: n calls, first-prompt tokens by chars/4 (+4 per message), budget outputs
    ce = next(
        c
        for c in plan.cells
        if (c.cell.system, c.cell.model, c.cell.cot, c.cell.notebook)
        == ("healthllm", "Qwen2.5-7B-Instruct", False, "01_prediction")
    )
    samples = eval_samples(cfg, "globem")
    agent = make_agent("healthllm", cot=False, **agent_options(cfg, "healthllm", False))
    first = [agent.first_prompt(s, cohort("globem", cfg).tables) for s in (samples[0], samples[-1])]
    expect = sum(math.ceil(len("\n".join(m.content for m in ms)) / 4) + 4 * len(ms) for ms in first) / 2
    assert ce.n_samples == 3 and ce.upper.calls == 3 and ce.prompt_tokens_first == pytest.approx(expect)
    assert ce.upper.output_tokens == 3 * cfg.zs_max_tokens
    phia = next(
        c
        for c in plan.cells
        if (c.cell.system, c.cell.model, c.cell.notebook) == ("phia", "Qwen2.5-7B-Instruct", "01_prediction")
    )
    assert phia.upper.calls == 3 * (cfg.phia_max_iters + 1) and phia.typical.calls == 3 * 4
    r1 = d["backbones"]["DeepSeek-R1-Distill-Qwen-14B"]
    assert r1["output_tokens"] > d["backbones"]["Qwen2.5-14B-Instruct"]["output_tokens"]  # reasoning budgets
    claude = d["backbones"]["Claude-Haiku-4.5"]
    usd = (claude["prompt_tokens"] * 1.0 + claude["output_tokens"] * 5.0) / 1e6
    assert claude["claude_usd"] == pytest.approx(usd, abs=0.01) and claude["gpu_hours"] == 0
    assert usd / 2 < claude["claude_batch_usd"] < usd  # only single-call cells go through batches
    assert d["backbones"]["Llama-3.3-70B-Instruct"]["calls"] == 3 * 5 * len(cfg.judge_systems)
    assert {c.cell.dataset for c in plan.cells if c.cell.notebook == "04_ablations"} == {"globem", "pmdata"}
    for k in ("calls", "prompt_tokens", "output_tokens"):
        assert d["total"][k] == sum(v[k] for v in d["backbones"].values())
    assert d["total"]["gpu_hours"] > 0 and set(d["token_counting"]) == set(cfg.backbones) | {cfg.judge_model}


def test_throughput_override_scales_gpu_hours(small_plan, capsys):
    from balms.cli import main

    cfg, plan = small_plan
    base = plan.to_dict()["backbones"]["Qwen2.5-7B-Instruct"]["gpu_hours"]
    assert (
        main(
            [
                "plan",
                "--profile",
                "paper",
                "--json",
                "--per-cell",
                "1",
                "--throughput",
                "7b=4000:600:1",
                "--set",
                f"-p raw_root {cfg.raw_root} -p n_samples 3 -p datasets [globem] "
                "-p horizon_datasets [globem] -p lookbacks [7,14]",
            ]
        )
        == 0
    )
    d = json.loads(capsys.readouterr().out)
    assert d["throughput_tokens_per_s"]["7b"] == {"prefill": 4000.0, "decode": 600.0, "gpus": 1}
    assert d["backbones"]["Qwen2.5-7B-Instruct"]["gpu_hours"] == pytest.approx(2 * base, rel=0.35)
    with pytest.raises(SystemExit, match="CLASS=prefill:decode"):
        main(["plan", "--profile", "paper", "--throughput", "7b=fast"])


def test_plan_servers_gives_wall_hours_with_the_scheduler():
    """--servers: each model's GPU time spread over its servers, then the last samples' chain of calls (each a
    request's time in service at the server's batch); the run lasts as long as the busiest model's."""
    from balms.experiments.plan import THROUGHPUT, schedule_hours, servers_by_model
    from fake_servers import FakeOpenAIServer

    with FakeOpenAIServer(models=["Qwen/Qwen2.5-14B-Instruct"]) as srv:
        servers = servers_by_model(["Qwen2.5-7B-Instruct=2", srv.url, "Qwen2.5-7B-Instruct=1"])
    assert servers == {"Qwen2.5-7B-Instruct": 3, "Qwen2.5-14B-Instruct": 1}
    backbones = {"Qwen2.5-7B-Instruct": {"gpu_hours": 6.0}, "Qwen2.5-14B-Instruct": {"gpu_hours": 4.0},
                 "Claude-Haiku-4.5": {"gpu_hours": 0.0}}
    got = schedule_hours(backbones, servers, THROUGHPUT)  # no calls counted: no tail
    gpus14 = THROUGHPUT["14b"]["gpus"]
    assert got["per_model_hours"] == {"Qwen2.5-7B-Instruct": 2.0, "Qwen2.5-14B-Instruct": 4.0 / gpus14}
    assert got["hours"] == max(2.0, 4.0 / gpus14)
    t7 = THROUGHPUT["7b"]
    with_calls = {"Qwen2.5-7B-Instruct": {"gpu_hours": 6.0, "calls": 100, "prompt_tokens": 100 * 1000,
                                          "output_tokens": 100 * 200}}
    one = 8 * (1000 / t7["prefill"] + 200 / t7["decode"])  # one request in service at a batch of 8
    got = schedule_hours(with_calls, {"Qwen2.5-7B-Instruct": 3}, THROUGHPUT, slots=8, tail_calls=2)
    assert got["tail_hours"]["Qwen2.5-7B-Instruct"] == round(2 * one / 3600, 3)
    assert got["hours"] == round(6.0 / t7["gpus"] / 3 + 2 * one / 3600, 3)
    with pytest.raises(ValueError, match="no server given for Qwen2.5-14B-Instruct"):
        schedule_hours(backbones, {"Qwen2.5-7B-Instruct": 1}, THROUGHPUT)
    with pytest.raises(ValueError, match="unknown model 'nope'"):
        servers_by_model(["nope=2"])


def test_the_runbooks_plan_table_is_the_plans(real_data, monkeypatch):
    """docs/runbook.md's bill for the paper profile is `balms plan --profile paper --markdown` on the data here,
    regenerated, not a table typed once and left behind (it had been: 147,603 calls against today's plan)."""
    import re

    from balms import paths
    from balms.experiments import plan
    from balms.experiments.config import load

    monkeypatch.setenv("BALMS_RAW_DIR", str(real_data))
    page = (paths.PROJECT_ROOT / "docs" / "runbook.md").read_text(encoding="utf-8")
    block = re.search(r"<!-- plan paper -->\n(.*?)\n<!-- /plan -->", page, re.S)
    assert block, "docs/runbook.md has no <!-- plan paper --> block"
    cfg = load("paper", raw_root=str(real_data))
    want = plan.format_markdown(plan.build_plan(cfg).to_dict(), cfg.judge_model)
    assert block.group(1) == want, "regenerate: balms plan --profile paper --markdown (into docs/runbook.md)"
