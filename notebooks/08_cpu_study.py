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
# # 08 · CPU study: the paper's directional claims on the real data, with an embedded model
#
# The `cpu-study` profile runs the paper's prompt style on the real PMData and GLOBEM data with a small model
# that runs on 2 CPU cores. It is **not** one of the paper's backbones: what it can test is the direction of
# the paper's claims (does an agent beat the mean predictor, does a longer look-back help RAG and hurt
# Health-LLM, does PHIA collapse to one answer and does the improved executor change that), each as a
# difference with a 95% interval that resamples participants. A claim is called only when its interval excludes
# zero. The other notebooks of this profile (01, 02, 03, 05) draw the usual tables and figures from the same runs.
#
# **What it teaches:** testing the paper's directional claims on the real data with intervals, and what each sample
# size buys (power).
#
# **Paper artefact:** the CPU study (`results/cpu-study/`), beyond the paper.
#
# **What to look at:** in the claims figure, each claim's difference and 95% interval: a claim is called only where
# the interval excludes 0.
#
# **Time on the demo profile:** not part of the demo profile (the `cpu-study` profile runs it: hours on 2 cores for
# its runs, seconds when they are replayed from `results/cpu-study/`).

# %% tags=["parameters"]
# profiles/<profile>.yaml decides every value left None (balms.experiments.config holds the defaults)
profile = "cpu-study"
datasets = None
systems = None
backbones = None
n_samples = None
seed = None
cache_mode = None
concurrency = None
settings = None  # other command-line overrides (P) as a dict: servers, batches, budgets

# %%
import pandas as pd

from balms import experiments as ex, report
from balms.experiments import claims, study

cfg = ex.from_notebook(globals())
NB = "08_cpu_study"
zs = ex.run(cfg, "01_prediction")  # notebook 01's cells
cot = ex.run(cfg, [c for c in ex.cells_for("02_cot", cfg) if c.cot])  # notebook 02's CoT cells
horizon = ex.run(cfg, "03_long_horizon")
phia = ex.run(cfg, "05_phia_failures")
size = study.declared_part(cfg, NB, "size")  # this notebook's own cells: the single-call systems on `size_backbones`
sensor = study.declared_part(cfg, NB, "sensor_test")  # the sensor test (issue 39; empty while it is off)
every = pd.concat([x for x in (zs, cot, horizon, phia, size, sensor) if len(x)], ignore_index=True)
from balms.experiments.summaries import SCORING_TEXT  # the MAE convention each caption names

src, cap = report.source_label(every["source"]), report.model_caption(ex.models_run(every))
print(f"{len(every)} prediction records ({every.drop_duplicates(['cell_key', 'sample_id']).shape[0]} distinct); "
      f"models: {cap}; data: {src}")

# %% [markdown]
# ## What each n buys (the power calculation that sized the study)
#
# The width of the 95% interval on the Health-LLM zero-shot cell's MAE difference to the mean predictor
# (PMData), measured on nested subsets of the samples it ran and projected beyond them as width x sqrt(n_max/n).
# Half the width is roughly the smallest difference the study can call.

# %%
hl = zs[(zs.dataset == "pmdata") & (zs.system == "healthllm")]
sizes = sorted({25, 50, 100, 150, 300, *(cfg.n_for("pmdata", s, c) for s in cfg.systems for c in (False, True))} - {0})
power = study.power_table(cfg, hl, "pmdata", ns=sizes)
report.save_table(power, "cpu_study_power", artefact="CPU study (power)", notebook=NB, source=src,
                  profile=cfg.profile, models=ex.models_run(hl), n=len(hl),
                  caption=f"interval width on the MAE difference to the mean predictor per n; {cap}; "
                          f"{SCORING_TEXT[cfg.scoring]}")
power.round(3)

# %%
hw = power.set_index("n")["half_width"]
for what, n in (("zero-shot cells and the look-back sweep", cfg.n_for("pmdata", "healthllm")),
                ("CoT cells", cfg.n_for("pmdata", "healthllm", True)), ("PHIA cells", cfg.n_for("pmdata", "phia"))):
    if n in hw.index:
        kind = power.set_index("n").loc[n, "kind"]
        print(f"PMData {what}: n = {n}; half-width of the interval about {claims.fmt(hw[n])} ({kind}): "
              f"differences smaller than that are reported as 'cannot tell'.")

# %% [markdown]
# ## The paper's claims, tested, and what it points at
#
# One row per comparison: the difference, its 95% participant-bootstrap interval, n, the direction expected and
# the verdict (agrees / disagrees / cannot tell at this n). After the paper's claims come ours, labelled as ours:
# the personal-baseline system (the user's training-day label anchor and channel deviations, `balms.agents.
# personal_baseline`) against the mean predictor, Health-LLM and its own anchor alone (the per-user training mean);
# each single-call system on the larger embedded backbone (`size_backbones`) minus the study's backbone, and the
# paper's mean-predictor claim re-tested on that backbone; notebook 00's supervised baselines, fit on the training
# days, on the same held-out days with the same interval; each zero-shot cell against the best constant for MAE (the
# training median label). Then the sensor test (issue 39), per single-call system and backbone on the same days: real
# minus a sensor placebo (another user's window; the same user's distant one; "uses the sensors" only where the
# interval excludes 0), real minus mood only (no sensor line) and real minus no mood, and the paper template's
# "Answer: 1" example against a neutral placeholder (the share of '1' answers). A comparison whose cells the profile
# did not run is listed as "not run".

# %%
supervised = study.supervised_records(cfg)
table = study.claims_table(cfg, zs, cot, horizon, phia, size=size, supervised=supervised, sensor=sensor)
report.save_table(table, "cpu_study_claims", artefact="CPU study (claims)", notebook=NB, source=src,
                  profile=cfg.profile, models=ex.models_run(every), n=len(every),
                  caption=f"the paper's directional claims and ours with 95% participant-bootstrap intervals; {cap}; "
                          f"{SCORING_TEXT[cfg.scoring]}")
ran = table[table.verdict != study.NOT_RUN]
fig = report.forest(ran, label=["comparison", "model"], est="diff", lo="ci_low", hi="ci_high", color_by="verdict",
                    group="claim", group_titles=study.CLAIMS, title=f"The paper's claims and ours on our data: differences with 95% intervals; {cap}; "
                          f"data: {src}; n per row in the table ({len(table) - len(ran)} not run, listed there)")
report.save_figure(fig, "cpu_study_claims", artefact="CPU study (claims figure)", notebook=NB, source=src,
                   profile=cfg.profile, models=ex.models_run(every), n=len(every))
table.round(3)

# %%
for claim, g in table.groupby("claim", sort=False):
    print(f"{study.CLAIMS[claim]}")
    for r in g.itertuples():
        print(f"  {r.comparison}: {claims.fmt(r.diff)} (95% CI {claims.fmt(r.ci_low)} to {claims.fmt(r.ci_high)}; "
              f"n = {r.n}) -> {r.verdict}.")
paper_rows = table[~table.claim.isin(study.OURS_CLAIMS)]
counts = paper_rows["verdict"].value_counts()
print(f"The paper's claims, with {cap}: " + ", ".join(f"{k}: {v}" for k, v in counts.items()) + " of "
      f"{len(paper_rows)} comparisons. These are an embedded CPU model's results, not the paper's backbones.")
print(study.ours_sentence(table))
print(study.best_constant_sentence(table))
print(study.sensor_sentence(table))

# %% [markdown]
# What each cell answered: its commonest answer and that answer's share of the cell's days, beside the share of the
# commonest gold label. A share of 1.0 means the same answer on every day, whatever the data said. Beside them, the
# metrics blind to the commonest answer (class-averaged MAE, quadratic weighted kappa, within-person Spearman with its
# participant-bootstrap interval) and the collapse flag (the answer's share more than 20 points above the label's).

# %%
answers = study.answer_shares(every)
report.save_table(answers, "cpu_study_answers", artefact="CPU study (answers per cell)", notebook=NB, source=src,
                  profile=cfg.profile, models=ex.models_run(every), n=len(every),
                  caption=f"each cell's commonest answer and its share of the days; {cap}")
print(study.answers_sentence(answers))
answers
