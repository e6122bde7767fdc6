"""Per-dataset summary (users, samples, label counts, every filter count, baseline MAEs) and the
`make data` step that writes data/processed/<dataset>/samples.parquet and tables/data_summary.csv.

    balms data write --all          # every dataset (real where present, else synthetic)
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from balms import paths
from balms.data.baselines import run_baselines
from balms.data.evaluation import EVALUATION_RULE_TEXT, EVALUATION_RULES, evaluate, mean_predictor_mae
from balms.data.loading import load_dataset, load_from_dir
from balms.data.registry import dataset_names, get_dataset
from balms.data.samples import (
    DEFAULT_RULE,
    SAMPLE_RULE_TEXT,
    SAMPLE_RULES,
    TEST_FRAC,
    build_samples,
    split_target_days,
)


# The paper's Table 5 / Section 4.1 figures, printed beside ours.
def _paper(name: str) -> tuple[int | None, float | None]:
    """The paper's sample count and mean-predictor MAE for a dataset (None where it has none: a plugin's)."""
    if name not in dataset_names():
        return None, None
    return get_dataset(name).paper_n_samples, get_dataset(name).paper_mean_predictor_mae

# The evaluation rule, one statement used by the README, notebook 00 and the cohorts (balms.experiments.cohorts).
EVALUATION_RULE = (
    "Samples are built with the sample rule {rule!r} ({rule_text}). Evaluation rule {evaluation!r} "
    "(balms.data.evaluation): {evaluation_text}. Every system and the mean predictor are scored on the same "
    "samples. A profile with n_samples = 0 evaluates every scored day; n_samples = k evaluates a seeded subset of "
    "k of them, the same for every system and backbone."
)
# Table 7's PHIA window counts ("across all held-out windows"), printed beside the evaluation rules' counts
PAPER_TABLE7_N = {"pmdata": 1463, "globem": 1640, "diversityone": 761}


def evaluation_statement(rule: str = DEFAULT_RULE, evaluation: str = "heldout30") -> str:
    """The evaluation rule as one paragraph (the same text on the book's data page and in notebook 00)."""
    return EVALUATION_RULE.format(rule=rule, rule_text=SAMPLE_RULE_TEXT[rule], evaluation=evaluation,
                                  evaluation_text=EVALUATION_RULE_TEXT[evaluation])


def evaluation_rule_table(tables_by_dataset: dict, *, seed: int = 0, sample_rules=None,
                          evaluation_rules=None) -> pd.DataFrame:
    """One row per (dataset, sample rule, evaluation rule): samples, scored samples, the mean predictor's MAE on
    them (unrounded and rounded), and the paper's counts beside (Table 5's samples, Table 7's PHIA windows, the
    mean predictor of Table 3). `tables_by_dataset` maps dataset -> loaded tables."""
    rows = []
    for d, tables in tables_by_dataset.items():
        paper_n, paper_mae = _paper(d)
        for rule in sample_rules or SAMPLE_RULES:
            ss = build_samples(tables, rule=rule)
            for ev_rule in evaluation_rules or EVALUATION_RULES:
                ev = evaluate(ss, ev_rule, seed=seed)
                rows.append({"dataset": d, "source": tables.source, "sample_rule": rule, "evaluation_rule": ev_rule,
                             "users": len({s.user for s in ss}), "n_samples": len(ss), "n_scored": len(ev.test),
                             "mean_predictor_mae": round(mean_predictor_mae(ev), 4),
                             "mean_predictor_mae_rounded": round(mean_predictor_mae(ev, rounded=True), 4),
                             "paper_table5_n": paper_n, "paper_table7_n": PAPER_TABLE7_N.get(d),
                             "paper_mean_predictor_mae": paper_mae})
    return pd.DataFrame(rows)


def summarise(tables, samples, *, seed: int = 0) -> dict:
    train, test = split_target_days(samples, test_frac=TEST_FRAC, seed=seed)
    base = run_baselines(train, test, tables, seed=seed) if len(train) and len(test) else pd.DataFrame()
    mp = base.set_index("baseline").loc["mean_predictor"] if len(base) else None
    paper_n, paper_mae = _paper(tables.name)
    return {
        "dataset": tables.name,
        "source": tables.source,
        "raw_dir": tables.raw_dir,
        "target": tables.target.name,
        "scale": [tables.target.scale_min, tables.target.scale_max],
        "lookback": samples.lookback,
        "n_users": len({s.user for s in samples}),
        "n_samples": len(samples),
        "n_label_rows": samples.n_label_rows,
        "label_counts": {str(k): int(v) for k, v in samples.label_counts().items()},
        "dropped": {k: int(v) for k, v in samples.dropped.items()},
        "loader_counts": {k: int(v) for k, v in tables.dropped.items()},
        "sample_rules": samples.params,
        "split": {"kind": "target_days", "test_frac": TEST_FRAC, "seed": seed, "n_train": len(train),
                  "n_test": len(test)},
        "mean_predictor_mae": None if mp is None else round(float(mp["mae"]), 4),
        "mean_predictor_mae_rounded": None if mp is None else round(float(mp["mae_rounded"]), 4),
        "mean_prediction": None if mp is None else round(float(mp["prediction"]), 4),
        "baselines": {r.baseline: {"mae": round(float(r.mae), 4), "mae_rounded": round(float(r.mae_rounded), 4)}
                      for r in base.itertuples()},
        "paper_n_samples": paper_n,
        "paper_mean_predictor_mae": paper_mae,
        "n_channels": len(tables.channels),
        "missingness": {c.label: round(float(tables.daily[c.name].isna().mean()), 4)
                        for c in tables.channels if c.name in tables.daily.columns},
        "n_catalogue_columns": None if tables.catalogue is None else int(len(tables.catalogue)),
    }


def dataset_summary(name: str, raw=None, *, seed: int = 0, return_samples: bool = False, rule: str | None = None,
                    tables=None, **opts):
    """Summary dict for one dataset. `raw`: an explicit raw folder (for GLOBEM one cohort or a
    folder of cohorts); None = BALMS_RAW_DIR/<name>, else the synthetic cohort. `rule`: a named sample
    rule (balms.data.samples.SAMPLE_RULES; default the benchmark's). `tables`: already loaded tables."""
    if tables is None:
        tables = load_from_dir(name, Path(raw), **opts) if raw else load_dataset(name, **opts)
    samples = build_samples(tables, rule=rule)
    out = summarise(tables, samples, seed=seed)
    return (out, samples) if return_samples else out


def sample_rule_table(summaries_by_rule: dict[str, dict[str, dict]]) -> pd.DataFrame:
    """One row per (dataset, sample rule): samples, users, held-out days, the mean predictor's MAE on them,
    every filter's count, and the paper's figures beside. `summaries_by_rule` maps rule -> dataset ->
    `dataset_summary(..., rule=rule)`."""
    rows = []
    for rule, by_ds in summaries_by_rule.items():
        for d, s in by_ds.items():
            rows.append({"dataset": d, "rule": rule, "benchmark_rule": rule == DEFAULT_RULE, "source": s["source"],
                         "users": s["n_users"], "n_samples": s["n_samples"], "n_test": s["split"]["n_test"],
                         "mean_predictor_mae": s["mean_predictor_mae"],
                         "paper_n_samples": s["paper_n_samples"],
                         "paper_mean_predictor_mae": s["paper_mean_predictor_mae"],
                         **{f"dropped_{k}": v for k, v in s["dropped"].items()},
                         "rule_text": SAMPLE_RULE_TEXT[rule]})
    df = pd.DataFrame(rows)
    drop_cols = [c for c in df.columns if c.startswith("dropped_")]
    df[drop_cols] = df[drop_cols].fillna(0).astype(int)
    return df


def all_rule_summaries(datasets, *, seed: int = 0, rules=None) -> dict[str, dict[str, dict]]:
    """`dataset_summary` under every named sample rule, each dataset loaded once."""
    rules = list(rules or SAMPLE_RULES)
    tabs = {d: load_dataset(d) for d in datasets}
    return {r: {d: dataset_summary(d, seed=seed, rule=r, tables=tabs[d]) for d in datasets} for r in rules}


TABLE5_COLUMNS = ["dataset", "target", "scale_min", "scale_max", "lookback_days", "cohort", "paper_n_samples",
                  "source", "ours_users", "ours_n_samples", "ours_n_test", "ours_mean_predictor_mae",
                  "paper_mean_predictor_mae"]


def table5_eval_sets(summaries: dict[str, dict]) -> pd.DataFrame:
    """Table 5 (evaluation sets): every row of the paper's table, our counts beside where summarised.

    `summaries` maps dataset name -> `dataset_summary(...)` dict. Lives in the library (not the notebook) so an
    installed package can rebuild it; the paper's numbers come from the packaged `paper_tables`.
    """
    from balms.paper import paper_table

    paper5 = paper_table("table5_eval_sets")
    paper5["dataset_key"] = paper5["dataset"].str.lower()
    # a dataset the paper has no row for (a plugin's): its own row, the paper's columns empty
    extra = [get_dataset(d) for d in summaries if d not in set(paper5["dataset_key"])]
    rows = [{"dataset": d.display_name, "dataset_key": d.name, "scale_min": d.scale[0], "scale_max": d.scale[1],
             "lookback_days": d.default_lookback, "cohort": "not in the paper"} for d in extra]
    if rows:
        paper5 = pd.concat([paper5, pd.DataFrame(rows, columns=paper5.columns)], ignore_index=True)
    ours = pd.DataFrame([{"dataset_key": d, "source": s["source"], "ours_users": s["n_users"],
                          "ours_n_samples": s["n_samples"],
                          "ours_n_test": (s.get("split") or {}).get("n_test"),
                          "ours_mean_predictor_mae": None if s["mean_predictor_mae"] is None
                          else round(s["mean_predictor_mae"], 3)}
                         for d, s in summaries.items()],
                        columns=["dataset_key", "source", "ours_users", "ours_n_samples", "ours_n_test",
                                 "ours_mean_predictor_mae"])
    # every paper row (Table 5 lists all three datasets), ours beside where summarised
    t5 = paper5.merge(ours, on="dataset_key", how="left").rename(columns={"n_samples": "paper_n_samples"})
    for c in ("ours_users", "ours_n_samples", "ours_n_test"):
        t5[c] = t5[c].astype("Int64")
    mae = paper_table("table3_zero_shot_mae").iloc[0]
    t5["paper_mean_predictor_mae"] = t5["dataset_key"].map(lambda key: mae.get(f"{key}_mae"))
    return t5[TABLE5_COLUMNS]


def table5_sentences(t5: pd.DataFrame) -> list[str]:
    """One sentence per summarised row of `table5_eval_sets`: our counts against the paper's where it has them."""
    def fmt(x, digits: int = 2) -> str:
        return "n/a" if x is None or pd.isna(x) else f"{x:.{digits}f}"

    out = []
    for _, r in t5[t5["ours_n_samples"].notna()].iterrows():
        paper = ("no paper row" if pd.isna(r.paper_n_samples) else
                 f"{int(r.ours_n_samples - r.paper_n_samples):+d} vs the paper's {int(r.paper_n_samples)}")
        out.append(f"{r.dataset}: {r.source} data, {r.ours_users} users, {r.ours_n_samples} samples ({paper}; "
                   f"cohort: {r.cohort}); mean predictor {fmt(r.ours_mean_predictor_mae, 3)} on {r.ours_n_test} "
                   f"held-out days vs the paper's {fmt(r.paper_mean_predictor_mae)}.")
    return out


def write_all(datasets=None, raw_root: Path | None = None) -> pd.DataFrame:
    rows = []
    for name in datasets or dataset_names():
        raw = Path(raw_root) / name if raw_root and (Path(raw_root) / name).is_dir() else None
        summ, samples = dataset_summary(name, raw, return_samples=True)
        out = paths.processed_dir() / name
        out.mkdir(parents=True, exist_ok=True)
        samples.to_frame().to_parquet(out / "samples.parquet", index=False)
        (out / "summary.json").write_text(json.dumps(summ, indent=1, default=str))
        flat = {k: v for k, v in summ.items() if k not in ("baselines", "sample_rules", "split", "scale")}
        for k in ("label_counts", "dropped", "loader_counts"):
            flat[k] = json.dumps(flat[k])
        for b, v in summ["baselines"].items():
            flat[f"mae_{b}"] = v["mae"]
        rows.append(flat)
        print(f"{name:13s} {summ['source']:9s} users={summ['n_users']:4d} samples={summ['n_samples']:5d} "
              f"(paper {summ['paper_n_samples']}) mean-predictor MAE={summ['mean_predictor_mae']} "
              f"(paper {summ['paper_mean_predictor_mae']}) dropped={summ['dropped']}")
    df = pd.DataFrame(rows)
    df.to_csv(paths.data_summary_path(), index=False)
    return df
