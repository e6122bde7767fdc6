"""Per-cell summaries (MAE with participant-bootstrap intervals, parse failures, cost) and the paper's table
layouts with the paper's numbers beside ours."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from balms.experiments.cells import draw_lookbacks
from balms.experiments.cohorts import cohort, mean_predictions
from balms.experiments.config import ExperimentConfig

CELL_KEYS = ["dataset", "system", "model", "cot", "lookback"]


def summarize(df: pd.DataFrame, by: list[str] | None = None, *, cfg: ExperimentConfig | None = None,
              n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """One row per cell: n, MAE with a participant-bootstrap 95% CI, parse failures, mode collapse, cost; latency
    and token means over the records that answered.

    Both MAE conventions side by side (docs/scoring.md): `mae` leaves parse failures out, `mae_scored` scores
    each as the answer 0 (the rule the paper's printed numbers allow); out-of-range answers are parse failures,
    counted in `n_out_of_range`; errors (no answer: `n_errors`) are counted apart, never as parse failures;
    `mae_worst` charges each failure the worst possible error on the scale, `mae_mean_fill` the mean
    predictor's. With `cfg`, each cell is also compared with the mean predictor on the same samples
    (paired difference with a participant-bootstrap CI).
    """
    from balms import metrics

    by = by or [k for k in CELL_KEYS if k in df.columns]
    rows = []
    for key, g in df.groupby(by, dropna=False, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        row = dict(zip(by, key, strict=True))
        kw = {}
        if cfg is not None and "dataset" in row:
            co = cohort(row["dataset"], cfg)
            kw = {"mean_prediction": mean_predictions(cfg, row["dataset"], g["sample_id"], draw_lookbacks(cfg)),
                  "scale": (co.tables.target.scale_min, co.tables.target.scale_max)}
        row.update(metrics.summarize_run(g, n_boot=n_boot, seed=seed, **kw))
        # latency, tokens and forced answers over the records that answered: an error's 0 s and 0 tokens are no
        # measurement (errors are counted apart: n_errors)
        done = metrics.answered(g)
        lat, lat_lo, lat_hi = metrics.mean_ci(done["latency_s"], done["user"], n_boot=n_boot, seed=seed)
        # 0.1 s: re-runs from the cache agree (PHIA's code execution is re-measured)
        row.update(mean_latency_s=round(lat, 1), latency_ci_low=round(lat_lo, 1), latency_ci_high=round(lat_hi, 1))
        if "forced" in g:  # CoT forced answers and PHIA forced finishes: how often the budget ran out
            row["forced_rate"] = float(done["forced"].mean()) if len(done) else np.nan
        row["mean_prompt_tokens"] = float(done["prompt_tokens"].mean()) if len(done) else np.nan
        row["mean_completion_tokens"] = float(done["completion_tokens"].mean()) if len(done) else np.nan
        row["source"] = ";".join(sorted(set(g["source"])))
        rows.append(row)
    return pd.DataFrame(rows)


class _SystemLabels(Mapping):
    """system -> the name tables show (the systems registry's label: the paper's name, or ours marked)."""

    def __getitem__(self, system: str) -> str:
        from balms.agents.registry import get_system

        try:
            return get_system(system).label
        except ValueError:
            raise KeyError(system) from None

    def __iter__(self):
        from balms.agents.registry import system_names

        return iter(system_names())

    def __len__(self) -> int:
        from balms.agents.registry import system_names

        return len(system_names())


PAPER_SYSTEM_NAMES: Mapping[str, str] = _SystemLabels()
# ExperimentConfig.scoring -> the suffix of the Table 3 column it compares with the paper
_SCORED_SUFFIX = {"exclude": "", "fill": " scored"}
# The paper's judge scope (Figure 4, Table 6): GLOBEM rationales of three systems
PAPER_JUDGE_DATASETS = ("globem",)
PAPER_JUDGE_SYSTEMS = ("healthllm", "rag", "phia")


def paper_mean_predictor(datasets) -> dict[str, float]:
    """The paper's mean predictor per dataset (Table 3's reference row: DiversityOne 0.58, PMData 0.48, GLOBEM
    0.80); NaN for a dataset the table has no column for."""
    from balms.paper import paper_table

    paper = paper_table("table3_zero_shot_mae")
    row = paper[paper["system"] == "Mean Predictor"]
    return {d: float(row[f"{d}_mae"].iloc[0]) if len(row) and f"{d}_mae" in row else np.nan for d in datasets}


def paper_points(datasets, systems, *, cot: bool = False) -> dict[tuple[str, str], list[float]]:
    """The paper's Table 3 values per (dataset, system), one per backbone; [] where the paper has none (a dataset
    or system of ours)."""
    from balms.paper import paper_table

    paper = paper_table("table3_zero_shot_mae")
    col = lambda d: f"{d}_{'cot_' if cot else ''}mae"  # noqa: E731
    return {(d, s): (paper.loc[paper["system"] == PAPER_SYSTEM_NAMES.get(s, s), col(d)].dropna().tolist()
                     if col(d) in paper else []) for d in datasets for s in systems}


def table3_paper_vs_ours(summary: pd.DataFrame, mean_pred: pd.DataFrame, *, cot: bool,
                         scoring: str = "exclude") -> pd.DataFrame:
    """Table 3 layout: one row per (dataset, system); a column group per backbone.

    Each of the paper's backbones gets `paper <b>`, then, where we ran that backbone (paper profile),
    `ours <b>` (parse failures excluded) with its CI, `ours <b> scored` (failures scored as the answer 0,
    docs/scoring.md), parse-failure rate, out-of-range answers among them, error count (samples with no answer,
    apart from parse failures) and `diff <b>` (ours minus the paper's same cell, ours under `scoring`: the
    profile's convention) right beside it, then
    ours minus the mean predictor on the same target days with its participant-bootstrap interval, and n parsed.
    Our models that are not paper backbones (the embedded CPU models) follow, then the mean predictors.
    """
    from balms.paper import paper_table

    paper = paper_table("table3_zero_shot_mae")
    paper_backbones = [b for b in dict.fromkeys(paper["backbone"]) if b != "Reference baseline"]
    sub = summary[summary["cot"] == cot]
    ours_models = list(dict.fromkeys(sub["model"]))
    order = paper_backbones + [m for m in ours_models if m not in paper_backbones]
    rows = []
    for (d, s), g in sub.groupby(["dataset", "system"], sort=False):
        col = f"{d}_{'cot_' if cot else ''}mae"
        pr = paper[paper["system"] == PAPER_SYSTEM_NAMES.get(s, s)]
        paper_of = dict(zip(pr["backbone"], pr[col], strict=True)) if col in pr else {}  # a dataset of ours: none
        ours_of = {r.model: r for r in g.itertuples()}
        row = {"dataset": d, "system": PAPER_SYSTEM_NAMES.get(s, s)}
        for b in order:
            if b in paper_backbones:
                row[f"paper {b}"] = paper_of.get(b, np.nan)
            if b in ours_models:
                r = ours_of.get(b)
                row[f"ours {b}"] = r.mae if r is not None else np.nan
                row[f"ours {b} CI"] = f"[{r.mae_ci_low:.2f}, {r.mae_ci_high:.2f}]" if r is not None else ""
                row[f"ours {b} scored"] = getattr(r, "mae_scored", np.nan) if r is not None else np.nan
                row[f"ours {b} parse fail"] = r.parse_failure_rate if r is not None else np.nan
                row[f"ours {b} out of range"] = int(getattr(r, "n_out_of_range", 0)) if r is not None else 0
                row[f"ours {b} errors"] = int(getattr(r, "n_errors", 0)) if r is not None else 0
                if b in paper_backbones:
                    row[f"diff {b}"] = row[f"ours {b}{_SCORED_SUFFIX[scoring]}"] - row[f"paper {b}"]
                # ours against the mean predictor on the same target days, participant-bootstrap interval
                ok = r is not None and np.isfinite(r.diff_vs_mean_ci_low) and np.isfinite(r.diff_vs_mean_ci_high)
                row[f"ours {b} minus mean predictor"] = r.diff_vs_mean if r is not None else np.nan
                row[f"ours {b} minus mean predictor CI"] = (
                    f"[{r.diff_vs_mean_ci_low:.2f}, {r.diff_vs_mean_ci_high:.2f}]" if ok else "")
                row[f"ours {b} n parsed"] = int(r.n_parsed) if r is not None else 0
        row["paper mean predictor"] = paper_mean_predictor([d])[d]
        m = mean_pred[mean_pred["dataset"] == d]
        row["ours mean predictor"] = float(m["mae_raw_mean"].iloc[0]) if len(m) else np.nan
        # the best constant for MAE beside it (issue 39): the training median label
        row["ours best constant (training median)"] = float(m["mae_train_median"].iloc[0]) \
            if len(m) and "mae_train_median" in m else np.nan
        row["n"] = int(g["n"].max())
        row["source"] = ";".join(sorted(set(g["source"])))
        rows.append(row)
    return pd.DataFrame(rows)


SCORING_TEXT = {"exclude": "MAE with parse failures excluded (scored MAE, failures as the answer 0, beside it)",
                "fill": "MAE with parse failures scored as the answer 0 (the paper's, docs/scoring.md; "
                        "exclusion MAE beside it)"}


def number_caption(summary: pd.DataFrame, cfg: ExperimentConfig, records: pd.DataFrame | None = None) -> str:
    """What changes a table's numbers, for its caption: the look-back per dataset (the paper's beside it when it
    differs; from `records` when the summary is not split by look-back), the samples per cell and the MAE
    convention compared with the paper."""
    from balms.data.registry import get_dataset

    parts = []
    src = records if records is not None else summary
    if {"dataset", "lookback"} <= set(src.columns) and len(src):
        for d, g in src.groupby("dataset", sort=False):
            lbs = sorted({int(v) for v in g["lookback"].dropna()})
            paper = get_dataset(d).default_lookback
            shown = "/".join(map(str, lbs))
            parts.append(f"{d} {shown} d" + ("" if lbs == [paper] else f" (paper {paper} d)"))
    n = f"n per cell {int(summary['n'].min())}-{int(summary['n'].max())}" if "n" in summary and len(summary) else ""
    return "; ".join(p for p in ["look-back " + ", ".join(parts) if parts else "", n, SCORING_TEXT[cfg.scoring]]
                     if p)
