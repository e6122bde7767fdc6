# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#   kernelspec:
#     display_name: balms (.venv)
#     language: python
#     name: balms
# ---

# %% [markdown]
# # 01 · Zero-shot prediction (Table 3)
#
# Four agent paradigms (Health-LLM prompt, day-level RAG, two-level RAPTOR, PHIA's ReAct loop with code) predict
# the self-reported score from the look-back window; MAE against the label, with a 95% bootstrap CI resampled by
# participant. Same evaluation samples for every system and backbone.
#
# **What it teaches:** the four agent paradigms (Health-LLM, RAG, RAPTOR, PHIA) predicting the score zero-shot,
# scored by MAE with 95% intervals that resample participants, against the mean predictor on the same samples.
#
# **Paper artefact:** Table 3 (zero-shot columns) and its figure.
#
# **What to look at:** in the Table 3 figure, each system's bar and interval against the dashed mean-predictor line,
# and the paper's backbones as black marks beside our bar; in Table 3 above it, each paper backbone's column
# (`paper ...`) beside ours (`ours ...`).
#
# **Time on the demo profile:** cold (an empty response cache) and warm (every model call answered from it) on 2
# CPU cores, measured in the book's timing table (`docs/_generated/timing.md`, from `bench/paper_timing.json`).

# %% tags=["parameters"]
# profiles/<profile>.yaml decides every value left None (balms.experiments.config holds the defaults)
profile = "demo"
datasets = None
systems = None
backbones = None
n_samples = None
seed = None
cache_mode = None
concurrency = None
phia_max_iters = None
phia_step_tokens = None
phia_primer = None
phia_fence_stop = None
system_backbones = None
zs_max_tokens = None
cot_max_tokens = None
raptor_summary_tokens = None
raptor_memory = None
settings = None  # other command-line overrides (P) as a dict: servers, batches, budgets

# %%
from balms import experiments as ex, report
from balms.experiments.checks import record_check

cfg = ex.from_notebook(globals())
NB = "01_prediction"
res = ex.grid_result(cfg, NB)  # the cells balms.experiments.cells declares for this notebook
recs, summary, src, models_caption = res.records, res.summary, res.source, res.caption
mean_pred = ex.mean_predictor_rows(cfg)
print(f"{len(recs)} predictions; models: {models_caption}; data: {src}")

# %% [markdown]
# ## Table 3 (zero-shot), the paper's backbones beside ours

# %%
t3 = ex.table3_paper_vs_ours(summary, mean_pred, cot=False, scoring=cfg.scoring)
report.save_table(t3, "table3_zero_shot", artefact="Table 3", notebook=NB, source=src, profile=cfg.profile,
                  models=ex.models_run(recs), n=len(recs), caption=f"zero-shot MAE; ours: {models_caption}; "
                          f"{ex.number_caption(summary[~summary['cot'].astype(bool)], cfg)}")
t3.round(3)

# %% [markdown]
# ## Our cells with intervals, parse failures and mode collapse
#
# Beside each cell's MAE, the metrics blind to the commonest answer (`balms.metrics.collapse_metrics`):
# class-averaged MAE, quadratic weighted kappa, within-person Spearman with its participant-bootstrap interval, and
# the collapse flag (the commonest answer's share above the commonest label's by more than 20 points).

# %%
from balms import metrics

keys = [k for k in ex.CELL_KEYS if k in summary.columns]
summary = summary.merge(metrics.collapse_table(recs, keys, seed=cfg.seed), on=keys, how="left") if len(summary) \
    else summary
report.save_table(summary, "prediction_zero_shot_cells", artefact="Table 3 (cells)", notebook=NB, source=src,
                  profile=cfg.profile, models=ex.models_run(recs), n=len(recs), caption="per-cell MAE with 95% CI")
fewest = summary.loc[summary["n_parsed"].idxmin()] if len(summary) else None
print(f"Fewest parsed predictions in a cell: {int(fewest.n_parsed)} of {int(fewest.n)} ({fewest.dataset} "
      f"{fewest.system} {fewest.model})." if fewest is not None else "No cell ran.")
record_check(cfg, "min_parsed_per_cell_zero_shot", int(fewest.n_parsed) if fewest is not None else 0, ">= 5",
             fewest is not None and fewest.n_parsed >= 5, notebook=NB, source=src)
summary.round(3)

# %% [markdown]
# ## Table 3 as a figure: ours beside the paper's
#
# One bar per system with its 95% participant-bootstrap interval; the dashed line is the mean predictor on the same
# samples; the black marks are the paper's backbones (one mark each), drawn beside our bar.

# %%
paper_pts = ex.paper_points(cfg.datasets, cfg.systems)
fig = report.interval_bars(summary, x="system", y="mae", lo="mae_ci_low", hi="mae_ci_high", hue="model", col="dataset",
                          refs=dict(zip(mean_pred.dataset, mean_pred.mae_raw_mean)),
                          paper_points=paper_pts, paper_refs=ex.paper_mean_predictor(cfg.datasets),
                          title=f"Zero-shot MAE, {models_caption}; data: {src}; {report.style.n_per(summary)}")
report.save_figure(fig, "table3_zero_shot_mae", artefact="Table 3 (figure)", notebook=NB, source=src,
                   profile=cfg.profile, models=ex.models_run(recs), n=len(recs))

# %% [markdown]
# ## Supervised baselines on the same target days
# (from the preprocessing step; see 00_preprocessing)

# %%
from balms.data.summary import dataset_summary
import pandas as pd
sup = pd.DataFrame([{"dataset": d, "baseline": b, **v} for d in cfg.datasets
                    for b, v in dataset_summary(d, seed=cfg.seed)["baselines"].items()])
sup.pivot(index="baseline", columns="dataset", values="mae").round(3)

# %% [markdown]
# The paper reports that zero-shot agents rarely beat the mean predictor (Section 4.1). Ours, each cell against the
# mean predictor on the same samples (paired difference, participant-bootstrap CI), and parse failures and mode
# collapse beside:

# %%
from balms.experiments import claims
print(claims.mean_predictor_sentence(summary))
print(claims.ranking_sentence(summary, "parse_failure_rate", item="system", within="dataset", what="parse failure rate",
                              digits=2))
print(claims.ranking_sentence(summary, "mode_rate", item="system", within="dataset", what="mode rate", digits=2))
flagged = summary[summary["collapse"] == True] if "collapse" in summary else summary.iloc[:0]  # noqa: E712
print(f"Collapse flag (commonest answer's share more than 20 points above the commonest label's): {len(flagged)} of "
      f"{len(summary)} cells" + (": " + "; ".join(f"{r.dataset} {r.system} {r.model} answers {r.modal_answer} on "
                                                  f"{r.answer_share:.0%} of days (label {r.label_share:.0%})"
                                                  for r in flagged.itertuples()) if len(flagged) else "") + ".")
