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
# # 00 · Preprocessing: from raw files to samples (Table 5)
#
# Each dataset's raw files (real where `BALMS_RAW_DIR` has them, otherwise a synthetic cohort in the same
# layout) become a daily table, then (user, target day, look-back window, label) samples. Every filter is
# counted. The mean predictor (training-set mean, no sensing) is the paper's reference baseline; we add
# per-user mean, last label, ridge and gradient boosting on window summaries.

# %% tags=["parameters"]
# profiles/<profile>.yaml decides every value left None (balms.experiments.config holds the defaults)
profile = "demo"
datasets = None
seed = None

# %%
import pandas as pd
import matplotlib.pyplot as plt
import seaborn as sns

from balms import experiments as ex, report
from balms.data.summary import dataset_summary, table5_eval_sets

cfg = ex.from_notebook(globals())
NB = "00_preprocessing"
summaries = {d: dataset_summary(d, seed=cfg.seed) for d in cfg.datasets}

# %% [markdown]
# ## Table 5: evaluation sets, paper vs ours
# Sample counts differ from the paper's where our copy of a dataset differs (GLOBEM here is the 10-person public
# sample; DiversityOne is synthetic); the PMData row uses all 16 real participants.

# %%
# NBVAL_CHECK_OUTPUT
t5 = table5_eval_sets(summaries)  # the paper's Table 5 rows beside our counts (balms.data.summary)
src = report.source_label(t5["source"])
report.save_table(t5, "table5_eval_sets", artefact="Table 5", notebook=NB, source=src, profile=cfg.profile,
                  caption="evaluation sets and mean-predictor MAE, paper vs ours")
t5

# %% [markdown]
# ## What every filter dropped

# %%
# NBVAL_CHECK_OUTPUT
dropped = pd.DataFrame([{"dataset": d, "rule": k, "count": v} for d, s in summaries.items()
                        for k, v in s["dropped"].items()])
report.save_table(dropped, "data_dropped", artefact="Table 5 (filters)", notebook=NB, source=src, profile=cfg.profile,
                  caption="samples dropped per rule")
dropped

# %% [markdown]
# ## Label distributions

# %%
lab = pd.DataFrame([{"dataset": d, "label": int(k), "count": v} for d, s in summaries.items()
                    for k, v in s["label_counts"].items()])
g = sns.catplot(data=lab, x="label", y="count", col="dataset", kind="bar", sharex=False, sharey=False, height=3)
srcs = ", ".join(f"{d}={s['source']}" for d, s in summaries.items())
g.figure.suptitle(f"Label distributions (sources: {srcs})", y=1.05)
report.save_figure(g.figure, "label_distributions", artefact="Label distributions", notebook=NB, source=src,
                   profile=cfg.profile, n=int(lab["count"].sum()))

# %% [markdown]
# ## Missingness per channel (share of user-days with no value)

# %%
miss = pd.DataFrame([{"dataset": d, "channel": c, "missing": v} for d, s in summaries.items()
                     for c, v in s["missingness"].items()])
fig, ax = plt.subplots(figsize=(7, max(3, 0.25 * len(miss))))
sns.barplot(data=miss, y="channel", x="missing", hue="dataset", ax=ax)
ax.set_title("Missing share of user-days per channel")
report.save_figure(fig, "missingness", artefact="Missingness", notebook=NB, source=src, profile=cfg.profile)
report.save_table(miss, "missingness", artefact="Missingness", notebook=NB, source=src, profile=cfg.profile,
                  caption="share of user-days with no value, per channel")

# %% [markdown]
# ## Baselines (held-out target days; participant-level split too)

# %%
# NBVAL_CHECK_OUTPUT
base = pd.DataFrame([{"dataset": d, "source": s["source"], "baseline": b, **v}
                     for d, s in summaries.items() for b, v in s["baselines"].items()])
report.save_table(base, "baselines", artefact="Baselines", notebook=NB, source=src, profile=cfg.profile,
                  caption="mean predictor and supervised baselines, MAE")
base.round(3)

# %% [markdown]
# The mean predictor is hard to beat because labels concentrate on one or two values (PMData stress 3); a
# supervised model that sees each user's history mostly learns the user's own mean.
