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
# **What it teaches:** why the tool-using agent fails: mode collapse and the five failure types F1-F5, counted in
# every trace, under the paper's executor contract and an improved one.
#
# **Paper artefact:** Table 7 (mode collapse) and Appendix B (F1-F5).
#
# **What to look at:** in the Table 7 figure, our mode rate and MAE beside the paper's; in the failures figure, which
# failure rates differ between the faithful and the improved executor.
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
zs_max_tokens = None
cot_max_tokens = None
raptor_summary_tokens = None
raptor_memory = None
executors = None
phia_primer = None
phia_fence_stop = None
system_backbones = None
settings = None  # other command-line overrides (P) as a dict: servers, batches, budgets

# %%
import pandas as pd

from balms import experiments as ex, failures, metrics, report
from balms.experiments import claims

cfg = ex.from_notebook(globals())
NB = "05_phia_failures"
recs = ex.run(cfg, NB, keep_transcript=True)  # PHIA once per executor contract (`executor` column)
src = report.source_label(recs["source"])
models = ex.models_run(recs)  # PHIA's backbone as recorded (the profile may give PHIA its own: system_backbones)
cap = report.model_caption(models)
opts = recs["options"]
print(f"{len(recs)} PHIA episodes ({', '.join(f'{e}: {n}' for e, n in recs.executor.value_counts().items())}); "
      f"models: {cap}; data: {src}; per-step budget {sorted(set(opts.map(lambda o: o['max_tokens'])))} tokens, "
      f"at most {sorted(set(opts.map(lambda o: o['max_iters'])))} steps; prompt primer (ours, 'none' = the plain "
      f"prompt): {sorted(set(opts.map(lambda o: o.get('primer', 'none'))))}; code-fence stop (ours): "
      f"{sorted(set(opts.map(lambda o: bool(o.get('fence_stop')))))}.")

# %% [markdown]
# ## Table 7: mode collapse, paper beside ours

# %%
mc = pd.DataFrame([{"dataset": d, "model": m, "executor": e, **metrics.mode_collapse(g)}
                   for (d, m, e), g in recs.groupby(["dataset", "model", "executor"])])
summ7 = ex.summarize(recs, by=["dataset", "model", "executor"], cfg=cfg)
# both MAE conventions (docs/scoring.md): the paper's 2.11 on DiversityOne scores its 757 failures
mae = summ7[["dataset", "model", "executor", "mae", "mae_scored", "parse_failure_rate", "n_out_of_range"]]
mc = mc.merge(mae, on=["dataset", "model", "executor"])
p7 = report.paper_table("table7_phia_mode_collapse").assign(dataset=lambda d: d.dataset.str.lower())
t7 = p7.add_prefix("paper_").rename(columns={"paper_dataset": "dataset"}).merge(mc, on="dataset", how="right")
report.save_table(t7, "table7_phia_mode_collapse", artefact="Table 7", notebook=NB, source=src, profile=cfg.profile,
                  models=models, n=len(recs),
                  caption=f"PHIA mode collapse; ours: {cap}; "
                          f"{ex.number_caption(summ7, cfg, recs)}")
t7.round(3)

# %%
# Table 7 as a figure: mode rate and MAE, ours per executor as bars, the paper's (Qwen2.5-14B, seed 0) as diamonds
long7 = mc.assign(who=lambda d: "ours " + d.executor + " (" + d.model + ")").melt(
    id_vars=["dataset", "who"], value_vars=["mode_rate", "mae"], var_name="measure", value_name="value")
paper_pts7 = {(m, r.dataset): [getattr(r, m)] for r in p7.itertuples() for m in ("mode_rate", "mae")}
fig = report.interval_bars(long7.assign(lo=float("nan"), hi=float("nan")), x="dataset", y="value", lo="lo", hi="hi",
                           hue="who", col="measure", sharey=False, paper_points=paper_pts7,
                           paper_label="paper (Qwen2.5-14B)",
                           title=f"Table 7: PHIA mode rate and MAE, paper vs ours ({cap}); data: {src}")
report.save_figure(fig, "table7_phia_mode_collapse", artefact="Table 7 (figure)", notebook=NB, source=src,
                   profile=cfg.profile, models=models, n=len(recs))
for _, r in t7.iterrows():
    print(f"{r.dataset} {r.model} {r.executor}: modal label {r.modal_label} in {claims.pct(r.mode_rate)} of {r.n_windows} "
          f"windows (paper: {r.paper_modal_label} in {claims.pct(r.paper_mode_rate)} of "
          f"{claims.fmt(r.paper_n_windows, 0)}); MAE {claims.fmt(r.mae)} with failures excluded, "
          f"{claims.fmt(r.mae_scored)} with failures scored as 0 (paper {claims.fmt(r.paper_mae)}).")

# %% [markdown]
# The paper counts 1,463 PMData and 761 DiversityOne windows in Table 7 but 1,448 and 1,355 in Table 5; we
# report our own n beside theirs.
#
# ## F1-F5 over every trace, faithful vs improved

# %%
tax = failures.taxonomy_table(recs, by=["dataset", "model", "executor"])
report.save_table(tax, "phia_failure_taxonomy", artefact="Appendix B (F1-F5)", notebook=NB, source=src,
                  profile=cfg.profile, models=models, n=len(recs),
                  caption=f"PHIA failures per window, faithful vs improved executor; {cap}")
tax.round(3)

# %% [markdown]
# Does the agent analyse the data at all? The share of episodes in which the sandbox ran at least one block the
# model wrote, per executor (a PHIA that answers in prose never reaches the executor, and then F1, F2, F4 and F5
# cannot occur):

# %%
tt = failures.trace_table(recs)
code_rate = (tt.assign(has_code=tt.n_code_blocks > 0).groupby(["dataset", "model", "executor"])["has_code"].mean()
             .unstack("executor"))
for (d, m), r in code_rate.iterrows():
    print(f"{d} {m}: at least one executed block in " + ", ".join(f"{claims.pct(v)} of {e} episodes"
                                                                   for e, v in r.items()) + ".")
code_rate.round(3)

# %% [markdown]
# ## Failures per window beside the paper's Appendix B
# Bars: events per window with 95% participant-bootstrap intervals; black diamonds: the paper's rates on its
# traced windows (Qwen2.5-14B), where the paper gives one.

# %%
rates = failures.failure_rates(recs, by=["dataset", "model", "executor"], seed=cfg.seed)
paper_b = failures.paper_rates()
paper_pts = {(r.dataset, r.failure): [r.per_window] for r in paper_b.itertuples()}
fig = report.interval_bars(rates.assign(who=rates.executor + " (" + rates.model + ")"), x="failure", y="per_window",
                           lo="ci_low", hi="ci_high", hue="who", col="dataset", ylabel="events per window",
                           paper_points=paper_pts, paper_label="paper (Qwen2.5-14B, traced windows)",
                           title=f"PHIA failures per window, {cap}; data: {src}; "
                                 f"n={int(rates.n_windows.max())} windows per executor and dataset")
report.save_figure(fig, "phia_failures", artefact="Appendix B (figure)", notebook=NB, source=src,
                   profile=cfg.profile, models=models, n=len(recs))

# %% [markdown]
# The paper's rates and ours, per executor, from the two tables above (F3 counts at most one event per window):

# %%
ours = rates.set_index(["dataset", "failure", "executor"])
for r in paper_b.itertuples():
    if r.dataset not in set(rates.dataset):
        continue
    got = ours.loc[(r.dataset, r.failure)]
    print(f"{r.failure} on {r.dataset}: paper {claims.fmt(r.per_window, 1)} per window ({r.printed}); ours "
          + ", ".join(f"{e} {claims.fmt(g.per_window)} [{claims.fmt(g.ci_low)}, {claims.fmt(g.ci_high)}]"
                      for e, g in got.iterrows()) + f" (n={int(got.n_windows.max())}).")
for (d, m), g in tax.groupby(["dataset", "model"]):
    by_ex = g.set_index("executor")
    print(f"{d} {m}: " + "; ".join(f"{f} " + ", ".join(f"{e} {int(v)}" for e, v in by_ex[f"{f}_events"].items())
                                   for f in failures.FAILURES) + " events in all.")

# %% [markdown]
# ## Mechanism checks
# Does the sandbox see the model's code under both contracts, and does the faithful contract show the failures it
# exists to reproduce (F1 silent execution or F2 lost state)? Recorded in the profile's `demo_checks` table.

# %%
from balms.experiments.checks import record_check

for e in cfg.executors:
    sub = tt[tt.executor == e]
    v = float((sub.n_code_blocks > 0).mean()) if len(sub) else float("nan")
    record_check(cfg, f"phia_code_rate_{e}", round(v, 3), ">= 0.8", v >= 0.8, notebook=NB, source=src)
faith = tt[tt.executor == "faithful"]
f12 = int(faith[["F1", "F2"]].sum().sum()) if len(faith) else float("nan")
table = record_check(cfg, "phia_faithful_f1_or_f2", f12, ">= 1 event", bool(len(faith)) and f12 >= 1, notebook=NB,
                     source=src)
table[table.notebook == NB]
