"""Metrics: MAE under each parse-failure policy, cluster-bootstrap CIs, paired differences, mode collapse."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from balms import metrics
from balms.records import PredictionRecord


def R(sid, user, label, pred, dataset="globem", **kw) -> PredictionRecord:
    return PredictionRecord(sample_id=sid, dataset=dataset, user=user, target_date="2018-05-02", lookback=14,
                            label=label, source="real", system=kw.pop("system", "healthllm"), cot=False,
                            model="m", model_id="m", prediction=pred, **kw)


@pytest.fixture()
def recs():
    # globem scale 0-3. errors: 1, 0, 2, failure(label 0), 1, failure(label 2)
    return [R("s1", "u1", 0, 1), R("s2", "u1", 1, 1), R("s3", "u2", 3, 1), R("s4", "u2", 0, None),
            R("s5", "u3", 2, 3), R("s6", "u3", 2, None)]


def test_mae_policies(recs):
    assert metrics.mae(recs) == pytest.approx((1 + 0 + 2 + 1) / 4)  # default: exclude
    assert metrics.mae(recs, "worst") == pytest.approx((1 + 0 + 2 + 3 + 1 + 2) / 6)  # label 0 -> 3, label 2 -> 2
    assert metrics.mae(recs, "mean_fill", mean_prediction=1.5) == pytest.approx((1 + 0 + 2 + 1.5 + 1 + 0.5) / 6)
    with pytest.raises(ValueError, match="mean_prediction"):
        metrics.mae(recs, "mean_fill")
    with pytest.raises(ValueError, match="unknown policy"):
        metrics.mae(recs, "drop")
    with pytest.raises(ValueError, match="no known scale"):
        metrics.mae([R("x", "u", 1, None, dataset="other")], "worst")
    assert metrics.mae([R("x", "u", 1, None, dataset="other")], "worst", scale=(1, 5)) == 4


def test_records_frame_accepts_records_dicts_and_frames(recs):
    a = metrics.records_frame(recs)
    b = metrics.records_frame([r.model_dump() for r in recs])
    c = metrics.records_frame(a)
    assert list(a["parsed"]) == [True, True, True, False, True, False]
    assert metrics.mae(b) == metrics.mae(c) == metrics.mae(recs)
    with pytest.raises(ValueError, match="lack column"):
        metrics.records_frame(pd.DataFrame({"sample_id": ["a"]}))


def _naive_cluster_ci(vals, clusters, n_boot, seed):
    """Reference implementation: loop over draws, concatenate the drawn participants' samples."""
    uniq = list(pd.factorize(np.asarray(clusters))[1])
    rng = np.random.default_rng(seed)
    k = len(uniq)
    stats = []
    for _ in range(n_boot):
        counts = rng.multinomial(k, np.full(k, 1.0 / k))
        pooled = np.concatenate([np.repeat(vals[np.asarray(clusters) == u], c)
                                 for u, c in zip(uniq, counts, strict=True)])
        stats.append(pooled.mean())
    return np.percentile(stats, [2.5, 97.5])


def test_mae_ci_is_a_participant_cluster_bootstrap():
    rng = np.random.default_rng(1)
    recs = []
    for u in range(8):
        for j in range(int(rng.integers(3, 9))):
            lab = int(rng.integers(1, 6))
            recs.append(R(f"s{u}-{j}", f"u{u}", lab, int(np.clip(lab + rng.integers(-(u % 3), 2), 1, 5)),
                          dataset="pmdata"))
    out = metrics.mae_ci(recs, n_boot=300, seed=0)
    df = metrics.records_frame(recs)
    err = (df["label"] - df["prediction"]).abs().to_numpy()
    lo, hi = _naive_cluster_ci(err, df["user"].to_numpy(), 300, 0)
    assert out["ci_low"] == pytest.approx(lo) and out["ci_high"] == pytest.approx(hi)
    assert out["ci_low"] < out["mae"] < out["ci_high"]
    assert out["n"] == len(recs) and out["n_clusters"] == 8
    assert metrics.mae_ci(recs, n_boot=300, seed=0) == out  # seeded
    assert metrics.mae_ci(recs, n_boot=300, seed=1)["ci_low"] != out["ci_low"]


def test_mae_ci_single_participant_has_no_interval():
    out = metrics.mae_ci([R("a", "u", 1, 2), R("b", "u", 1, 3)], n_boot=100)
    assert out["mae"] == 1.5 and math.isnan(out["ci_low"]) and math.isnan(out["ci_high"])


def test_paired_difference_against_system_and_mean_predictor(recs):
    other = [R("s1", "u1", 0, 0), R("s2", "u1", 1, 2), R("s3", "u2", 3, 3), R("s4", "u2", 0, 0),
             R("s5", "u3", 2, 2), R("s9", "u9", 2, 2)]
    d = metrics.paired_difference(recs, other, n_boot=200)
    # shared and both parsed: s1 (1 vs 0), s2 (0 vs 1), s3 (2 vs 0), s5 (1 vs 0); s4 dropped (a failed)
    assert d["n_pairs"] == 4 and d["n_dropped_parse_failure"] == 1
    assert d["n_only_a"] == 1 and d["n_only_b"] == 1  # s6 / s9
    assert d["diff"] == pytest.approx((1 - 1 + 2 + 1) / 4) and d["mae_b"] == pytest.approx(0.25)
    assert d["ci_low"] <= d["diff"] <= d["ci_high"]
    m = metrics.paired_difference(recs, 1.0, n_boot=200)  # mean predictor predicting 1.0 everywhere
    assert m["n_pairs"] == 4 and m["mae_b"] == pytest.approx((1 + 0 + 2 + 1) / 4) and m["diff"] == 0
    w = metrics.paired_difference(recs, 1.0, policy="worst", n_boot=200)
    assert w["n_pairs"] == 6 and w["diff"] == pytest.approx((9 - 6) / 6)  # failures charged 3 and 2
    with pytest.raises(ValueError, match="different gold labels"):
        metrics.paired_difference(recs, [R("s1", "u1", 3, 3)])
    with pytest.raises(ValueError, match="more than once"):
        metrics.paired_difference(recs + [R("s1", "u1", 0, 1)], 1.0)


def test_parse_failures_mode_collapse_and_confusion(recs):
    assert metrics.parse_failure_rate(recs) == pytest.approx(2 / 6)
    mc = metrics.mode_collapse(recs)  # predictions 1,1,1,None,3,None -> modal 1 (3 of 6)
    assert mc == {"modal_label": 1, "mode_count": 3, "n_windows": 6, "mode_rate": 0.5}
    collapsed = [R(f"d{i}", "u", 2, None, dataset="diversityone") for i in range(5)] + \
                [R("d9", "u", 2, 2, dataset="diversityone")]
    mc = metrics.mode_collapse(collapsed)  # the paper's DiversityOne row: unparseable is the mode
    assert mc["modal_label"] == "unparseable" and mc["mode_count"] == 5 and mc["mode_rate"] == pytest.approx(5 / 6)
    cm = metrics.confusion(recs)
    assert list(cm.index) == [0, 1, 2, 3] and list(cm.columns) == [0, 1, 2, 3, "unparseable"]
    assert cm.loc[0, 1] == 1 and cm.loc[0, "unparseable"] == 1 and cm.loc[2, "unparseable"] == 1
    assert cm.loc[3, 1] == 1 and cm.to_numpy().sum() == 6


def test_summarize_run_row(recs):
    row = metrics.summarize_run(recs, 1.0, n_boot=200)
    assert row["n"] == 6 and row["n_parsed"] == 4 and row["parse_failure_rate"] == pytest.approx(1 / 3)
    assert row["mae"] == pytest.approx(1.0) and row["mae_worst"] == pytest.approx(1.5)
    assert row["mae_ci_low"] <= row["mae"] <= row["mae_ci_high"]
    assert row["modal_label"] == 1 and row["mode_rate"] == 0.5
    assert row["diff_vs_mean"] == 0 and row["mean_predictor_mae"] == pytest.approx(1.0)
    # the frame form used by balms.experiments.summarize (no mean prediction)
    frame = pd.DataFrame([r.model_dump(exclude={"transcript"}) for r in recs])
    row2 = metrics.summarize_run(frame, n_boot=200)
    assert row2["mae"] == row["mae"] and "diff_vs_mean" not in row2
    g = metrics.by_group(recs, ["user"], n_boot=50)
    assert list(g["user"]) == ["u1", "u2", "u3"] and list(g["n"]) == [2, 2, 2]


def test_scored_failures_beside_exclusion_on_a_constructed_case():
    """docs/scoring.md: a failure is scored as the answer 0; an out-of-range answer (0 on PMData's 1-5 scale)
    is a parse failure scored the same way and counted, never dropped silently."""
    from balms.agents.parsing import parse_answer

    oor = parse_answer("Answer: 0", 1, 5)  # the paper's PMData prompt says "0 to 5"
    assert oor.value is None
    rows = [R("p1", "u1", 3, 3, dataset="pmdata"), R("p2", "u1", 2, 4, dataset="pmdata"),
            R("p3", "u2", 4, None, dataset="pmdata", parse_error=oor.error),
            R("p4", "u2", 5, None, dataset="pmdata", parse_error="no 'Answer: <int>' found")]
    assert metrics.mae(rows) == pytest.approx((0 + 2) / 2)
    assert metrics.mae(rows, "fill") == pytest.approx((0 + 2 + 4 + 5) / 4)
    assert metrics.mae(rows, "fill", fill=1) == pytest.approx((0 + 2 + 3 + 4) / 4)
    counts = metrics.status_counts(rows)
    assert counts["n_parse_failures"] == 2 and counts["n_out_of_range"] == 1
    row = metrics.summarize_run(rows, n_boot=50)
    assert row["mae"] == pytest.approx(1.0) and row["mae_scored"] == pytest.approx(11 / 4)
    assert row["mae_scored_ci_low"] <= row["mae_scored"] <= row["mae_scored_ci_high"]
    assert row["n_out_of_range"] == 1 and row["n_parse_failures"] == 2
    # an error (no answer) is no prediction under either convention
    err = [*rows, R("p5", "u2", 1, None, dataset="pmdata", error="backend down")]
    assert metrics.mae(err, "fill") == pytest.approx(11 / 4)


def test_the_fill_rule_reproduces_table7_arithmetic():
    """The paper's DiversityOne PHIA cell (Table 7): 757 of 761 unparsed, MAE 2.11. Exclusion over four integer
    errors can only give a multiple of 0.25; a fill at 0 gives the failed windows' mean label."""
    labels = [2] * 674 + [3] * 84 + [1] * 3  # a constructed label set with mean 2.11 over the failures
    rows = [R(f"d{i}", f"u{i % 7}", y, None, dataset="diversityone") for i, y in enumerate(labels[:757])]
    rows += [R(f"e{i}", "u0", y, 2, dataset="diversityone") for i, y in enumerate(labels[757:])]
    excl = metrics.mae(rows)
    assert (excl * 4) == pytest.approx(round(excl * 4))  # k/4: never 2.11
    scored = metrics.mae(rows, "fill")
    assert scored == pytest.approx(sum(labels[:757]) / 761 + sum(abs(y - 2) for y in labels[757:]) / 761)


def test_scoring_derivation_from_the_papers_printed_numbers():
    """docs/scoring.md: of the fill rules, only a fill outside the 1-5 scale (0, the one code writes) gives both
    Table 7's 2.11 and Table 3's +CoT 3.15 whatever the parser accepted; the doc's table is the computed one."""
    from balms import paths, scoring

    t = scoring.fill_rule_table().set_index("rule")
    both = t[t["mae"] & t["cot_1_5"] & t["cot_0_5"]]
    assert sorted(both["fill"]) == [0, 6] and metrics.PAPER_FAILURE_FILL in set(both["fill"])
    assert not t.loc["exclude (integer labels)", "mae"]
    assert not t.loc["fill at the midpoint", "mae"] and not t.loc["fill at the far scale end (worst)", "mae"]
    assert t.loc["fill at the low scale end", "mae"] and not t.loc["fill at the low scale end", "cot_1_5"]
    # the checks can fail: a printed 2.25 over four parsed windows is what exclusion would give
    fake = scoring.PrintedCell(n=761, n_fail=757, mae=2.25, cot_mae=2.25, mean_predictor_mae=0.58, scale=(1, 5))
    assert scoring.fill_rule_table(fake).set_index("rule").loc["exclude (integer labels)", "mae"]
    doc = (paths.PROJECT_ROOT / "docs" / "scoring.md").read_text(encoding="utf-8")
    assert scoring.with_table(doc) == doc, "docs/scoring.md is stale: run balms docs scoring --write"
