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
# # 02 · Chain-of-thought (Table 3, "+CoT" columns)
#
# The same cells with the model asked to reason step by step before "Answer: N". The reasoning is also the
# rationale graded in 07. The paper reports a largest CoT reduction of 41.4% and that CoT helped the
# reasoning-tuned backbones most (Section 4.2).
#
# **What it teaches:** chain-of-thought prompting: the same cells with reasoning before the answer, and how to read a
# relative change.
#
# **Paper artefact:** Table 3's "+CoT" columns and the CoT relative-change figure.
#
# **What to look at:** in the figure, the sign of each cell's relative MAE change (below 0: CoT helped); beside it,
# how often a reasoning reply had to be asked for its answer (`forced_rate`).
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
from balms.experiments import claims
from balms.experiments.checks import record_check

cfg = ex.from_notebook(globals())
NB = "02_cot"
res = ex.grid_result(cfg, NB)  # the cells balms.experiments.cells declares for this notebook
recs, summary, src, models_caption = res.records, res.summary, res.source, res.caption
mean_pred = ex.mean_predictor_rows(cfg)

# %% [markdown]
# ## Table 3 "+CoT", paper beside ours

# %%
t3c = ex.table3_paper_vs_ours(summary, mean_pred, cot=True, scoring=cfg.scoring)
report.save_table(t3c, "table3_cot", artefact="Table 3 (+CoT)", notebook=NB, source=src, profile=cfg.profile,
                  models=ex.models_run(recs), n=len(recs), caption=f"CoT MAE; ours: {models_caption}; "
                          f"{ex.number_caption(summary[summary['cot']], cfg)}")
cot_recs, cot_cells = recs[recs.cot], summary[summary.cot]
n_cot_parsed = int(cot_recs["prediction"].notna().sum())
cot_parse = n_cot_parsed / len(cot_recs) if len(cot_recs) else float("nan")
print(f"CoT answers parsed: {n_cot_parsed} of {len(cot_recs)} ({claims.pct(cot_parse)}); fewest "
      f"parsed in a CoT cell: {int(cot_cells['n_parsed'].min()) if len(cot_cells) else 0}.")
record_check(cfg, "cot_parse_rate", round(cot_parse, 3), ">= 0.7", cot_parse >= 0.7, notebook=NB, source=src)
record_check(cfg, "min_parsed_per_cell_cot", int(cot_cells["n_parsed"].min()) if len(cot_cells) else 0, ">= 5",
             bool(len(cot_cells)) and cot_cells["n_parsed"].min() >= 5, notebook=NB, source=src)
t3c.round(3)

# %% [markdown]
# ## Relative change per cell: (MAE_CoT - MAE_zero-shot) / MAE_zero-shot

# %%
keys = ["dataset", "system", "model"]
wide = summary.set_index(keys + ["cot"])[["mae", "parse_failure_rate"]].unstack("cot").reset_index()
wide.columns = [" ".join(str(x) for x in c if x != "").replace("False", "zs").replace("True", "cot") for c in wide.columns]
wide["relative_change"] = (wide["mae cot"] - wide["mae zs"]) / wide["mae zs"]
paper = report.paper_table("table3_zero_shot_mae")
prel = []
for ds in ["diversityone", "pmdata", "globem"]:
    p = paper.dropna(subset=[f"{ds}_cot_mae"])
    prel.append(((p[f"{ds}_cot_mae"] - p[f"{ds}_mae"]) / p[f"{ds}_mae"]).min())
wide["paper_largest_reduction"] = -min(prel)
report.save_table(wide, "cot_relative_change", artefact="Table 3 (CoT change)", notebook=NB, source=src,
                  profile=cfg.profile, models=ex.models_run(recs), n=len(recs),
                  caption="relative MAE change from CoT per cell; paper's largest reduction beside")
print(f"paper's largest CoT reduction recomputed from Table 3: {-min(prel):.1%} (text says 41.4%)")
wide.round(3)

# %%
paper_rel = {(d, s): ((lambda p: (p[f"{d}_cot_mae"] - p[f"{d}_mae"]) / p[f"{d}_mae"])(
                 paper[paper.system == ex.PAPER_SYSTEM_NAMES[s]])).tolist()
             for d in cfg.datasets for s in cfg.cot_systems or cfg.systems}
fig = report.interval_bars(wide.assign(lo=float("nan"), hi=float("nan")), x="system", y="relative_change", lo="lo",
                          hi="hi", hue="model", col="dataset", paper_points=paper_rel, ylabel="relative MAE change",
                          title=f"CoT relative MAE change, {models_caption} (data: {src}); no interval: one ratio "
                                "per cell")
report.save_figure(fig, "cot_relative_change", artefact="Table 3 (CoT change figure)", notebook=NB, source=src,
                   profile=cfg.profile, models=ex.models_run(recs), n=len(recs))

# %% [markdown]
# Negative values are improvements. What to look for: whether a change in MAE comes with a change in parse failures
# (a model that runs out of tokens mid-reasoning fails to parse). CoT minus zero-shot per cell, paired on the same
# samples:

# %%
from balms import metrics
from balms.experiments import claims
for (d, sy, m), g in recs.groupby(["dataset", "system", "model"]):
    pdf = metrics.paired_difference(g[g.cot], g[~g.cot])
    print(f"{d} {sy} {m}: " + claims.compare_sentence("CoT", "zero-shot", pdf["diff"], pdf["ci_low"], pdf["ci_high"],
                                                       n=pdf["n_pairs"])
          + f" Parse failures: zero-shot {claims.fmt(metrics.parse_failure_rate(g[~g.cot]))}, "
            f"CoT {claims.fmt(metrics.parse_failure_rate(g[g.cot]))}.")
