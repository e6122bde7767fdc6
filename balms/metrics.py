"""Prediction metrics with uncertainty: MAE and participant-cluster bootstrap CIs, paired differences,
parse failures, mode collapse (the paper's Table 7) and confusion by label.

Parse-failure policy (docs/scoring.md derives it from the paper's printed numbers). Two MAEs are reported
beside each other everywhere: `policy="exclude"` (the default) computes MAE over parsed predictions only;
`policy="fill"` scores every parse failure as if the model had answered `PAPER_FAILURE_FILL` (0), the rule
Table 7 (PHIA on DiversityOne, MAE 2.11 with 757 of 761 windows unparsed) and Table 3 (its +CoT 3.15) leave
standing whatever the paper's parser accepted (`balms.scoring`): exclusion cannot give 2.11 from four integer
errors, the midpoint, the mean predictor's value and the far scale end cannot reach or fit it, and a fill at 1
or 5 reaches Table 3's 3.15 only if answers of 0 were parsed too. An out-of-range
answer (0 on PMData's 1-5 scale, which the paper's prompt prints as "0 to 5") is a parse failure like any
other, scored the same way and counted apart (`n_out_of_range`). The paper profile's `scoring: fill` makes the
scored MAE the one compared with the paper. The other policies are bounds: `"worst"` charges each failure the
largest error possible on the scale for its gold label, `"mean_fill"` predicts the mean-predictor value.

Errors are not parse failures. A record with status "error" (the agent, the harness or the backend failed; no
answer) is no prediction at all: it is left out of every policy's MAE, of the parse-failure rate (whose denominator
is the samples the model answered), of mode collapse and of the confusion table, and counted as `n_errors`. The
runner retries errors on the next run, so a finished run has none.

Why a cluster bootstrap: windows of one participant overlap and share a person, so they are not
independent; resampling participants (with all their windows) gives honest intervals.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Literal

import numpy as np
import pandas as pd

from balms.data.registry import dataset_names, get_dataset
from balms.records import PredictionRecord, out_of_range_value, record_status

Policy = Literal["exclude", "fill", "mean_fill", "worst"]
POLICIES: tuple[str, ...] = Policy.__args__
# the value a parse failure is scored at under policy "fill" (docs/scoring.md: the rule the paper's numbers allow)
PAPER_FAILURE_FILL = 0
# Native label scales (METHOD.md); pass `scale=` for anything else.
def dataset_scales() -> dict[str, tuple[int, int]]:
    """Each registered dataset's label scale, read when asked (a plugin registered after import counts too)."""
    return {n: get_dataset(n).scale for n in dataset_names()}
UNPARSEABLE = "unparseable"
_COLUMNS = ["sample_id", "dataset", "user", "label", "prediction", "system", "model", "cot", "lookback", "executor"]


def records_frame(records, *, keep_transcript: bool = False) -> pd.DataFrame:
    """PredictionRecords (or dicts, or an existing frame) as a DataFrame with an `executor` column."""
    if isinstance(records, pd.DataFrame):
        df = records.copy()
    else:
        rows = []
        for r in records:
            d = r.model_dump(exclude=None if keep_transcript else {"transcript"}) if isinstance(r, PredictionRecord) \
                else dict(r)
            if not keep_transcript:
                d.pop("transcript", None)
            rows.append(d)
        df = pd.DataFrame(rows)
    missing = [c for c in ("sample_id", "user", "label", "prediction") if c not in df.columns]
    if missing:
        raise ValueError(f"records lack column(s) {missing}; expected PredictionRecord fields")
    if "executor" not in df.columns:
        opts = df["options"] if "options" in df.columns else pd.Series([{}] * len(df), index=df.index)
        df["executor"] = [o.get("executor") if isinstance(o, dict) else None for o in opts]
    df["prediction"] = pd.to_numeric(df["prediction"], errors="coerce")
    df["label"] = pd.to_numeric(df["label"], errors="raise")
    df["parsed"] = df["prediction"].notna()
    if "status" not in df.columns or df["status"].isna().any():  # frames made before records stated it
        errs = df["error"] if "error" in df.columns else pd.Series([None] * len(df), index=df.index)
        derived = [record_status(None if e is None or (isinstance(e, float) and math.isnan(e)) else e,
                                 None if math.isnan(p) else p) for e, p in zip(errs, df["prediction"], strict=True)]
        df["status"] = df["status"].fillna(pd.Series(derived, index=df.index)) if "status" in df.columns \
            else derived
    return df


def _answered(df: pd.DataFrame) -> pd.DataFrame:
    """The records where the model answered (status ok or parse_failure): errors are no prediction at all."""
    return df[df["status"] != "error"]


def answered(records) -> pd.DataFrame:
    """The answered records of any records or frame: what latency and token means are taken over (an error's
    zero latency and zero tokens are no measurement; errors are counted apart, `status_counts`)."""
    return _answered(records_frame(records))


def _scales(df: pd.DataFrame, scale: tuple[int, int] | None) -> tuple[np.ndarray, np.ndarray]:
    if scale is not None:
        return np.full(len(df), scale[0], float), np.full(len(df), scale[1], float)
    if "dataset" not in df.columns:
        raise ValueError("policy 'worst' needs `scale=` or a dataset column")
    scales = dataset_scales()
    unknown = set(df["dataset"]) - set(scales)
    if unknown:
        raise ValueError(f"no known scale for dataset(s) {sorted(unknown)}; pass scale=(lo, hi)")
    lo = df["dataset"].map(lambda d: scales[d][0]).to_numpy(float)
    hi = df["dataset"].map(lambda d: scales[d][1]).to_numpy(float)
    return lo, hi


MeanPrediction = float | Mapping[str, float]  # a constant, or per sample id (the leave-one-out evaluation rules)


def _mean_values(df: pd.DataFrame, mean_prediction: MeanPrediction) -> np.ndarray:
    """The mean predictor's prediction for each row of `df` (a constant, or looked up by sample_id)."""
    if isinstance(mean_prediction, Mapping):
        missing = sorted(set(df["sample_id"]) - set(mean_prediction))
        if missing:
            raise ValueError(f"no mean-predictor value for sample(s) {missing[:3]} (not scored by the evaluation rule)")
        return df["sample_id"].map(mean_prediction).to_numpy(float)
    return np.full(len(df), float(mean_prediction))


def abs_errors(records, policy: Policy = "exclude", *, mean_prediction: MeanPrediction | None = None,
               scale: tuple[int, int] | None = None, fill: float = PAPER_FAILURE_FILL) -> pd.Series:
    """Per-sample absolute error under a parse-failure policy; NaN marks samples the policy excludes (errors
    always: they are not predictions)."""
    df = records_frame(records)
    y, p = df["label"].to_numpy(float), df["prediction"].to_numpy(float)
    err = np.abs(y - p)
    errored = (df["status"] == "error").to_numpy()
    failed = np.isnan(p) & ~errored
    if policy == "exclude":
        pass
    elif policy == "fill":
        err[failed] = np.abs(y - fill)[failed]
    elif policy == "mean_fill":
        if mean_prediction is None:
            raise ValueError("policy 'mean_fill' needs mean_prediction")
        err[failed] = np.abs(y - _mean_values(df, mean_prediction))[failed]
    elif policy == "worst":
        lo, hi = _scales(df, scale)
        err[failed] = np.maximum(y - lo, hi - y)[failed]
    else:
        raise ValueError(f"unknown policy {policy!r}; expected one of {POLICIES}")
    err[errored] = np.nan
    return pd.Series(err, index=df.index, name="abs_error")


def mae(records, policy: Policy = "exclude", *, mean_prediction: MeanPrediction | None = None,
        scale: tuple[int, int] | None = None, fill: float = PAPER_FAILURE_FILL) -> float:
    """Mean absolute error; parse failures handled by `policy` (default: excluded, see module doc)."""
    e = abs_errors(records, policy, mean_prediction=mean_prediction, scale=scale, fill=fill).dropna()
    return float(e.mean()) if len(e) else math.nan


def _cluster_bootstrap(values: np.ndarray, clusters: np.ndarray, n_boot: int, seed: int) -> tuple[float, float]:
    """95% percentile CI of the pooled mean of `values`, resampling whole clusters with replacement."""
    codes, uniq = pd.factorize(clusters)
    k = len(uniq)
    if k < 2:
        return math.nan, math.nan
    sums = np.bincount(codes, weights=values, minlength=k)
    counts = np.bincount(codes, minlength=k).astype(float)
    rng = np.random.default_rng(seed)
    w = rng.multinomial(k, np.full(k, 1.0 / k), size=n_boot).astype(float)  # times each cluster is drawn
    stats = (w @ sums) / (w @ counts)
    lo, hi = np.percentile(stats, [2.5, 97.5])
    return float(lo), float(hi)


def mean_ci(values, clusters, *, n_boot: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """(mean, 95% CI low, high) of any per-sample quantity (latency, tokens), resampling participants."""
    v = np.asarray(values, dtype=float)
    c = np.asarray(clusters).astype(str)
    keep = ~np.isnan(v)
    if not keep.any():
        return math.nan, math.nan, math.nan
    lo, hi = _cluster_bootstrap(v[keep], c[keep], n_boot, seed)
    return float(v[keep].mean()), lo, hi


def mae_ci(records, *, by: str = "user", n_boot: int = 2000, seed: int = 0, policy: Policy = "exclude",
           mean_prediction: MeanPrediction | None = None, scale: tuple[int, int] | None = None,
           fill: float = PAPER_FAILURE_FILL) -> dict:
    """MAE with a 95% participant-cluster bootstrap CI: {mae, ci_low, ci_high, n, n_clusters}.
    The CI is NaN with fewer than two participants (no between-participant variation to resample)."""
    df = records_frame(records)
    e = abs_errors(df, policy, mean_prediction=mean_prediction, scale=scale, fill=fill)
    keep = e.notna().to_numpy()
    vals, cl = e.to_numpy()[keep], df[by].astype(str).to_numpy()[keep]
    if not len(vals):
        return {"mae": math.nan, "ci_low": math.nan, "ci_high": math.nan, "n": 0, "n_clusters": 0}
    lo, hi = _cluster_bootstrap(vals, cl, n_boot, seed)
    return {"mae": float(vals.mean()), "ci_low": lo, "ci_high": hi, "n": int(len(vals)),
            "n_clusters": int(len(set(cl)))}


def paired_difference(recs_a, recs_b, *, policy: Policy = "exclude", by: str = "user", n_boot: int = 2000,
                      seed: int = 0, scale: tuple[int, int] | None = None,
                      mean_prediction: MeanPrediction | None = None) -> dict:
    """MAE(a) - MAE(b) over the samples both have (paired by sample_id), with a cluster-bootstrap CI.

    `recs_b` may be another system's records, or the mean predictor: a number (its constant prediction) or a
    mapping sample_id -> prediction (a leave-one-out evaluation rule); then b never fails to parse.
    Negative = a is better. Samples present in only one side, and pairs dropped because a side failed to parse
    (policy "exclude") or has no answer (an error), are counted in the result.
    """
    a = records_frame(recs_a)
    if isinstance(recs_b, (int, float, np.floating, Mapping)):
        b = a[["sample_id", "user", "label"]].copy()
        b["prediction"] = _mean_values(b, recs_b)
        if "dataset" in a.columns:
            b["dataset"] = a["dataset"]
        b = records_frame(b)
    else:
        b = records_frame(recs_b)
    for name, f in (("a", a), ("b", b)):
        dup = f["sample_id"].duplicated()
        if dup.any():
            raise ValueError(f"records {name} hold sample {f['sample_id'][dup].iloc[0]!r} more than once")
    a = a.assign(err=abs_errors(a, policy, mean_prediction=mean_prediction, scale=scale))
    b = b.assign(err=abs_errors(b, policy, mean_prediction=mean_prediction, scale=scale))
    m = a[["sample_id", by, "label", "err", "status"]].merge(b[["sample_id", "label", "err", "status"]],
                                                             on="sample_id", suffixes=("_a", "_b"))
    bad = m[m["label_a"] != m["label_b"]]
    if len(bad):
        raise ValueError(f"sample {bad['sample_id'].iloc[0]!r} has different gold labels in the two runs")
    both = m.dropna(subset=["err_a", "err_b"])
    n_error = int(((m["status_a"] == "error") | (m["status_b"] == "error")).sum())
    d = (both["err_a"] - both["err_b"]).to_numpy()
    lo, hi = _cluster_bootstrap(d, both[by].astype(str).to_numpy(), n_boot, seed) if len(d) else (math.nan, math.nan)
    return {"diff": float(d.mean()) if len(d) else math.nan, "ci_low": lo, "ci_high": hi,
            "mae_a": float(both["err_a"].mean()) if len(d) else math.nan,
            "mae_b": float(both["err_b"].mean()) if len(d) else math.nan,
            "n_pairs": int(len(d)), "n_clusters": int(both[by].nunique()),
            "n_only_a": int(len(a) - len(m)), "n_only_b": int(len(b) - len(m)),
            "n_dropped_parse_failure": int(len(m) - len(both)) - n_error, "n_dropped_error": n_error}


def parse_failure_rate(records) -> float:
    """Share of the answered samples (errors left out) whose answer gave no label."""
    df = _answered(records_frame(records))
    return float((~df["parsed"]).mean()) if len(df) else math.nan


def status_counts(records) -> dict[str, int]:
    """n_ok, n_parse_failures, n_errors, and n_out_of_range: the parse failures that were an integer answer
    outside the scale (counted within n_parse_failures, never dropped silently)."""
    df = records_frame(records)
    st = df["status"]
    pe = df["parse_error"] if "parse_error" in df.columns else pd.Series([None] * len(df), index=df.index)
    oor = [(s == "parse_failure") and out_of_range_value(e) is not None for s, e in zip(st, pe, strict=True)]
    return {"n_ok": int((st == "ok").sum()), "n_parse_failures": int((st == "parse_failure").sum()),
            "n_errors": int((st == "error").sum()), "n_out_of_range": int(sum(oor))}


def _pred_labels(df: pd.DataFrame) -> pd.Series:
    return df["prediction"].map(lambda v: UNPARSEABLE if pd.isna(v) else int(v))


def mode_collapse(records) -> dict:
    """The modal predicted label (a parse failure counts as the label "unparseable"), its count and its
    rate over all windows (errors left out: no window was answered), as in the paper's Table 7. Ties go to the
    label that sorts first as text."""
    df = _answered(records_frame(records))
    if not len(df):
        return {"modal_label": None, "mode_count": 0, "n_windows": 0, "mode_rate": math.nan}
    counts = _pred_labels(df).value_counts()
    top = sorted(counts.items(), key=lambda kv: (-kv[1], str(kv[0])))[0]
    return {"modal_label": top[0], "mode_count": int(top[1]), "n_windows": len(df),
            "mode_rate": float(top[1] / len(df))}


def confusion(records, *, scale: tuple[int, int] | None = None) -> pd.DataFrame:
    """Gold label (rows) x predicted label (columns, with "unparseable"), every label of the scale shown; errors
    (no answer) left out."""
    df = _answered(records_frame(records))
    pred = _pred_labels(df)
    labels = set(df["label"].astype(int))
    if scale is None and "dataset" in df.columns and df["dataset"].nunique() == 1 \
            and df["dataset"].iloc[0] in dataset_scales():
        scale = dataset_scales()[df["dataset"].iloc[0]]
    if scale is not None:
        labels |= set(range(scale[0], scale[1] + 1))
    labels |= {p for p in pred if p != UNPARSEABLE}
    order = sorted(labels)
    tab = pd.crosstab(df["label"].astype(int).rename("gold"), pred.rename("predicted"))
    return tab.reindex(index=order, columns=[*order, UNPARSEABLE], fill_value=0)


def summarize_run(records, mean_prediction: MeanPrediction | None = None, *, n_boot: int = 2000, seed: int = 0,
                  scale: tuple[int, int] | None = None) -> dict:
    """One table row for a run: n, MAE with CI under both conventions (`mae`: failures excluded; `mae_scored`:
    failures scored at PAPER_FAILURE_FILL), worst-case MAE, parse failures (out-of-range answers among them) and
    errors (apart), mode collapse, and, given the mean predictor's value, its MAE on the same samples and the
    paired difference."""
    df = records_frame(records)
    ci = mae_ci(df, n_boot=n_boot, seed=seed)
    sc = mae_ci(df, n_boot=n_boot, seed=seed, policy="fill")
    mc = mode_collapse(df)
    counts = status_counts(df)
    row = {"n": len(df), "n_parsed": counts["n_ok"], "n_parse_failures": counts["n_parse_failures"],
           "n_out_of_range": counts["n_out_of_range"],
           "n_errors": counts["n_errors"], "n_users": int(df["user"].nunique()),
           "parse_failure_rate": parse_failure_rate(df) if len(df) else math.nan,
           "mae": ci["mae"], "mae_ci_low": ci["ci_low"], "mae_ci_high": ci["ci_high"],
           "mae_scored": sc["mae"], "mae_scored_ci_low": sc["ci_low"], "mae_scored_ci_high": sc["ci_high"],
           "modal_label": mc["modal_label"], "mode_rate": mc["mode_rate"]}
    try:
        row["mae_worst"] = mae(df, "worst", scale=scale)
    except ValueError:
        row["mae_worst"] = math.nan  # unknown scale: reported as missing, not guessed
    if mean_prediction is not None:
        row["mae_mean_fill"] = mae(df, "mean_fill", mean_prediction=mean_prediction)
        pdiff = paired_difference(df, mean_prediction, n_boot=n_boot, seed=seed)
        row.update(mean_predictor_mae=pdiff["mae_b"], diff_vs_mean=pdiff["diff"],
                   diff_vs_mean_ci_low=pdiff["ci_low"], diff_vs_mean_ci_high=pdiff["ci_high"])
    return row


def by_group(records, by: Iterable[str], **kwargs) -> pd.DataFrame:
    """`summarize_run` for each group of a records frame."""
    df = records_frame(records)
    by = list(by)
    rows = []
    for key, g in df.groupby(by, dropna=False, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        rows.append(dict(zip(by, key, strict=True)) | summarize_run(g, **kwargs))
    return pd.DataFrame(rows)


# ------------------------------------------------------------------ metrics that catch collapse (issue 39) ---
# MAE rewards answering the commonest label: a model that always answers it scores well and has read nothing.
# These are blind to the commonest answer. All of them use the parsed answers only (parse failures and errors
# left out; their counts are beside them in every table); `answer_share` counts an unparseable reply as an answer.
COLLAPSE_MARGIN = 0.20  # the commonest answer's share above the commonest label's share that raises the flag


def _parsed(records) -> pd.DataFrame:
    df = _answered(records_frame(records))
    return df[df["parsed"]]


def class_averaged_mae(records) -> float:
    """MAE computed per gold label and averaged over the labels present (macro MAE): answering the commonest label
    everywhere no longer wins by the labels' imbalance."""
    df = _parsed(records)
    if not len(df):
        return math.nan
    err = (df["label"] - df["prediction"]).abs()
    return float(err.groupby(df["label"]).mean().mean())


def quadratic_kappa(records, *, scale: tuple[int, int] | None = None) -> float:
    """Cohen's kappa with quadratic weights (sklearn) between gold labels and parsed answers: 0 for a constant
    answerer (or any answer unrelated to the label), 1 for perfect agreement. NaN when undefined (no parsed answer,
    or labels and answers both constant)."""
    from sklearn.metrics import cohen_kappa_score

    df = _parsed(records)
    if not len(df):
        return math.nan
    y, p = df["label"].astype(int).to_numpy(), df["prediction"].round().astype(int).to_numpy()
    labels = sorted(set(y) | set(p))
    if scale is None and "dataset" in df.columns and df["dataset"].nunique() == 1:
        scale = dataset_scales().get(df["dataset"].iloc[0])
    if scale is not None:
        labels = sorted(set(labels) | set(range(scale[0], scale[1] + 1)))
    with np.errstate(invalid="ignore", divide="ignore"):
        k = cohen_kappa_score(y, p, labels=labels, weights="quadratic")
    return float(k) if np.isfinite(k) else math.nan


def per_user_spearman(records, *, by: str = "user", min_days: int = 3) -> pd.Series:
    """Spearman's rho between answers and labels within each participant (parsed answers). A participant whose
    labels do not vary (or with fewer than `min_days` parsed days) has no rank to match and is left out; one whose
    labels vary but whose answers do not gets rho 0 (the answers carry no ranking), so a collapsed answerer scores 0,
    not 'undefined'."""
    from scipy.stats import spearmanr

    df = _parsed(records)
    out = {}
    for u, g in df.groupby(by, sort=True):
        if len(g) < min_days or g["label"].nunique() < 2:
            continue
        out[u] = 0.0 if g["prediction"].nunique() < 2 else float(spearmanr(g["prediction"], g["label"]).statistic)
    return pd.Series(out, dtype=float, name="spearman")


def within_person_spearman(records, *, by: str = "user", min_days: int = 3, n_boot: int = 2000,
                           seed: int = 0) -> dict:
    """The mean of the per-participant Spearman correlations (`per_user_spearman`), with a 95% interval that
    resamples participants: {rho, ci_low, ci_high, n_users}. Does the answer move with the person's own label from
    day to day, whatever their level?"""
    rho = per_user_spearman(records, by=by, min_days=min_days)
    if not len(rho):
        return {"rho": math.nan, "ci_low": math.nan, "ci_high": math.nan, "n_users": 0}
    lo, hi = _cluster_bootstrap(rho.to_numpy(), rho.index.astype(str).to_numpy(), n_boot, seed)
    return {"rho": float(rho.mean()), "ci_low": lo, "ci_high": hi, "n_users": int(len(rho))}


def answer_share(records, *, margin: float = COLLAPSE_MARGIN) -> dict:
    """The commonest answer's share of the answered days (an unparseable reply counts as one answer) against the
    commonest gold label's share on the same days, and `collapse`: True when the first exceeds the second by more
    than `margin` (20 points by default). The paper's PHIA rows (86% and 99.5% one answer) would raise it."""
    df = _answered(records_frame(records))
    if not len(df):
        return {"modal_answer": None, "answer_share": math.nan, "label_share": math.nan, "share_excess": math.nan,
                "collapse": False}
    counts = _pred_labels(df).value_counts()
    top = sorted(counts.items(), key=lambda kv: (-kv[1], str(kv[0])))[0]
    a = top[1] / len(df)
    g = float(df["label"].value_counts().iloc[0] / len(df))
    return {"modal_answer": top[0], "answer_share": float(a), "label_share": g, "share_excess": float(a - g),
            "collapse": bool(a - g > margin)}


def collapse_metrics(records, *, scale: tuple[int, int] | None = None, n_boot: int = 2000, seed: int = 0) -> dict:
    """One row of the metrics above for a cell: class-averaged MAE, quadratic weighted kappa, within-person
    Spearman with its interval, the commonest answer's share against the label's, and the collapse flag."""
    sp = within_person_spearman(records, n_boot=n_boot, seed=seed)
    return {"class_averaged_mae": class_averaged_mae(records), "qwk": quadratic_kappa(records, scale=scale),
            "within_person_spearman": sp["rho"], "spearman_ci_low": sp["ci_low"], "spearman_ci_high": sp["ci_high"],
            "spearman_n_users": sp["n_users"], **answer_share(records)}


def collapse_table(records, by: Iterable[str], **kwargs) -> pd.DataFrame:
    """`collapse_metrics` for each group (cell) of a records frame."""
    df = records_frame(records)
    by = [c for c in by if c in df.columns]
    rows = []
    for key, g in df.groupby(by, dropna=False, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        rows.append(dict(zip(by, key, strict=True)) | collapse_metrics(g, **kwargs))
    return pd.DataFrame(rows)
