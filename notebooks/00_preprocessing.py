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
# Each dataset's raw files (real where `balms.paths.raw_dir()` finds them: `BALMS_RAW_DIR`, else `../shared/data`
# beside the project, else `data/raw`; otherwise a synthetic cohort in the same layout, said on stderr) become a daily table, then (user, target day, look-back window, label) samples. Every filter is
# counted. The mean predictor (training-set mean, no sensing) is the paper's reference baseline; we add
# per-user mean, last label, ridge and gradient boosting on window summaries.
#
# **What it teaches:** how raw wearable, phone and survey files become (user, target day, look-back window, label)
# samples; the evaluation rule; what every filter drops and why; how hard the mean predictor is to beat.
#
# **Paper artefact:** Table 5 (evaluation sets), with the label-distribution and missingness figures; the mean
# predictor and the supervised baselines every later notebook compares against.
#
# **What to look at:** in the Table 5 figure, how many samples each dataset keeps beside the paper's count and the
# mean predictor's MAE beside the paper's; in the table of candidate sample rules, how far each count is from the
# paper's and whether the mean predictor's MAE depends on the rule.
#
# **Time on the demo profile:** cold (an empty response cache) and warm (every model call answered from it) on 2
# CPU cores, measured in the book's timing table (`docs/_generated/timing.md`, from `bench/paper_timing.json`).

# %% tags=["parameters"]
# profiles/<profile>.yaml decides every value left None (balms.experiments.config holds the defaults)
profile = "demo"
datasets = None
seed = None
evaluation_rule = None
settings = None  # other command-line overrides (P) as a dict: servers, batches, budgets

# %%
import pandas as pd
import matplotlib.pyplot as plt
import seaborn as sns

from balms import experiments as ex, report
from balms import figures_style as style
from balms.data.evaluation import EVALUATION_RULE_TEXT
from balms.data.loading import load_dataset
from balms.data.registry import dataset_names
from balms.data.samples import DEFAULT_RULE, SAMPLE_RULE_TEXT
from balms.data.summary import (all_rule_summaries, dataset_summary, evaluation_rule_table, evaluation_statement,
                                sample_rule_table, table5_eval_sets, table5_sentences)
from balms.experiments import claims

cfg = ex.from_notebook(globals())
NB = "00_preprocessing"
by_rule = all_rule_summaries(cfg.datasets, seed=cfg.seed)  # every named sample rule, each dataset loaded once
summaries = by_rule[DEFAULT_RULE]
# Table 5 and the evaluation rules are data only (no model call): every dataset, whatever the profile's `datasets`
all_tables = {d: load_dataset(d) for d in dataset_names()}

# %% [markdown]
# ## The evaluation rule
# One statement, used by every notebook (`balms.data.summary.evaluation_statement`, the same text as on the book's data page, `docs/data.md`).

# %%
print(evaluation_statement(DEFAULT_RULE, cfg.evaluation_rule))

# %% [markdown]
# ## Candidate sample rules, side by side
# (a) `paper_stated`: only the filters Table 5's caption names; (b) `healthllm_same_day`: the window ends on the
# target day; (c) `balms`: the window ends the day before the target (as in the paper's prompt example); and
# `count_matched`, the earlier default, shown because its threshold was chosen to land on the paper's PMData count.
# Each row: samples kept, held-out days, the mean predictor's MAE on them, and every filter's count.

# %%
# NBVAL_CHECK_OUTPUT
rules = sample_rule_table(by_rule)
src = report.source_label(rules["source"])
report.save_table(rules.drop(columns=["rule_text"]), "sample_rules", artefact="Table 5 (sample rules)", notebook=NB,
                  source=src, profile=cfg.profile, caption="samples and mean-predictor MAE under each sample rule")
rules.drop(columns=["rule_text"])

# %%
for d in cfg.datasets:
    r = rules[rules.dataset == d].set_index("rule")
    counts = ", ".join(f"{k} {int(v.n_samples)} (mean predictor {claims.fmt(v.mean_predictor_mae, 3)})"
                       for k, v in r.iterrows())
    paper_n = r["paper_n_samples"].iloc[0]
    same_data = r.source.iloc[0] == "real" and d == "pmdata"  # only PMData is the paper's full cohort here
    closest = f"closest count: {(r['n_samples'] - paper_n).abs().idxmin()}" if same_data else \
        "not comparable (a different or partial cohort)"
    print(f"{d} ({r.source.iloc[0]}): {counts}; paper {paper_n} samples, {closest}.")
print(f"The benchmark uses {DEFAULT_RULE!r}: {SAMPLE_RULE_TEXT[DEFAULT_RULE]}. It is chosen from the paper's "
      "method (its prompt example ends the window the day before the target; a fixed look-back needs the window "
      "inside the user's record; an empty window gives an agent nothing to read), not from the counts above.")

# %% [markdown]
# ## Evaluation rules: which samples are scored, and the mean predictor
# The paper scores "all held-out target days" (Section 3.2) against a mean predictor that outputs "the average
# training set label" (Section 4.1), and Table 7 counts PHIA's predictions over 1,640 GLOBEM windows, all of
# Table 5's GLOBEM set, and 1,463 PMData windows (Table 5: 1,448). Each candidate reading is one row per sample
# rule: how many samples it scores and the mean predictor's MAE on them, beside the paper's counts and its
# mean predictor (Table 3: PMData 0.48, GLOBEM 0.80, DiversityOne 0.58). What to look for: which readings score
# every sample (as Table 7 says) and still have a training mean, and which mean-predictor MAE lands near the
# paper's on the real data.

# %%
# NBVAL_CHECK_OUTPUT
ev_rules = evaluation_rule_table(all_tables, seed=cfg.seed)
report.save_table(ev_rules, "evaluation_rules", artefact="Table 5 (evaluation rules)", notebook=NB,
                  source=report.source_label(ev_rules["source"]), profile=cfg.profile,
                  caption="scored samples and mean-predictor MAE under each (sample rule, evaluation rule)")
ev_rules[ev_rules.sample_rule == DEFAULT_RULE]

# %%
for d, g in ev_rules.groupby("dataset", sort=False):
    g = g.set_index(["sample_rule", "evaluation_rule"])
    r0 = g.iloc[0]
    every = sorted({e for (_, e), r in g.iterrows() if r.n_scored == r.n_samples})
    near = ", ".join(f"{s}/{e} {r.mean_predictor_mae:.3f}" for (s, e), r in g.iterrows()
                     if round(r.mean_predictor_mae, 2) == r0.paper_mean_predictor_mae)
    print(f"{d} ({r0.source}, {r0.users} users): samples per sample rule "
          f"{ {k: int(v) for k, v in g.xs('heldout30', level=1)['n_samples'].items()} }; paper Table 5 "
          f"{r0.paper_table5_n}, Table 7 "
          f"{r0.paper_table7_n}. Rules that score every sample: {every}. Mean predictor equal to the paper's "
          f"{r0.paper_mean_predictor_mae} at two decimals: {near or 'none'}.")
    own = g.xs(DEFAULT_RULE, level=0)["mean_predictor_mae"]
    print(f"  under {DEFAULT_RULE!r}: global leave-one-out {own['all_days_loo']:.3f}, per-user leave-one-out "
          f"{own['all_days_user_loo']:.3f}, per-user earlier days {own['all_days_user_earlier']:.3f}, ours (heldout30) "
          f"{own['heldout30']:.3f}; paper {r0.paper_mean_predictor_mae}.")
print(f"This profile's evaluation rule: {cfg.evaluation_rule!r}: {EVALUATION_RULE_TEXT[cfg.evaluation_rule]}.")

# %% [markdown]
# ## Table 5: evaluation sets, paper vs ours
# Every dataset (data only, whatever the profile runs), under the benchmark's sample rule.

# %%
# NBVAL_CHECK_OUTPUT
t5_summaries = {d: summaries.get(d) or dataset_summary(d, seed=cfg.seed, tables=all_tables[d]) for d in dataset_names()}
t5 = table5_eval_sets(t5_summaries)  # the paper's Table 5 rows beside our counts (balms.data.summary)
report.save_table(t5, "table5_eval_sets", artefact="Table 5", notebook=NB, source=report.source_label(t5["source"]),
                  profile=cfg.profile,
                  caption="evaluation sets and mean-predictor MAE, paper vs ours")
t5

# %%
print("\n".join(table5_sentences(t5)))

# %%
style.apply()  # the project's figure style (balms.figures_style), the paper's values as its black diamonds
fig, axes = plt.subplots(1, 2, figsize=(style.PAGE_WIDTH, 2.8))
for ax, col, name, title in ((axes[0], "n_samples", "n", "samples (Table 5)"),
                             (axes[1], "mean_predictor_mae", "MAE", "mean predictor MAE")):
    sns.barplot(data=t5, x="dataset", y=f"ours_{col}", ax=ax, color="C0", label="ours")
    ax.plot(range(len(t5)), t5[f"paper_{col}"], **style.PAPER_MARK, label="paper")
    ax.set(xlabel="", ylabel=style.label(name), title=title)
    ax.legend()
src5 = report.source_label(t5["source"])  # every dataset (Table 5), not only the profile's
fig.suptitle(f"Table 5, paper vs ours (rule {DEFAULT_RULE!r}); data: {src5}")
fig.tight_layout()
report.save_figure(fig, "table5_eval_sets", artefact="Table 5 (figure)", notebook=NB, source=src5, profile=cfg.profile)

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

# %%
for d, sm in summaries.items():
    print(claims.concentration_sentence(sm["label_counts"], dataset=d))
    print(claims.baseline_sentence(base, dataset=d))

# %% [markdown]
# ## RAPTOR's PMData leaves per user and channel
#
# RAPTOR's leaves are PMData's half-hour slots (Section 2.3.3) of every sub-day series the release has: minute
# steps (`steps.json`), sleep stages (`sleep.json`), and minute heart rate and calories (`heart_rate.json`,
# `calories.json`) where those files are present. `leaves` counts the slots with any value; each channel its
# slots with a value; the last column names the minute files this copy of the data lacks for the user (a user
# without them gets leaves from what is there).

# %%
from balms.data.pmdata import subday_leaf_table

pm_tables = all_tables["pmdata"]
leaf_tab = subday_leaf_table(pm_tables)
report.save_table(leaf_tab, "raptor_leaves_pmdata", artefact="RAPTOR leaves (PMData)", notebook=NB,
                  source=report.source_label([pm_tables.source]), profile=cfg.profile,
                  caption="half-hour leaves per user and sub-day channel, and the minute files each user lacks")
absent = {f: sorted(leaf_tab.loc[leaf_tab["minute files absent"].str.contains(f, regex=False), "user"])
          for f in ("steps.json", "heart_rate.json", "calories.json")}
for f, users in absent.items():
    print(f"{f} absent for {len(users)} of {len(leaf_tab)} users: {', '.join(users) or 'none'}")
leaf_tab
