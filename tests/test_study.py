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


def test_answer_shares_one_row_per_cell_and_collapse_is_share_one():
    """Two cells of the same system and look-back (the zero-shot cell and a sweep's) stay apart; a cell that gave
    one answer on every day has share 1.0 and is named by answers_sentence; unparseable answers count as a value."""
    import numpy as np
    import pandas as pd

    from balms.experiments import study

    def cell(key, preds, labels):
        return pd.DataFrame({"cell_key": key, "sample_id": [f"{key}/s{i}" for i in range(len(preds))],
                             "user": ["u1", "u2"] * (len(preds) // 2), "dataset": "pmdata", "system": "healthllm",
                             "model": "m", "cot": False, "lookback": 14, "prediction": preds, "label": labels})

    recs = pd.concat([cell("aaa", [1, 1, 1, 1], [3, 3, 2, 4]), cell("bbb", [2, np.nan, np.nan, 3], [3, 3, 3, 1]),
                      cell("aaa", [1, 1], [3, 3])], ignore_index=True)  # a cell re-read by a second notebook
    t = study.answer_shares(recs)
    assert t["days"].nunique() == 2 and "cell_key" not in t  # rows name their days, never the code-moved key
    t.index = ["aaa", "bbb"]
    assert list(t.n) == [4, 4]
    assert t.loc["aaa", "modal_share"] == 1.0 and t.loc["aaa", "modal_answer"] == "1"
    assert t.loc["bbb", "modal_answer"] == "unparseable" and t.loc["bbb", "modal_share"] == 0.5
    assert t.loc["bbb", "gold_modal_share"] == 0.75 and t.loc["bbb", "distinct_answers"] == 3
    assert t.loc["aaa", "collapse"] and not t.loc["bbb", "collapse"]  # 1.0 vs 0.5 gold; 0.5 vs 0.75 gold
    assert t.loc["aaa", "qwk"] == 0.0
    assert study.answers_sentence(t.reset_index()) == (
        "1 of 2 cells raise the collapse flag (commonest answer's share more than 20 points above the commonest "
        "label's). 1 of 2 cells gave one answer on every day: pmdata healthllm m always 1 (n = 4).")
