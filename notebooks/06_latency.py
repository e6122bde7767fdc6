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
# # 06 · Latency (Figures 6, 8-10)
#
# Mean wall time per sample for each system, with and without CoT, per backbone. The runs are those of 01 and 02
# (same cells, so nothing is recomputed). Latencies are measured when the model call was made; a response served
# from the cache counts at its original latency (each record also keeps `wall_s`, the time of the run that wrote it).
#
# **What it teaches:** what each paradigm costs per sample, with and without CoT, from the runs of 01 and 02 (nothing
# recomputed).
#
# **Paper artefact:** Figures 6 and 8-10.
#
# **What to look at:** in Figure 6, the order of the systems by latency (PHIA and RAPTOR make several calls per
# sample); in Figures 8-10, the spread of latencies per backbone.
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
import seaborn as sns

from balms import experiments as ex, report

cfg = ex.from_notebook(globals())
NB = "06_latency"
res = ex.grid_result(cfg, NB)  # the cells balms.experiments.cells declares for this notebook
recs, summary, src, cap = res.records, res.summary, res.source, res.caption
recs = recs.assign(latency_s=recs.latency_s.round(1))  # 0.1 s: a re-run from the cache draws the same figures
lat = summary[["dataset", "system", "model", "cot", "n", "mean_latency_s", "mean_prompt_tokens", "mean_completion_tokens"]]
report.save_table(lat, "latency", artefact="Figures 6, 8-10 (table)", notebook=NB, source=src, profile=cfg.profile,
                  models=ex.models_run(recs), n=len(recs), caption=f"mean per-sample latency; {cap}")
lat.round(2)

# %% [markdown]
# ## Figure 6: latency per system, zero-shot vs CoT

# %%
models_run = ex.models_run(recs)  # one panel per backbone that produced records, named as recorded
fig = report.interval_bars(summary.assign(mode=summary.cot.map({False: "zero-shot", True: "CoT"})), x="system",
                          y="mean_latency_s", lo="latency_ci_low", hi="latency_ci_high", hue="mode", col="model",
                          row="dataset", col_order=models_run, log=True, ylabel=report.style.label("mean_latency_s"),
                          missing_label="no record",
                          title=f"Per-sample latency per backbone: {cap}; data: {src}; {report.style.n_per(summary)}")
report.save_figure(fig, "fig6_latency_per_system", artefact="Figure 6", notebook=NB, source=src,
                   profile=cfg.profile, models=models_run, n=len(recs))

# %% [markdown]
# ## Figures 8-10: one panel per backbone

# %%
for d in dict.fromkeys(recs.dataset):  # a figure per dataset, a panel per backbone
    sub = recs[recs.dataset == d].assign(mode=lambda x: x.cot.map({False: "zero-shot", True: "CoT"}))
    report.style.apply()
    g = sns.catplot(data=sub, x="system", y="latency_s", hue="mode", col="model", col_order=models_run,
                    col_wrap=min(len(models_run), 5), kind="box", height=3)
    g.set_titles("{col_name}")
    g.set_axis_labels("system", report.style.label("latency_s"))
    g.figure.suptitle(f"Latency distribution on {d}, one panel per backbone: {cap}; data: {src}", y=1.05)
    report.save_figure(g.figure, f"fig8_10_latency_{d}", artefact=f"Figures 8-10 ({d})", notebook=NB,
                       source=src, profile=cfg.profile, models=models_run, n=len(sub))

# %% [markdown]
# How each system spends its time: RAPTOR writes one summary per day of its memory (each sample is charged for every
# summary its tree uses, even when another sample generated it first; in a deployment they would be built once per
# user), PHIA makes several model calls and code executions per sample. The ranking measured here:

# %%
from balms.experiments import claims
for cot, g in lat.groupby("cot"):
    print(("CoT " if cot else "zero-shot ") + claims.ranking_sentence(g, "mean_latency_s", item="system", within="dataset",
                                                                      what="mean latency", unit=" s"))
