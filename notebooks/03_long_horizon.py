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
# # 03 · Long-horizon scaling (Figures 2, 5 and 7)
#
# The target day stays fixed while the look-back grows from 7 to 28 days. The paper (Qwen2.5-14B) reports RAG's
# MAE falling about 29% on PMData and 9% on GLOBEM, Health-LLM degrading and PHIA flat on PMData (Section 4.3).
#
# **What it teaches:** what more history buys: MAE, latency and prompt tokens as the look-back grows from 7 to 28
# days with the target day fixed.
#
# **Paper artefact:** Figures 2, 5 and 7.
#
# **What to look at:** in Figure 5 (vs paper), the sign and size of each system's change beside the paper's; in
# Figures 2 and 7, how prompt tokens and latency grow per extra day for each system.
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
lookbacks = None
horizon_datasets = None
horizon_backbone = None
horizon_systems = None
settings = None  # other command-line overrides (P) as a dict: servers, batches, budgets

# %%
from balms import experiments as ex, report
from balms.experiments import claims

cfg = ex.from_notebook(globals())
NB = "03_long_horizon"
model = cfg.horizon_model
recs = ex.run(cfg, NB)
summary = ex.summarize(recs, cfg=cfg)
src, cap = report.source_label(recs["source"]), report.model_caption(ex.models_run(recs))

# %%
swept = cfg.horizon_systems or cfg.systems
print(f"Systems in this sweep: {', '.join(swept)}; left out: {', '.join(s for s in cfg.systems if s not in swept) or 'none'}"
      f" (profile {cfg.profile!r}; RAPTOR costs one LLM summary per day of memory). Backbones: {cap}.")

# %% [markdown]
# ## Figure 5: MAE vs look-back

# %%
fig = report.facet(summary, kind="line", x="lookback", y="mae", hue="system", col="dataset",
                   title=f"MAE vs look-back (target day fixed), {cap}; data: {src}; n per cell={recs.groupby(['dataset', 'system', 'lookback']).size().max()}")
report.save_figure(fig, "fig5_mae_vs_lookback", artefact="Figure 5", notebook=NB, source=src, profile=cfg.profile,
                   models=ex.models_run(recs), n=len(recs))
first, last = min(cfg.lookbacks), max(cfg.lookbacks)
chg = summary.set_index(["dataset", "system", "lookback"])["mae"].unstack("lookback")
chg["relative_change_%d_to_%d" % (first, last)] = (chg[last] - chg[first]) / chg[first]
chg = chg.reset_index()
chg["paper_claim"] = chg.apply(lambda r: {("pmdata", "rag"): "about -29%", ("globem", "rag"): "about -9%",
                                          ("pmdata", "phia"): "flat"}.get((r.dataset, r.system), ""), axis=1)
chg.columns = [str(c) for c in chg.columns]
report.save_table(chg, "fig5_lookback_change", artefact="Figure 5 (table)", notebook=NB, source=src, profile=cfg.profile,
                  models=ex.models_run(recs), n=len(recs), caption="MAE per look-back and relative change, paper claims beside; "
                          + ex.number_caption(summary, cfg))
chg.round(3)

# %%
# The paper's reported relative changes (Section 4.3; "flat" drawn as 0) beside ours, same sweep ends.
PAPER_FIG5 = {("pmdata", "rag"): -0.29, ("globem", "rag"): -0.09, ("pmdata", "phia"): 0.0}
rc = "relative_change_%d_to_%d" % (first, last)
for line in claims.relative_change_sentences(chg, change_col=rc, paper=PAPER_FIG5):
    print(line)
ours_rc = chg[["dataset", "system", rc]].rename(columns={rc: "relative change"}).assign(model=cap, lo=float("nan"),
                                                                                       hi=float("nan"))
fig = report.interval_bars(ours_rc, x="system", y="relative change", lo="lo", hi="hi", hue="model", col="dataset",
                           paper_points={k: [v] for k, v in PAPER_FIG5.items()},
                           paper_label="paper (Qwen2.5-14B, Section 4.3)",
                           title=f"Relative MAE change, shortest -> longest look-back (ours {first} -> {last} days; "
                                 f"paper: its Section 4.3 figures, PHIA 'flat' drawn as 0); ours: {cap}; data: {src}")
report.save_figure(fig, "fig5_relative_change_vs_paper", artefact="Figure 5 (vs paper)", notebook=NB, source=src,
                   profile=cfg.profile, models=ex.models_run(recs), n=len(recs))

# %% [markdown]
# ## Figure 7: latency vs look-back

# %%
fig = report.facet(summary, kind="line", x="lookback", y="mean_latency_s", hue="system", col="dataset",
                   title=f"Mean latency per sample vs look-back, {cap}; data: {src}")
report.save_figure(fig, "fig7_latency_vs_lookback", artefact="Figure 7", notebook=NB, source=src,
                   profile=cfg.profile, models=ex.models_run(recs), n=len(recs))

# %% [markdown]
# ## Figure 2: prompt tokens vs look-back

# %%
fig = report.facet(summary, kind="line", x="lookback", y="mean_prompt_tokens", hue="system", col="dataset",
                   title=f"Prompt tokens per sample vs look-back ({cap} tokenizer); data: {src}")
report.save_figure(fig, "fig2_tokens_vs_lookback", artefact="Figure 2", notebook=NB, source=src,
                   profile=cfg.profile, models=ex.models_run(recs), n=len(recs))
report.save_table(summary, "long_horizon_cells", artefact="Figures 2, 5, 7 (cells)", notebook=NB, source=src,
                  profile=cfg.profile, models=ex.models_run(recs), n=len(recs), caption="per look-back cells; " + ex.number_caption(summary, cfg))
summary[["dataset", "system", "lookback", "mae", "mae_scored", "mean_latency_s", "mean_prompt_tokens"]].round(2)

# %%
for y, label, digits in (("mean_prompt_tokens", "Prompt tokens", 0), ("mean_latency_s", "Latency (s)", 2)):
    sl = claims.slope_per_unit(summary, "lookback", y, ["dataset", "system"])
    print(claims.growth_sentence(sl, label=label, per="look-back day", by=["dataset", "system"], digits=digits))
