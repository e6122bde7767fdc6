"""The CPU study's committed responses stay valid: with its profile's pins (evaluation_rule heldout30, cot_format
answer_line), the Health-LLM cells' samples and prompts are rebuilt identical to the committed records'."""

from __future__ import annotations

import json
import tarfile

import pytest

from balms import paths
from balms.agents.registry import make_agent
from balms.experiments import config, grid
from balms.experiments.cohorts import cohort

BUNDLE = paths.PROJECT_ROOT / "results" / "cpu-study" / "cpu-study.bundle.tar.gz"


def _runs(system: str):
    """The system's L14 run files of the bundle, the sensor test's variants (notebook 08: their prompts are the
    placebo's, mood-only, ...) aside."""
    from balms.experiments.cells import SENSOR_VARIANTS

    with tarfile.open(BUNDLE) as tar:
        for m in tar.getmembers():
            name = m.name.rsplit("/", 1)[-1]
            if m.name.endswith(".jsonl") and name.startswith(f"{system}__") and "__L14__" in name:
                lines = tar.extractfile(m).read().decode().splitlines()
                recs = [json.loads(x) for x in lines if x.strip()]
                opts = recs[0].get("options") or {}
                if not any(all(opts.get(k) == v for k, v in o.items()) for o in SENSOR_VARIANTS.values()):
                    yield m.name, recs


@pytest.mark.skipif(not BUNDLE.exists(), reason="no committed CPU-study bundle")
def test_cpu_study_healthllm_prompts_and_samples_unchanged(real_data, monkeypatch):
    monkeypatch.setenv("BALMS_RAW_DIR", str(real_data))
    cfg = config.load("cpu-study")
    assert (cfg.evaluation_rule, cfg.cot_format) == ("heldout30", "answer_line")
    checked, groups, matched = 0, set(), set()
    for name, recs in _runs("healthllm"):
        r = recs[0]
        co = cohort(r["dataset"], cfg)
        ev_ids = {s.sample_id for s in grid.eval_samples(cfg, r["dataset"], system="healthllm", cot=r["cot"],
                                                         lookback=14)}
        groups.add((r["dataset"], r["cot"]))
        if {x["sample_id"] for x in recs} <= ev_ids:  # the study's samples are still the rule's
            matched.add((r["dataset"], r["cot"]))
        sample = next(s for s in co.sampleset.samples if s.sample_id == r["sample_id"])
        opts = grid.agent_options(cfg, "healthllm", r["cot"])
        opts.pop("max_tokens", None)
        agent = make_agent("healthllm", cot=r["cot"], **opts)
        user = agent.first_prompt(sample, co.tables)[-1].content
        assert user == r["transcript"][0]["content"], name
        checked += 1
    assert checked >= 4 and groups == matched  # (the bundle also keeps one older PMData run of other samples)
