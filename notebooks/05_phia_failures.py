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
# # 05 · PHIA failure analysis (Table 7, Appendix B)
#
# The tool-using agent writes Python over the user's record. The paper reports that it collapses to one answer
# (Table 7) and traced five failures (Appendix B): F1 silent execution (a block prints nothing), F2 lost state (NameError across blocks), F3 forced
# finish (iteration budget exhausted, rationale citing numbers never computed), F4 magic-number thresholds, F5
# schema-blind aggregation of sub-day rows. We run the **faithful** executor (fresh scope per block, only printed
# output observed) and our **improved** one (persistent state, last expression shown, schema card, short
# tracebacks) on the same windows, and count every failure in every trace.
#
# What to look for: our mode rate and modal label beside the paper's, and which failure rates differ between the
# two executors.

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
zs_max_tokens = None
cot_max_tokens = None
raptor_summary_tokens = None
raptor_memory = None
executors = None

# %%
import pandas as pd

from balms import experiments as ex, failures, metrics, report
from balms.experiments import claims

cfg = ex.from_notebook(globals())
NB = "05_phia_failures"
recs = pd.concat([ex.run_grid(cfg, systems=["phia"], options={"executor": e}, keep_transcript=True).assign(executor=e)
                  for e in cfg.executors], ignore_index=True)
src = report.source_label(recs["source"])
cap = report.model_caption(cfg.backbones)

# %% [markdown]
# ## Table 7: mode collapse, paper beside ours

# %%
mc = pd.DataFrame([{"dataset": d, "model": m, "executor": e, **metrics.mode_collapse(g)}
                   for (d, m, e), g in recs.groupby(["dataset", "model", "executor"])])
mae = ex.summarize(recs, by=["dataset", "model", "executor"], cfg=cfg)[["dataset", "model", "executor", "mae", "parse_failure_rate"]]
mc = mc.merge(mae, on=["dataset", "model", "executor"])
p7 = report.paper_table("table7_phia_mode_collapse").assign(dataset=lambda d: d.dataset.str.lower())
t7 = p7.add_prefix("paper_").rename(columns={"paper_dataset": "dataset"}).merge(mc, on="dataset", how="right")
report.save_table(t7, "table7_phia_mode_collapse", artefact="Table 7", notebook=NB, source=src, profile=cfg.profile,
                  models=cfg.backbones, n=len(recs), caption=f"PHIA mode collapse; ours: {cap}")
t7.round(3)

# %%
# Table 7 as a figure: mode rate and MAE, the paper's (Qwen2.5-14B, seed 0) beside ours per executor
p7l = p7.assign(who="paper (Qwen2.5-14B)")[["dataset", "who", "mode_rate", "mae"]]
o7l = mc.assign(who=lambda d: "ours " + d.executor + " (" + d.model + ")")[["dataset", "who", "mode_rate", "mae"]]
long7 = pd.concat([p7l[p7l.dataset.isin(mc.dataset)], o7l], ignore_index=True).melt(
    id_vars=["dataset", "who"], value_vars=["mode_rate", "mae"], var_name="measure", value_name="value")
fig = report.facet(long7, kind="bar", x="dataset", y="value", hue="who", col="measure", sharey=False,
                   title=f"Table 7: PHIA mode rate and MAE, paper vs ours ({cap}); data: {src}")
report.save_figure(fig, "table7_phia_mode_collapse", artefact="Table 7 (figure)", notebook=NB, source=src,
                   profile=cfg.profile, models=cfg.backbones, n=len(recs))
for _, r in t7.iterrows():
    print(f"{r.dataset} {r.model} {r.executor}: modal label {r.modal_label} in {claims.pct(r.mode_rate)} of {r.n_windows} "
          f"windows (paper: {r.paper_modal_label} in {claims.pct(r.paper_mode_rate)} of "
          f"{claims.fmt(r.paper_n_windows, 0)}); MAE {claims.fmt(r.mae)} (paper {claims.fmt(r.paper_mae)}).")

# %% [markdown]
# The paper counts 1,463 PMData and 761 DiversityOne windows in Table 7 but 1,448 and 1,355 in Table 5; we
# report our own n beside theirs.
#
# ## F1-F5 over every trace, faithful vs improved

# %%
tax = failures.taxonomy_table(recs, by=["dataset", "model", "executor"])
report.save_table(tax, "phia_failure_taxonomy", artefact="Appendix B (F1-F5)", notebook=NB, source=src,
                  profile=cfg.profile, models=cfg.backbones, n=len(recs),
                  caption=f"PHIA failures per window, faithful vs improved executor; {cap}")
tax.round(3)

# %%
rate_cols = [c for c in tax.columns if c.endswith("_per_window")]
long = tax.melt(id_vars=["dataset", "executor"], value_vars=rate_cols, var_name="failure", value_name="per window")
fig = report.facet(long, kind="bar", x="failure", y="per window", hue="executor", col="dataset",
                   title=f"PHIA failures per window, {cap}; data: {src}")
report.save_figure(fig, "phia_failures", artefact="Appendix B (figure)", notebook=NB, source=src,
                   profile=cfg.profile, models=cfg.backbones, n=len(recs))

# %% [markdown]
# Paper (Appendix B.2): 2.0 empty observations per traced GLOBEM window, 0.7 on PMData, 8 of 10 PMData windows
# force-finished. Ours, per executor, from the table above:

# %%
for (d, m), g in tax.groupby(["dataset", "model"]):
    rates = g.set_index("executor")[rate_cols]
    print(f"{d} {m}: " + "; ".join(f"{c.replace('_per_window', '')} " + ", ".join(
        f"{e} {claims.fmt(v)}" for e, v in rates[c].items()) for c in rate_cols) + " (per window).")
