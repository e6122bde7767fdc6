"""bench_scale.summary words bench/scale.json's result (docs/_generated/scale.md shows it: `make docs`, checked by
tests/test_docs_numbers.py): its verdict follows the numbers, and the simulator behaves as the plan is told."""

from __future__ import annotations

import importlib.util
import json
import re

import pytest

from balms import paths

pytest.importorskip("httpx")
_spec = importlib.util.spec_from_file_location("bench_scale", paths.PROJECT_ROOT / "bench" / "bench_scale.py")
bench_scale = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_scale)


def test_summary_says_not_met_when_a_goal_is_missed():
    d = json.loads((paths.PROJECT_ROOT / "bench" / "scale.json").read_text())
    for r in d["runs"]:
        r["fleet_utilisation"], r["busiest_ratio"], r["plan"]["error"], r["ideal_over_chain"] = 0.9, 0.95, 0.05, 12
    assert "not met" not in bench_scale.summary(d)["runs"]
    d["runs"][-1]["fleet_utilisation"] = 0.5
    assert bench_scale.summary(d)["runs"].count("not met") == 1
    d["runs"][-1]["fleet_utilisation"], d["runs"][0]["plan"]["error"] = 0.9, -0.2
    assert bench_scale.summary(d)["runs"].count("not met") == 1
    d["runs"][0]["plan"]["error"], d["runs"][0]["ideal_over_chain"] = 0.05, 3  # the longest chain measured
    assert bench_scale.summary(d)["runs"].count("not met") == 1


def test_the_simulators_declared_behaviour_is_what_it_does():
    """The simulated servers answer as the plan's stand-in does with behaviour SIMULATOR (bench-scale plans with it):
    replies at half their max_tokens, a PHIA episode one code step then its answer. Checked on the simulator's own
    functions, so the plan check cannot drift from the servers."""
    import sys

    sys.path.insert(0, str(paths.PROJECT_ROOT / "bench"))
    import sim_vllm

    from balms.agents.prompts import phia_observation, phia_system_prompt
    from balms.models.standin import SIMULATOR

    for max_tokens in (16, 400, 4096):
        assert sim_vllm.tokens_of({"messages": [], "max_tokens": max_tokens})[1] == max_tokens * SIMULATOR.output_share
    system = {"role": "system", "content": phia_system_prompt(1, 5)}  # the paper's PHIA system prompt
    steps = [{"role": "user", "content": "Predict."}]
    n_calls = 0
    while True:  # an episode: each reply with code is followed by an observation, an answer ends it
        reply = sim_vllm.reply_for({"messages": [system, *steps], "max_tokens": 64})
        n_calls += 1
        if "```python" not in reply:
            assert re.search(r"Answer: [1-5]", reply)
            break
        steps += [{"role": "assistant", "content": reply}, {"role": "user", "content": phia_observation("3.5")}]
        assert n_calls < 10
    assert n_calls == SIMULATOR.code_steps + 1
