"""The paper's directional claims, tested on our records with participant-bootstrap intervals (notebook 08).

Each claim becomes one or more comparisons (a difference with a 95% interval resampling participants) and a
verdict against the direction the paper reports: "agrees", "disagrees" or "cannot tell at this n". Nothing here
knows our results in advance; the verdicts are whatever the intervals say.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pandas as pd

from balms import metrics
from balms.experiments.cells import draw_lookbacks
from balms.experiments.claims import fmt, verdict
from balms.experiments.cohorts import cohort, mean_predictions
from balms.experiments.config import ExperimentConfig

# The paper's claims in our words, with the direction each comparison must take for the paper to be right.
CLAIMS = {
    "mean_predictor": "Zero-shot agents rarely beat the mean predictor (their MAE is not lower).",
    "cot": "CoT helps only some backbones (a one-model study can say only which kind ours is).",
    "lookback_rag": "RAG gains from a longer look-back (MAE at the longest look-back below the shortest).",
    "lookback_healthllm": "Health-LLM degrades with a longer look-back (MAE at the longest above the shortest).",
    "phia_collapse": "PHIA collapses to one label (its modal answer is more frequent than the commonest gold label).",
    "phia_executor": "The improved executor reduces PHIA's collapse (its modal-answer share below the faithful one's).",
    # ours (issue 26): the paper stops at diagnosis; these test the fix it points at, and the model size
    "personal_baseline_mean": "Ours, not the paper's: the personal-baseline system (the user's training-day label "
                              "anchor and channel deviations) beats the mean predictor (its MAE is lower).",
    "personal_baseline_healthllm": "Ours, not the paper's: the personal-baseline system beats Health-LLM zero-shot "
                                   "(same backbone, same days).",
    "personal_baseline_user_mean": "Ours: the personal-baseline system against its own anchor alone, the per-user "
                                   "training mean (no claim; which side it falls on).",
    "model_size": "Ours, not the paper's: a larger embedded backbone lowers each single-call system's MAE (same "
                  "days; the size backbone minus the study's backbone).",
    "supervised": "Notebook 00's baselines fit on the training days, on the same held-out days: their MAE minus the "
                  "mean predictor's (no claim of the paper; beside the LLM systems, one interval method).",
    # ours (issue 39): the bar an MAE must clear, and whether the agents read the sensors at all
    "best_constant": "Ours: each cell against the best constant for MAE, the training-day median label (the paper "
                     "compares with the mean predictor only; no claim, which side it falls on).",
    "sensor_placebo": "Ours: does the system use the sensors? Its MAE on the real window minus on a placebo window "
                      "(the sensor values of another user's window, or of the same user's distant one; labels, "
                      "profile, mood and dates kept): 'uses the sensors' only where the interval excludes 0.",
    "mood_only": "Ours: what the sensors add to the same-day mood and profile: the real cell's MAE minus the cell with "
                 "every sensor line removed.",
    "no_mood": "Ours: what the same-day mood line explains: the real cell's MAE minus the cell without it.",
    "format_example": "Ours: the paper template's example answer ('Answer: 1') replaced by a neutral placeholder: the "
                      "share of '1' answers, neutral minus paper example.",
}
NOT_RUN = "not run"
OURS = "personal_baseline"
OURS_CLAIMS = ("personal_baseline_mean", "personal_baseline_healthllm", "personal_baseline_user_mean", "model_size",
               "supervised", "best_constant", "sensor_placebo", "mood_only", "no_mood", "format_example")
BEST_CONSTANT = "global_median"  # balms.data.baselines: the training-day median, the best constant for MAE
USES_SENSORS, NO_EVIDENCE = "uses the sensors", "cannot tell at this n"


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


def _not_run(claim, comparison, expect, **extra) -> dict:
    """A comparison whose cells are absent: listed, with no numbers, so the table shows what was not run."""
    return {"claim": claim, "comparison": comparison, "expected": expect or "none", "diff": math.nan,
            "ci_low": math.nan, "ci_high": math.nan, "n": 0, "verdict": NOT_RUN, **extra}


def _mean(cfg: ExperimentConfig, dataset: str, cell: pd.DataFrame) -> dict[str, float]:
    """The mean predictor on one cell's samples, under the evaluation that drew them."""
    return mean_predictions(cfg, dataset, cell["sample_id"], draw_lookbacks(cfg))


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


def declared_part(cfg: ExperimentConfig, notebook: str, part: str, **kw) -> pd.DataFrame:
    """The records of one part of a notebook's declared cells; an empty frame when the profile declares none (the
    model-size check without `size_backbones`, the sensor test while it is off)."""
    from balms.experiments.cells import cells_for
    from balms.experiments.grid import run

    if not any(c.part == part for c in cells_for(notebook, cfg)):
        return pd.DataFrame()
    return run(cfg, notebook, part, **kw)


def supervised_records(cfg: ExperimentConfig, datasets=None) -> pd.DataFrame:
    """Notebook 00's baselines (balms.data.baselines.baseline_predictions, fit on the training days) as records on
    the zero-shot cells' evaluation samples (same look-back windows): dataset, baseline, sample_id, user, label,
    prediction (unrounded, as the mean predictor is scored)."""
    from balms.data.baselines import baseline_predictions
    from balms.experiments.cohorts import with_lookback
    from balms.experiments.grid import eval_samples

    rows = []
    for d in datasets or cfg.datasets:
        co = cohort(d, cfg)
        ev = eval_samples(cfg, d)
        train = [with_lookback(s, cfg.lookback) for s in co.train] if cfg.lookback else co.train
        for name, (pred, _) in baseline_predictions(train, ev, co.tables, seed=cfg.seed).items():
            if name != "mean_predictor":  # the mean predictor is the reference of every row
                rows += [{"dataset": d, "baseline": name, "sample_id": s.sample_id, "user": s.user, "label": s.label,
                          "prediction": float(p)} for s, p in zip(ev, pred, strict=True)]
    return pd.DataFrame(rows, columns=["dataset", "baseline", "sample_id", "user", "label", "prediction"])


def _cell(df: pd.DataFrame, d: str, s: str, m: str) -> pd.DataFrame:
    return df[(df.dataset == d) & (df.system == s) & (df.model == m)] if len(df) else df


def _pb_vs_mean(cfg: ExperimentConfig, d: str, cell: pd.DataFrame, comparison: str, model: str) -> dict:
    """The personal baseline's records of one backbone against the mean predictor on the same days."""
    kw = dict(dataset=d, system=OURS, model=model)
    return (_row("personal_baseline_mean", comparison, "lower", _paired(cell, _mean(cfg, d, cell)), **kw)
            if len(cell) else _not_run("personal_baseline_mean", comparison, "lower", **kw))


def ours_rows(cfg: ExperimentConfig, zs: pd.DataFrame, size: pd.DataFrame, supervised: pd.DataFrame) -> list[dict]:
    """The rows issue 26 adds, per dataset of the profile; a comparison whose cells are absent says "not run"."""
    from balms.agents.registry import get_system, system_names

    rows = []
    base_model = cfg.backbones[0]
    single = [s for s in system_names() if get_system(s).single_call]
    for d in cfg.datasets:
        pb, hl = _cell(zs, d, OURS, base_model), _cell(zs, d, "healthllm", base_model)
        kw = dict(dataset=d, system=OURS, model=base_model)
        what = f"{d} personal_baseline (ours) zero-shot"
        rows.append(_pb_vs_mean(cfg, d, pb, f"{what} - mean predictor", base_model))
        rows.append(_row("personal_baseline_healthllm", f"{what} - healthllm zero-shot", "lower", _paired(pb, hl), **kw)
                    if len(pb) and len(hl) else
                    _not_run("personal_baseline_healthllm", f"{what} - healthllm zero-shot", "lower", **kw))
        um = supervised[(supervised.dataset == d) & (supervised.baseline == "per_user_mean")] if len(supervised) \
            else supervised
        rows.append(_row("personal_baseline_user_mean", f"{what} - per-user training mean", None, _paired(pb, um), **kw)
                    if len(pb) and len(um) else
                    _not_run("personal_baseline_user_mean", f"{what} - per-user training mean", None, **kw))
        for big in cfg.size_backbones:  # does the larger backbone's personal baseline beat the mean predictor?
            rows.append(_pb_vs_mean(cfg, d, _cell(size, d, OURS, big), f"{what} {big} - mean predictor", big))
        for big in cfg.size_backbones or ["(no size_backbones)"]:
            for s in single:
                a, b = _cell(size, d, s, big), _cell(zs, d, s, base_model)
                c = f"{d} {get_system(s).label} zero-shot {big} - {base_model}"
                kw = dict(dataset=d, system=s, model=f"{big} - {base_model}")
                rows.append(_row("model_size", c, "lower", _paired(a, b), **kw) if len(a) and len(b)
                            else _not_run("model_size", c, "lower", **kw))
        for name, g in (supervised[supervised.dataset == d].groupby("baseline", sort=False) if len(supervised)
                        else []):
            rows.append(_row("supervised", f"{d} {name} (fit on training days) - mean predictor", None,
                             _paired(g, _mean(cfg, d, g)),
                             dataset=d, system=name, model="supervised"))
    return rows


def claims_table(cfg: ExperimentConfig, zs: pd.DataFrame, cot: pd.DataFrame, horizon: pd.DataFrame,
                 phia: pd.DataFrame, size: pd.DataFrame | None = None,
                 supervised: pd.DataFrame | None = None, sensor: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per comparison: claim, comparison, expected sign, difference with its 95% interval, n, verdict.

    `zs`, `cot`: records of the zero-shot and CoT cells; `horizon`: the look-back sweep; `phia`: PHIA records
    with an `executor` column; `size`: notebook 08's zero-shot cells on `size_backbones` (the paper's mean-predictor
    claim is re-tested on them too); `supervised`: `supervised_records`; `sensor`: notebook 08's sensor-test cells
    (a `variant` column, `sensor_rows`). Ours follow the paper's rows."""
    size = size if size is not None else pd.DataFrame(columns=zs.columns)
    supervised = supervised if supervised is not None else supervised_records(cfg)
    from balms.agents.registry import get_system

    rows = []
    both = pd.concat([zs, size], ignore_index=True) if len(size) else zs
    for (d, s, m), g in both.groupby(["dataset", "system", "model"], sort=False):
        if not get_system(s).paper:  # the paper's claim is about its systems; ours has its own rows
            continue
        rows.append(_row("mean_predictor", f"{d} {s} zero-shot - mean predictor", "higher",
                         _paired(g, _mean(cfg, d, g)), dataset=d, system=s, model=m))
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
    rows += ours_rows(cfg, zs, size, supervised)
    rows += best_constant_rows(both, supervised)
    rows += sensor_rows(cfg, zs, size, sensor)
    return pd.DataFrame(rows)


def best_constant_rows(cells: pd.DataFrame, supervised: pd.DataFrame) -> list[dict]:
    """Each zero-shot cell minus the best constant for MAE (`BEST_CONSTANT`, fit on the training days) on the same
    days: the headline comparison made against the stronger bar too."""
    rows = []
    for (d, s, m), g in cells.groupby(["dataset", "system", "model"], sort=False) if len(cells) else []:
        ref = supervised[(supervised.dataset == d) & (supervised.baseline == BEST_CONSTANT)] if len(supervised) \
            else supervised
        c = f"{d} {s} zero-shot {m} - training median (best constant)"
        rows.append(_row("best_constant", c, None, _paired(g, ref), dataset=d, system=s, model=m) if len(ref)
                    else _not_run("best_constant", c, None, dataset=d, system=s, model=m))
    return rows


def _variant(df: pd.DataFrame | None, name: str) -> pd.DataFrame:
    if df is None or not len(df) or "variant" not in df.columns:
        return pd.DataFrame()
    return df[df["variant"] == name]


def _answer_share_diff(a: pd.DataFrame, b: pd.DataFrame, value: int, *, seed: int = 0) -> dict:
    """Share of `a`'s answers equal to `value` minus `b`'s, paired by sample, participant-bootstrap interval."""
    m = a[["sample_id", "user", "prediction"]].merge(b[["sample_id", "prediction"]], on="sample_id",
                                                   suffixes=("_a", "_b"))
    d = (m["prediction_a"] == value).astype(float) - (m["prediction_b"] == value).astype(float)
    diff, lo, hi = metrics.mean_ci(d.to_numpy(), m["user"].to_numpy(), seed=seed) if len(m) else (math.nan,) * 3
    return {"diff": diff, "ci_low": lo, "ci_high": hi, "n": int(len(m))}


def sensor_verdict(d: dict) -> str:
    """'uses the sensors' where the interval of real minus placebo excludes 0 (either side: the answers moved with
    the sensor values), else 'cannot tell at this n' (no interval: said so)."""
    v = verdict(d["diff"], d["ci_low"], d["ci_high"])
    return "no interval" if v == "no interval" else USES_SENSORS if v in ("lower", "higher") else NO_EVIDENCE


def sensor_rows(cfg: ExperimentConfig, zs: pd.DataFrame, size: pd.DataFrame, sensor: pd.DataFrame | None) -> list[dict]:
    """Issue 39's rows, per dataset of `sensor_test_datasets`, system and backbone: real minus each placebo (with the
    'uses the sensors' verdict), real minus mood-only, real minus no-mood (MAE, paired by day, participant
    bootstrap), and the neutral example's share of '1' answers minus the paper example's. A comparison whose cells
    are absent says "not run": with the test off, its rows are listed as such for the profile's datasets whose
    prompt carries a same-day self-report (PMData's mood), so the table shows what is pending."""
    from balms.data.channels import DEFAULT_CONTEXT_CHANNELS
    from balms.experiments.cells import SENSOR_VARIANTS, _applies

    rows = []
    real_all = pd.concat([x for x in (zs, size) if x is not None and len(x)], ignore_index=True) \
        if any(x is not None and len(x) for x in (zs, size)) else pd.DataFrame()
    models = list(dict.fromkeys([*cfg.backbones, *cfg.size_backbones]))
    shown = [d for d in cfg.sensor_test_datasets if d in cfg.datasets] if cfg.sensor_test_datasets else \
        [d for d in cfg.datasets if d in DEFAULT_CONTEXT_CHANNELS]
    for d in shown:
        for m in models:
            for s in cfg.sensor_test_systems:
                real = _cell(real_all, d, s, m)
                for variant in SENSOR_VARIANTS:
                    if not _applies(variant, s, cfg):
                        continue
                    other = _cell(_variant(sensor, variant), d, s, m)
                    kw = dict(dataset=d, system=s, model=m)
                    if variant == "neutral_example":
                        claim, c = "format_example", f"{d} {s} {m} share of '1' answers: neutral - paper example"
                    elif variant.startswith("placebo"):
                        where = "another user's" if variant == "placebo_other_user" else "the same user's distant"
                        claim, c = "sensor_placebo", f"{d} {s} {m} real - placebo ({where} window)"
                    else:
                        what = "mood only (no sensor line)" if variant == "mood_only" else "no mood"
                        claim, c = variant, f"{d} {s} {m} real - {what}"
                    if not (len(real) and len(other)):
                        rows.append(_not_run(claim, c, None, **kw))
                        continue
                    if claim == "format_example":
                        rows.append(_row(claim, c, None, _answer_share_diff(other, real, 1, seed=cfg.seed), **kw))
                        continue
                    p = _paired(real, other)
                    row = _row(claim, c, None, p, **kw)
                    if claim == "sensor_placebo":
                        row["verdict"] = sensor_verdict(p)
                    rows.append(row)
    return rows


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
            p = _paired(sub, _mean(cfg, dataset, sub))
            rows.append({"n": n, "n_scored": p["n"], "width": p["ci_high"] - p["ci_low"], "kind": "measured"})
    measured = pd.DataFrame(rows)
    top = measured.iloc[-1]
    rows += [{"n": n, "n_scored": np.nan, "width": top.width * math.sqrt(top.n / n), "kind": "projected"}
             for n in sorted(ns) if n > ran]
    out = pd.DataFrame(rows)
    out["half_width"] = out["width"] / 2
    return out


ANSWER = {"agrees": "yes, lower MAE (interval below 0)", "disagrees": "no, higher MAE (interval above 0)"}


def _num(r) -> str:
    return f"{fmt(r.diff)}, 95% CI {fmt(r.ci_low)} to {fmt(r.ci_high)}; n = {r.n}"


def ours_sentence(table: pd.DataFrame) -> str:
    """The answer to issue 26's two questions, from the table's verdicts: does the personal baseline beat the mean
    predictor and Health-LLM, and does the larger backbone change any of the paper's claims."""
    out = []
    for claim, what in (("personal_baseline_mean", "beat the mean predictor"),
                        ("personal_baseline_healthllm", "beat Health-LLM zero-shot")):
        for r in table[table.claim == claim].itertuples():
            out.append(f"{r.dataset}: does the personal baseline (ours) on {r.model} {what}? "
                       f"{ANSWER.get(r.verdict, r.verdict)}" + (f" ({_num(r)})" if r.verdict != NOT_RUN else "") + ".")
    for r in table[(table.claim == "personal_baseline_user_mean") & (table.verdict != NOT_RUN)].itertuples():
        out.append(f"{r.dataset}: the model's answer minus its own anchor alone (the per-user training mean): "
                   f"{_num(r)}.")
    size = table[table.claim == "model_size"]
    if len(size):
        ran = size[size.verdict != NOT_RUN]
        each = "; ".join(f"{r.dataset} {r.system}: {ANSWER.get(r.verdict, r.verdict)} ({_num(r)})"
                         for r in ran.itertuples())
        out.append(f"Does the larger backbone lower the MAE? {each}." if len(ran) else "Larger backbone: not run.")
        bigs = {m.split(" - ")[0] for m in ran.model} if len(ran) else set()
        mp = table[(table.claim == "mean_predictor") & table.model.isin(bigs)]
        if len(mp):
            out.append("The paper's mean-predictor claim on the larger backbone: "
                       + "; ".join(f"{r.dataset} {r.system} {r.verdict} ({_num(r)})" for r in mp.itertuples()) + ".")
    return " ".join(out) or "No comparison of ours in this table."


def answer_shares(records: pd.DataFrame, *, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Each cell's commonest answer and its share of the cell's days (unparseable answers count as one value):
    a share of 1.0 is a cell that gave the same answer on every day, whatever the data said. Beside it the metrics
    blind to the commonest answer (`balms.metrics.collapse_metrics`: class-averaged MAE, quadratic weighted kappa,
    within-person Spearman with its participant-bootstrap interval) and the collapse flag (the answer's share above
    the commonest label's by more than 20 points). One row per cell (a look-back sweep's L14 cell is not the
    zero-shot cell: its days are drawn at the longest look-back)."""
    cols = [c for c in ("dataset", "system", "model", "cot", "lookback", "executor", "variant")
            if c in records.columns]
    rows = []
    for _, g in records.drop_duplicates(["cell_key", "sample_id"]).groupby("cell_key", sort=False):
        counts = _labels(g).value_counts()
        cm = metrics.collapse_metrics(g, n_boot=n_boot, seed=seed)
        # which days (not the cell's key, which moves with the code): the sweep's L14 cell and the zero-shot one differ
        days = hashlib.sha256("\n".join(sorted(g["sample_id"])).encode()).hexdigest()[:12]
        rows.append({**g.iloc[0][cols].to_dict(), "days": days, "n": len(g),
                     "modal_answer": counts.index[0], "modal_share": round(counts.iloc[0] / len(g), 3),
                     "distinct_answers": len(counts),
                     "gold_modal_share": round(g["label"].value_counts().iloc[0] / len(g), 3),
                     **{k: (round(v, 3) if isinstance(v, float) else v) for k, v in cm.items()
                        if k in ("class_averaged_mae", "qwk", "within_person_spearman", "spearman_ci_low",
                                 "spearman_ci_high", "spearman_n_users", "collapse")}})
    return pd.DataFrame(rows)


def answers_sentence(answers: pd.DataFrame) -> str:
    """Which cells gave one answer on every day, from `answer_shares`."""
    one = answers[answers.modal_share == 1.0]
    flagged = (f"{int(answers['collapse'].sum())} of {len(answers)} cells raise the collapse flag (commonest answer's "
               "share more than 20 points above the commonest label's). ") if "collapse" in answers else ""
    return flagged + (f"{len(one)} of {len(answers)} cells gave one answer on every day: "
            + "; ".join(f"{r.dataset} {r.system} {r.model}{' CoT' if r.cot else ''}"
                        f"{f' L{r.lookback}' if r.lookback != 14 else ''}"
                        f"{f' ({r.executor} executor)' if isinstance(getattr(r, 'executor', None), str) else ''}"
                        f" always {r.modal_answer} (n = {r.n})" for r in one.itertuples()) + ".")


SENSOR_CLAIMS = ("sensor_placebo", "mood_only", "no_mood", "format_example")


def sensor_sentence(table: pd.DataFrame) -> str:
    """The answer to issue 39's questions from the claims table: which cells use the sensors (real minus placebo
    interval excludes 0), what the mood line and the sensors each move, and the neutral example's effect on the
    share of '1' answers; "not run" when the sensor test has not run."""
    rows = table[table.claim.isin(SENSOR_CLAIMS)]
    ran = rows[rows.verdict != NOT_RUN]
    if not len(rows):
        return "The sensor test declares no comparison in this profile."
    if not len(ran):
        return (f"The sensor test (placebo, mood only, no mood, neutral example): not run ({len(rows)} comparisons "
                "declared; `sensor_test_datasets` turns its cells on).")
    pl = ran[ran.claim == "sensor_placebo"]
    uses = pl[pl.verdict == USES_SENSORS]
    out = [f"Uses the sensors (real minus placebo MAE interval excludes 0): {len(uses)} of {len(pl)} placebo "
           "comparisons" + (": " + "; ".join(f"{r.comparison} ({_num(r)})" for r in uses.itertuples())
                            if len(uses) else "") + "."]
    for claim, what in (("mood_only", "Real minus mood only (what the sensors add)"),
                        ("no_mood", "Real minus no mood (what the mood line explains)"),
                        ("format_example", "Neutral minus paper example, share of '1' answers")):
        g = ran[ran.claim == claim]
        if len(g):
            out.append(f"{what}: " + "; ".join(f"{r.dataset} {r.system} {r.model} {_num(r)}" for r in g.itertuples())
                       + ".")
    return " ".join(out)


def best_constant_sentence(table: pd.DataFrame) -> str:
    """How many cells beat the best constant for MAE (the training median) on the same days, from the table."""
    g = table[(table.claim == "best_constant") & (table.verdict != NOT_RUN)]
    if not len(g):
        return "No cell was compared with the best constant."
    v = g.apply(lambda r: verdict(r["diff"], r["ci_low"], r["ci_high"]), axis=1)
    lower, tie = g[v == "lower"], int(v.isin(["indistinguishable", "no interval"]).sum())
    names = "; ".join(f"{r.dataset} {r.system} {r.model}" for r in lower.itertuples())
    return (f"Against the best constant for MAE (the training median label), {len(lower)} of {len(g)} cells have a "
            f"lower MAE, {int((v == 'higher').sum())} a higher one, {tie} cannot be told apart at this n"
            + (f": lower: {names}" if names else "") + ".")
