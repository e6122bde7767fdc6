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
# # 04 · Ablations: which channels matter (Table 4)
#
# GLOBEM with all channels (phone + Fitbit) vs Fitbit (wearable) channels only, selected by each channel's
# `device` in the catalogue. The same idea on PMData: all channels, without the same-day self-reported mood, and
# sleep + heart-rate channels only. Then the effect of the prompt style: the paper's Appendix D template and
# PMData recipe (`paper`) vs our corrected prompt and sleep recipe (`corrected`) on the same samples.
#
# **What it teaches:** ablation by channel sets (GLOBEM phone + Fitbit vs Fitbit only; PMData without mood, sleep +
# heart rate only) and by prompt style (the paper's template and sleep recipe vs ours), each as a paired difference.
#
# **Paper artefact:** Table 4 and its figures.
#
# **What to look at:** in the GLOBEM figure, our Full vs Fitbit-only bars beside each paper backbone's panel; in the
# ablation figure, whether a paired interval excludes 0 and how many answers parsed under each bar.
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
ablation_systems = None
settings = None  # other command-line overrides (P) as a dict: servers, batches, budgets

# %%
import pandas as pd

from balms import experiments as ex, metrics, report
from balms.experiments import claims

cfg = ex.from_notebook(globals())
NB = "04_ablations"
print("GLOBEM wearable channels:", ex.channel_sets(cfg)["globem_wearable"])
recs = ex.run(cfg, NB, "globem_channels")  # full vs Fitbit-only, zero-shot and CoT (`channel_set`)
summary = ex.summarize(recs, by=["dataset", "system", "model", "cot", "channel_set"], cfg=cfg)
src = report.source_label(summary["source"].str.split(";").explode())
cap = report.model_caption(ex.models_run(recs))

# %% [markdown]
# ## Table 4, paper beside ours

# %%
ours = summary.assign(col=lambda d: d.channel_set + d.cot.map({False: "_mae", True: "_cot_mae"}))
ours = ours.set_index(["model", "system", "col"])["mae"].unstack("col").reset_index()
ours["system"] = ours["system"].map(ex.PAPER_SYSTEM_NAMES)
paper4 = report.paper_table("table4_globem_sensor_sets")
t4 = pd.concat([paper4.assign(who="paper"), ours.rename(columns={"model": "backbone"}).assign(who="ours")],
               ignore_index=True)
report.save_table(t4, "table4_globem_sensor_sets", artefact="Table 4", notebook=NB, source=src, profile=cfg.profile,
                  models=ex.models_run(recs), n=len(recs), caption=f"GLOBEM full vs Fitbit-only MAE; ours: {cap}; {ex.number_caption(summary, cfg, recs)}")
t4.round(3)

# %%
# Table 4 as a figure: ours as bars with intervals, Full vs Fitbit-only, zero-shot and CoT; the paper's four
# backbones as black diamonds beside the bar of the same channel set
SETS4 = {"full": "Full", "fitbit": "Fitbit-only"}
several = summary.model.nunique() > 1
bars4 = summary.assign(system=summary.system.map(ex.PAPER_SYSTEM_NAMES),
                       mode=summary.cot.map({False: "zero-shot", True: "CoT"}),
                       setting=summary.channel_set.map(SETS4) + ((" (" + summary.model + ")") if several else ""))
channel_of = dict(zip(bars4.setting, bars4.channel_set))
paper_pts4 = {(mode, sy, h): paper4.loc[paper4.system == sy, f"{cs}{sfx}_mae"].dropna().tolist()
              for mode, sfx in (("zero-shot", ""), ("CoT", "_cot")) for sy in set(bars4.system)
              for h, cs in channel_of.items()}
fig = report.interval_bars(bars4, x="system", y="mae", lo="mae_ci_low", hi="mae_ci_high", hue="setting", col="mode",
                           col_order=["zero-shot", "CoT"], paper_points=paper_pts4,
                           title=f"Table 4: GLOBEM Full vs Fitbit-only MAE, ours ({cap}) beside the paper's backbones; "
                                 f"data: {src}; {report.style.n_per(bars4)}")
report.save_figure(fig, "table4_globem_vs_paper", artefact="Table 4 (figure, vs paper)", notebook=NB, source=src,
                   profile=cfg.profile, models=ex.models_run(recs), n=len(recs))

# %%
# Fitbit-only minus full, paired on the same samples (ours), and the paper's sign per backbone
for (m, sy, cot), g in recs.groupby(["model", "system", "cot"]):
    pd_ = metrics.paired_difference(g[g.channel_set == "fitbit"], g[g.channel_set == "full"])
    print(f"{m} {sy} {'CoT' if cot else 'zero-shot'}: " + claims.compare_sentence(
        "Fitbit-only", "full", pd_["diff"], pd_["ci_low"], pd_["ci_high"], n=pd_["n_pairs"]))
pdiff = (paper4.fitbit_mae - paper4.full_mae)
print(f"Paper (zero-shot): Fitbit-only MAE lower in {(pdiff < 0).sum()}, equal in {(pdiff == 0).sum()}, higher in "
      f"{(pdiff > 0).sum()} of {len(pdiff)} backbone x system cells (no intervals reported).")

# %% [markdown]
# The paper itself is inconsistent here: DeepSeek PHIA GLOBEM "Full" is 1.68 / 1.29 (CoT) in Table 3 but
# 1.14 / 1.07 in Table 4. We print both rather than choose.

# %%
p3 = report.paper_table("table3_zero_shot_mae")
ds = p3[(p3.backbone == "DeepSeek-R1-Distill-Qwen-14B") & (p3.system == "PHIA")][["globem_mae", "globem_cot_mae"]]
ds4 = paper4[(paper4.backbone == "DeepSeek-R1-Distill-Qwen-14B") & (paper4.system == "PHIA")][["full_mae", "full_cot_mae"]]
pd.DataFrame({"Table 3": ds.iloc[0].values, "Table 4": ds4.iloc[0].values}, index=["zero-shot", "CoT"])

# %% [markdown]
# ## PMData channel sets

# %%
print("PMData sleep + resting HR channels:", ex.channel_sets(cfg)["pmdata_sleep_hr"])
pm_recs = ex.run(cfg, NB, "pmdata_channels")  # three channel sets (`channel_set`)
pm_sum = ex.summarize(pm_recs, by=["dataset", "system", "model", "channel_set"], cfg=cfg)
report.save_table(pm_sum, "ablation_pmdata_channels", artefact="Table 4 (PMData analogue)", notebook=NB,
                  source=report.source_label(pm_sum["source"]), profile=cfg.profile, models=ex.models_run(pm_recs),
                  n=len(pm_recs),
                  caption=f"PMData Health-LLM MAE by channel set; {cap}; {ex.number_caption(pm_sum, cfg, pm_recs)}")
abl = pd.concat([summary.assign(x=summary.channel_set + summary.cot.map({False: "", True: "+CoT"})),
                 pm_sum.assign(x=pm_sum.channel_set)], ignore_index=True)
abl["x"] = abl.x + "\n" + abl.n_parsed.astype(int).astype(str) + " of " + abl.n.astype(int).astype(str) + " parsed"
fig = report.facet(abl, kind="bar", x="x", y="mae", hue="system", col="dataset", sharex=False, aspect=1.4,
                   title=f"Channel-set ablations, {cap}; data: {src}; n = "
                         f"{'/'.join(str(int(v)) for v in sorted(set(abl.n)))} samples per cell "
                         "(MAE over the parsed answers; parsed count under each bar)")
for ax in fig.axes:
    ax.tick_params(axis="x", rotation=30, labelsize=7)
report.save_figure(fig, "table4_ablation", artefact="Table 4 (figure)", notebook=NB, source=src,
                   profile=cfg.profile, models=ex.models_run(recs), n=len(recs) + len(pm_recs))
pm_sum.round(3)

# %%
# Each PMData channel set against all channels + same-day mood, paired on the same samples
ref = pm_recs[pm_recs.channel_set == "all + same-day mood"]
for cs in [c for c in pm_recs.channel_set.unique() if c != "all + same-day mood"]:
    for m, g in pm_recs[pm_recs.channel_set == cs].groupby("model"):
        d_ = metrics.paired_difference(g, ref[ref.model == m])
        print(f"{m}: " + claims.compare_sentence(cs, "all + same-day mood", d_["diff"], d_["ci_low"], d_["ci_high"],
                                                  n=d_["n_pairs"]))

# %% [markdown]
# ## Prompt style: the paper's template and recipe vs the corrected ones
# `paper` is the Appendix D template with the paper's PMData channels (sleep = summed time in bed of every log
# starting that day, the "0 to 5" range); `corrected` is our prompt (true scale, dates) with sleep = minutes asleep
# of the night. Same samples, same model; the difference is paired per sample, CI by participant bootstrap.

# %%
st_recs = ex.run(cfg, NB, "prompt_style")  # the paper's template vs the corrected one (`style`)
st_sum = ex.summarize(st_recs, by=["dataset", "system", "model", "style"], cfg=cfg)
rows = []
for m, g in st_recs.groupby("model"):
    d_ = metrics.paired_difference(g[g["style"] == "corrected"], g[g["style"] == "paper"])
    rows.append({"dataset": "pmdata", "system": "healthllm", "model": m, **d_})
    print(f"{m}: " + claims.compare_sentence("corrected style", "paper style", d_["diff"], d_["ci_low"], d_["ci_high"],
                                              n=d_["n_pairs"]))
st_diff = pd.DataFrame(rows)
report.save_table(st_diff, "ablation_prompt_style", artefact="Prompt style (paper vs corrected)", notebook=NB,
                  source=report.source_label(st_recs["source"]), profile=cfg.profile, models=cfg.backbones,
                  n=len(st_recs), caption=f"PMData Health-LLM MAE, corrected minus paper style, paired; {cap}; "
                                         f"{ex.number_caption(st_sum, cfg, st_recs)}")
st_sum[["dataset", "system", "model", "style", "n", "mae", "mae_ci_low", "mae_ci_high", "mae_scored",
        "parse_failure_rate"]].round(3)
