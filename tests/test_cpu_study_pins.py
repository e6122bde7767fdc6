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
    with tarfile.open(BUNDLE) as tar:
        for m in tar.getmembers():
            name = m.name.rsplit("/", 1)[-1]
            if m.name.endswith(".jsonl") and name.startswith(f"{system}__") and "__L14__" in name:
                lines = tar.extractfile(m).read().decode().splitlines()
                yield m.name, [json.loads(x) for x in lines if x.strip()]


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


CLAIMS = paths.PROJECT_ROOT / "results" / "cpu-study" / "tables" / "cpu_study_claims.csv"


@pytest.mark.skipif(not CLAIMS.exists(), reason="no committed CPU-study claims table")
def test_readme_and_book_state_the_committed_answers_to_issue_26():
    """The README's and the book's sentences on the personal baseline and the larger model are the ones the committed
    tables give (study.ours_sentence, study.answers_sentence), not prose written beside them; so they cannot outlive a
    regenerated study."""
    import pandas as pd

    from balms.experiments import study

    table = pd.read_csv(CLAIMS)
    assert study.NOT_RUN not in set(table[table.claim.isin(["personal_baseline_mean", "model_size"])].verdict), \
        "the committed study has not run the personal baseline or the size check"
    ours = study.ours_sentence(table)
    answers = study.answers_sentence(pd.read_csv(CLAIMS.with_name("cpu_study_answers.csv")))

    def text(rel):
        return " ".join((paths.PROJECT_ROOT / rel).read_text(encoding="utf-8").split())

    assert ours in text("README.md"), f"README should state, from the committed claims table:\n{ours}"
    assert ours in text("docs/cpu-study.md"), f"docs/cpu-study.md should state:\n{ours}"
    assert answers in text("docs/cpu-study.md"), f"docs/cpu-study.md should state:\n{answers}"
