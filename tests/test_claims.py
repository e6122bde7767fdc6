"""Sentence helpers for the notebooks (balms.experiments.claims): every verdict follows the numbers given."""

from __future__ import annotations

import math

import pandas as pd

from balms.experiments import claims


def test_verdict_follows_the_interval():
    assert claims.verdict(-0.2, -0.3, -0.1) == "lower"
    assert claims.verdict(0.2, 0.1, 0.3) == "higher"
    assert claims.verdict(0.05, -0.1, 0.2) == "indistinguishable"
    assert claims.verdict(0.1, math.nan, 0.2) == "no interval"
    # a point interval (every participant's resample the same mean; one participant gives no interval at all)
    assert claims.verdict(-1.0, -1.0, -1.0) == "lower" and claims.verdict(0.0, 0.0, 0.0) == "indistinguishable"
    from balms.metrics import mean_ci

    assert math.isnan(mean_ci([-1.0, -1.0], ["u1", "u1"])[1])  # one participant: no interval
    assert mean_ci([-1.0, -1.0, -1.0], ["u1", "u2", "u3"])[1:] == (-1.0, -1.0)  # every day moved alike: a point


def test_compare_sentence_names_the_direction_and_numbers():
    s = claims.compare_sentence("RAG", "Health-LLM", -0.12, -0.2, -0.03, n=40)
    assert "RAG's MAE is lower than Health-LLM's" in s and "-0.12" in s and "n = 40" in s
    assert "indistinguishable" in claims.compare_sentence("A", "B", 0.0, -0.1, 0.1)
    assert "no interval" in claims.compare_sentence("A", "B", 0.3, math.nan, math.nan)
    assert "no sample with a parsed answer" in claims.compare_sentence("A", "B", math.nan, math.nan, math.nan, n=0)
    assert claims.pct(0.8594) == "85.9%" and claims.pct(math.nan) == "n/a"


def test_versus_paper_places_the_paper_number():
    assert claims.versus_paper(0.5, 0.4, 0.6, 0.48).startswith("paper 0.48 is inside")
    assert "above" in claims.versus_paper(0.3, 0.2, 0.4, 0.48)
    assert "below" in claims.versus_paper(0.9, 0.7, 1.1, 0.48)
    assert claims.versus_paper(0.5, 0.4, 0.6, None) == "no paper number"


def test_mean_predictor_sentence_counts_each_verdict():
    summ = pd.DataFrame({"dataset": ["pmdata"] * 4, "system": ["healthllm", "rag", "raptor", "phia"],
                         "model": ["m"] * 4, "diff_vs_mean": [-0.2, 0.3, 0.0, 0.1],
                         "diff_vs_mean_ci_low": [-0.3, 0.1, -0.1, math.nan],
                         "diff_vs_mean_ci_high": [-0.1, 0.5, 0.1, math.nan]})
    s = claims.mean_predictor_sentence(summ)
    assert "Of 4 cells, 1 have a lower MAE" in s and "1 a higher one" in s
    assert "1 are indistinguishable" in s and "1 have no interval" in s and "lower: pmdata healthllm m." in s
    assert claims.mean_predictor_sentence(summ.drop(columns=["diff_vs_mean"])).startswith("No cell")


def test_ranking_and_growth():
    df = pd.DataFrame({"dataset": ["a", "a", "a", "b"], "system": ["x", "y", "z", "x"], "lat": [1.0, 5.0, 3.0, 2.0]})
    s = claims.ranking_sentence(df, "lat", item="system", within="dataset", unit=" s")
    assert "a: y 5.0 s > z 3.0 s > x 1.0 s; b: x 2.0 s" in s
    pts = pd.DataFrame({"system": ["h"] * 3 + ["r"] * 3, "L": [7, 14, 28] * 2,
                        "tok": [100, 170, 310, 500, 500, 500]})
    sl = claims.slope_per_unit(pts, "L", "tok", ["system"])
    assert sl.set_index("system")["slope"].round(6).to_dict() == {"h": 10.0, "r": 0.0}
    assert claims.growth_sentence(sl, label="tokens", per="day", by=["system"]) == "tokens per extra day: h +10, r +0."
    assert "h +10.00" in claims.growth_sentence(sl, label="s", per="day", by=["system"], digits=2)


def test_relative_change_and_concentration_and_baselines():
    t = pd.DataFrame({"dataset": ["pmdata", "globem"], "system": ["rag", "rag"], "chg": [-0.1, math.nan]})
    out = claims.relative_change_sentences(t, change_col="chg", paper={("pmdata", "rag"): -0.29,
                                                                       ("globem", "rag"): 0.0})
    assert out[0] == "pmdata rag: MAE -10% (lower at the longest look-back); the paper reports about -29%."
    assert "no MAE at both ends" in out[1] and "the paper reports it flat" in out[1]
    s = claims.concentration_sentence({"3": 60, "2": 30, "4": 10}, dataset="pmdata")
    assert s == "pmdata: 60% of the 100 labels are 3, 90% are one of the two most common values (3, 2)."
    base = pd.DataFrame({"dataset": ["d"] * 3, "baseline": ["mean_predictor", "ridge", "last"],
                         "mae": [0.5, 0.4, 0.6]})
    s = claims.baseline_sentence(base, dataset="d")
    assert "lower: ridge 0.400" in s and "not lower: last 0.600" in s
