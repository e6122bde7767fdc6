"""The paper's directional claims, tested on our records with participant-bootstrap intervals (notebook 08).

Each claim becomes one or more comparisons (a difference with a 95% interval resampling participants) and a
verdict against the direction the paper reports: "agrees", "disagrees" or "cannot tell at this n". Nothing here
knows our results in advance; the verdicts are whatever the intervals say.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from balms import metrics
from balms.experiments.claims import verdict
from balms.experiments.cohorts import cohort
from balms.experiments.config import ExperimentConfig

# The paper's claims in our words, with the direction each comparison must take for the paper to be right.
CLAIMS = {
    "mean_predictor": "Zero-shot agents rarely beat the mean predictor (their MAE is not lower).",
    "cot": "CoT helps only some backbones (a one-model study can say only which kind ours is).",
    "lookback_rag": "RAG gains from a longer look-back (MAE at the longest look-back below the shortest).",
    "lookback_healthllm": "Health-LLM degrades with a longer look-back (MAE at the longest above the shortest).",
    "phia_collapse": "PHIA collapses to one label (its modal answer is more frequent than the commonest gold label).",
    "phia_executor": "The improved executor reduces PHIA's collapse (its modal-answer share below the faithful one's).",
}


def claim_verdict(expect: str | None, diff, lo, hi) -> str:
    """'agrees' when the interval lies on the side the paper reports (`expect` 'lower'/'higher' = the sign of the
    difference), 'disagrees' when it lies on the other side, else 'cannot tell at this n'. `expect` None: the
    paper makes no directional claim this study can test; the reading says which side we saw."""
    v = verdict(diff, lo, hi)
    if v in ("indistinguishable", "no interval"):
        return "cannot tell at this n"
    if expect is None:
        return f"no directional claim (ours: {v})"
    return "agrees" if v == expect else "disagrees"


def _row(claim, comparison, expect, d: dict, **extra) -> dict:
    return {"claim": claim, "comparison": comparison, "expected": expect or "none", "diff": d["diff"],
            "ci_low": d["ci_low"], "ci_high": d["ci_high"], "n": d["n"],
            "verdict": claim_verdict(expect, d["diff"], d["ci_low"], d["ci_high"]), **extra}


def _paired(a: pd.DataFrame, b, **kw) -> dict:
    p = metrics.paired_difference(a, b, **kw)
    return {"diff": p["diff"], "ci_low": p["ci_low"], "ci_high": p["ci_high"], "n": p["n_pairs"]}


def _labels(df: pd.DataFrame) -> pd.Series:
    return df["prediction"].map(lambda v: "unparseable" if pd.isna(v) else str(int(v)))


def _mode_share_diff(a: pd.DataFrame, b: pd.DataFrame | None, *, seed: int = 0) -> dict:
    """Modal-answer share of `a` minus that of `b` (paired by sample), or minus the commonest gold label's share
    when `b` is None. Per-sample indicators, participant-bootstrap interval (the modal labels are held fixed)."""
    ia = _labels(a)
    ind_a = (ia == ia.value_counts().idxmax()).astype(float).to_numpy()
    if b is None:
        gold = a["label"].astype(int)
        ind_b = (gold == gold.value_counts().idxmax()).astype(float).to_numpy()
        users = a["user"].to_numpy()
    else:
        m = a[["sample_id", "user"]].assign(ind_a=ind_a).merge(
            b[["sample_id"]].assign(ind_b=(_labels(b) == _labels(b).value_counts().idxmax()).astype(float).to_numpy()),
            on="sample_id")
        ind_a, ind_b, users = m["ind_a"].to_numpy(), m["ind_b"].to_numpy(), m["user"].to_numpy()
    diff, lo, hi = metrics.mean_ci(ind_a - ind_b, users, seed=seed) if len(ind_a) else (math.nan,) * 3
    return {"diff": diff, "ci_low": lo, "ci_high": hi, "n": int(len(ind_a))}


def claims_table(cfg: ExperimentConfig, zs: pd.DataFrame, cot: pd.DataFrame, horizon: pd.DataFrame,
                 phia: pd.DataFrame) -> pd.DataFrame:
    """One row per comparison: claim, comparison, expected sign, difference with its 95% interval, n, verdict.

    `zs`, `cot`: records of the zero-shot and CoT cells; `horizon`: the look-back sweep; `phia`: PHIA records
    with an `executor` column."""
    rows = []
    for (d, s, m), g in zs.groupby(["dataset", "system", "model"], sort=False):
        rows.append(_row("mean_predictor", f"{d} {s} zero-shot - mean predictor", "higher",
                         _paired(g, cohort(d, cfg).mean_for(g["sample_id"])), dataset=d, system=s, model=m))
    for (d, s, m), g in cot.groupby(["dataset", "system", "model"], sort=False):
        base = zs[(zs.dataset == d) & (zs.system == s) & (zs.model == m)]
        if len(base):
            rows.append(_row("cot", f"{d} {s} CoT - zero-shot", None, _paired(g, base), dataset=d, system=s, model=m))
    if len(horizon):
        first, last = horizon["lookback"].min(), horizon["lookback"].max()
        for (d, s, m), g in horizon.groupby(["dataset", "system", "model"], sort=False):
            if s not in ("rag", "healthllm"):
                continue
            # the same target days at both look-backs: pair on the target, not the (look-back-specific) sample id
            a, b = (g[g.lookback == lb].assign(sample_id=lambda x: x.user + "|" + x.target_date.astype(str))
                    for lb in (last, first))
            rows.append(_row(f"lookback_{s}", f"{d} {s} L{last} - L{first}", "lower" if s == "rag" else "higher",
                             _paired(a, b), dataset=d, system=s, model=m))
    for (d, m), g in phia.groupby(["dataset", "model"], sort=False):
        faithful, improved = g[g.executor == "faithful"], g[g.executor == "improved"]
        if len(faithful):
            rows.append(_row("phia_collapse", f"{d} PHIA faithful modal share - commonest gold label share",
                             "higher", _mode_share_diff(faithful, None), dataset=d, system="phia", model=m))
        if len(faithful) and len(improved):
            rows.append(_row("phia_executor", f"{d} PHIA improved - faithful modal share", "lower",
                             _mode_share_diff(improved, faithful), dataset=d, system="phia", model=m))
            rows.append(_row("phia_executor", f"{d} PHIA improved - faithful MAE", "lower",
                             _paired(improved, faithful), dataset=d, system="phia", model=m))
    return pd.DataFrame(rows)


def power_table(cfg: ExperimentConfig, records: pd.DataFrame, dataset: str, ns=(25, 50, 100, 150, 300)) -> pd.DataFrame:
    """What each n buys: the 95% interval width of one cell's MAE difference to the mean predictor.

    Up to the n the cell ran, measured on its nested sample subsets (the first n of the seeded order,
    `Cohort.eval_samples`); beyond it, projected from the largest measured width as width * sqrt(n_max / n)
    (same participant mix assumed). The half-width is the smallest difference the study can call."""
    co = cohort(dataset, cfg)
    ran = len(records)
    rows = []
    for n in sorted({*ns, ran}):
        if n <= ran:
            ids = {s.sample_id for s in co.eval_samples(n, cfg.seed, cfg.n_samples)}
            sub = records[records.sample_id.isin(ids)]
            p = _paired(sub, co.mean_for(sub["sample_id"]))
            rows.append({"n": n, "n_scored": p["n"], "width": p["ci_high"] - p["ci_low"], "kind": "measured"})
    measured = pd.DataFrame(rows)
    top = measured.iloc[-1]
    rows += [{"n": n, "n_scored": np.nan, "width": top.width * math.sqrt(top.n / n), "kind": "projected"}
             for n in sorted(ns) if n > ran]
    out = pd.DataFrame(rows)
    out["half_width"] = out["width"] / 2
    return out
