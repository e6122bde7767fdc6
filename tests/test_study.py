"""The CPU study's pieces: per-cell sample counts, nested samples, claim verdicts, the power table."""

import numpy as np
import pandas as pd
import pytest

from balms.experiments import config, study
from balms.experiments.cohorts import cohort


def test_n_for_most_specific_key_wins():
    cfg = config.load("demo", n_samples=5, n_samples_by={"pmdata": 150, "pmdata.cot": 60, "pmdata.phia": 40,
                                                         "pmdata.phia.cot": 7})
    assert cfg.n_for("pmdata", "healthllm") == 150
    assert cfg.n_for("pmdata", "healthllm", True) == 60
    assert cfg.n_for("pmdata", "phia") == 40
    assert cfg.n_for("pmdata", "phia", True) == 7
    assert cfg.n_for("globem", "healthllm", True) == 5


@pytest.mark.parametrize("key", ["pmdata.cot.rag", "pm", "pmdata.judge", "cot"])
def test_n_samples_by_rejects_unknown_keys(key):
    with pytest.raises(config.ConfigError, match="n_samples_by"):
        config.load("demo", n_samples_by={key: 3})


def test_eval_samples_are_nested_on_real_data(real_data):
    cfg = config.load("demo", raw_root=str(real_data))
    co = cohort("pmdata", cfg)
    assert co.source == "real" and len(co.test) > 300
    small, base, big = co.eval_samples(40, 0, 150), co.eval_samples(150, 0, 150), co.eval_samples(300, 0, 150)
    assert (len(small), len(base), len(big)) == (40, 150, 300)
    assert {s.sample_id for s in small} < {s.sample_id for s in base} < {s.sample_id for s in big}
    # the base draw is the profile's n_samples draw itself (a profile without per-cell counts is unchanged)
    pool = sorted(co.test, key=lambda s: (s.user, s.target_date))
    drawn = np.random.default_rng(0).choice(len(pool), size=150, replace=False)
    assert [s.sample_id for s in base] == [pool[i].sample_id for i in sorted(drawn)]


def test_claim_verdict_follows_the_interval():
    assert study.claim_verdict("higher", 0.3, 0.1, 0.5) == "agrees"
    assert study.claim_verdict("higher", -0.3, -0.5, -0.1) == "disagrees"
    assert study.claim_verdict("lower", -0.3, -0.5, -0.1) == "agrees"
    assert study.claim_verdict("lower", 0.1, -0.2, 0.4) == "cannot tell at this n"
    assert study.claim_verdict(None, -0.3, -0.5, -0.1).startswith("no directional claim (ours: lower")


def _records(preds, labels, users, **extra):
    n = len(preds)
    return pd.DataFrame({"sample_id": [f"s{i}" for i in range(n)], "user": users, "label": labels,
                         "prediction": preds, "parsed": [p is not None and not pd.isna(p) for p in preds],
                         "dataset": "pmdata", "model": "m", **extra})


def test_mode_collapse_comparison_sees_a_collapsed_agent():
    rng = np.random.default_rng(0)
    labels = rng.integers(1, 6, 120)
    users = [f"u{i % 8}" for i in range(120)]
    collapsed = _records([4.0] * 120, labels, users)
    d = study._mode_share_diff(collapsed, None)
    assert d["diff"] > 0.5 and d["ci_low"] > 0
    varied = _records(labels.astype(float), labels, users)  # predicts the gold label: same mode share
    assert study._mode_share_diff(varied, None)["diff"] == pytest.approx(0.0)
