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
# # 07 · Rationale quality (Figure 4, Tables 6 and 8)
#
# The CoT reasoning of each prediction is its rationale. An LLM judge grades it on the paper's two-tier rubric
# (Tier 1: six temporal-reasoning checks, 1/0/not invoked; Tier 2: faithfulness, evidence grounding, domain
# knowledge, safety, clarity, overall on 1-5). Beyond the paper, a deterministic grounding checker verifies every
# numeric claim against the window the agent saw (value, day, trend). The demo profile asks the judge for scores
# only (`judge_justify = False`): a 0.5B judge's justifications cost four-fifths of its tokens and are boilerplate.

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
judge_model = None
judge_systems = None
judge_max_tokens = None
judge_justify = None

# %%
import json
import pandas as pd

from balms import experiments as ex, report, paths
from balms.experiments import claims
from balms.judges.grounding import check_rationale

cfg = ex.from_notebook(globals())
NB = "07_rationale_quality"
judged = ex.judge_grid(cfg)
src = report.source_label(judged["source"])
cap = report.model_caption(cfg.backbones)
jcap = report.model_caption([cfg.judge_model])
mode = "with one-sentence justifications" if cfg.judge_justify else "scores only (budget mode, no justifications)"
print(f"{len(judged)} rationales judged by {jcap}, {mode}; unscored: {(judged.judge_status != 'scored').sum()}")

# %% [markdown]
# ## Figure 4: Tier-1 temporal reasoning and general quality per backbone and system

# %%
agg = ex.aggregate_judgements(judged, by=["dataset", "model", "system"])
report.save_table(agg, "fig4_judge_aggregate", artefact="Figure 4 (table)", notebook=NB, source=src, profile=cfg.profile,
                  models=cfg.backbones + [cfg.judge_model], n=len(judged),
                  caption=f"Tier-1 invocation/accuracy/coverage and Tier-2 means; agents {cap}; judge {jcap}")
t1 = agg.melt(id_vars=["dataset", "model", "system"], value_vars=[c for c in agg.columns if c.endswith("_cond_acc")],
              var_name="dimension", value_name="conditional accuracy")
fig = report.facet(t1.assign(dimension=t1.dimension.str.replace("_cond_acc", "")), kind="bar", x="dimension",
                   y="conditional accuracy", hue="system", col="dataset",
                   title=f"Tier-1 conditional accuracy; agents {cap}; judge {jcap}; data {src}")
for ax in fig.axes:
    ax.tick_params(axis="x", rotation=45)
report.save_figure(fig, "fig4_tier1", artefact="Figure 4", notebook=NB, source=src, profile=cfg.profile,
                   models=cfg.backbones + [cfg.judge_model], n=len(judged))
agg.round(2)

# %% [markdown]
# ## Table 6: GLOBEM Tier-2, paper beside ours

# %%
tier2 = ["faithfulness", "evidence_grounding", "domain_knowledge", "clarity", "overall"]
ours6 = agg[agg.dataset == "globem"][["model", "system"] + tier2].rename(columns={"model": "backbone"})
ours6["system"] = ours6["system"].map(ex.PAPER_SYSTEM_NAMES)
t6 = pd.concat([report.paper_table("table6_globem_tier2").assign(who="paper"), ours6.assign(who="ours")], ignore_index=True)
report.save_table(t6, "table6_globem_tier2", artefact="Table 6", notebook=NB, source=src, profile=cfg.profile,
                  models=cfg.backbones + [cfg.judge_model], n=len(judged), caption=f"GLOBEM Tier-2 means; judge {jcap}")
t6.round(2)

# %% [markdown]
# ## Table 8: the case study, audited automatically
# The paper checked two rationales for one GLOBEM window by hand (Appendix D.1). What to look for: whether the
# automatic checker's wrong-day count matches the paper's hand audit for each rationale.

# %%
# NBVAL_CHECK_OUTPUT
case = json.loads(paths.CASE_STUDY_D1.read_text())
rows = []
for name, r in case["rationales"].items():
    rep = check_rationale(r["text"], case["window"], n_days=14)
    rows.append({"rationale": name, "claims": rep.n_claims, "supported": rep.supported, "wrong_day": rep.wrong_day,
                 "value_not_found": rep.value_not_found, "trends": rep.n_trends,
                 "paper_correct_day": r["paper_audit"]["correct_day"],
                 "paper_wrong_day": len(r["paper_audit"]["wrong_day_claims"]),
                 "paper_trends": r["paper_audit"]["multi_day_trend_cited"]})
t8 = pd.DataFrame(rows)
report.save_table(t8, "table8_case_study_grounding", artefact="Table 8", notebook=NB, source="real", profile=cfg.profile,
                  caption="grounding checker vs the paper's hand audit (case study D.1)")
t8

# %%
for r in t8.itertuples():
    agree = "matches" if r.wrong_day == r.paper_wrong_day else "does not match"
    print(f"{r.rationale}: the checker finds {r.wrong_day} wrong-day claim(s) of {r.claims}; the paper's audit "
          f"{r.paper_wrong_day}: {agree}.")

# %% [markdown]
# ## The grounding checker over every rationale

# %%
ground = ex.ground_grid(cfg, judged)
gsum = ground.groupby(["dataset", "system"])[["n_claims", "supported", "wrong_day", "value_not_found", "unverifiable"]].sum().reset_index()
gsum["supported_share"] = gsum["supported"] / gsum["n_claims"].where(gsum["n_claims"] > 0)
report.save_table(gsum, "grounding_all_rationales", artefact="Grounding audit (all rationales)", notebook=NB,
                  source=src, profile=cfg.profile, models=cfg.backbones, n=len(ground),
                  caption=f"numeric claims per rationale checked against the window; agents {cap}")
gsum.round(2)

# %% [markdown]
# What to look for: the judge's Tier-2 evidence-grounding score beside the share of numeric claims the deterministic
# checker could verify, per dataset and system (the checker needs no model, so it does not depend on the judge's size).

# %%
eg = agg.groupby(["dataset", "system"])["evidence_grounding"].mean().reset_index() if "evidence_grounding" in agg else None
cmp_ = gsum[["dataset", "system", "supported_share"]].merge(eg, on=["dataset", "system"], how="left") if eg is not None else gsum
for r in cmp_.itertuples():
    print(f"{r.dataset} {r.system}: checker-supported share {claims.fmt(r.supported_share)}, judge evidence grounding "
          f"{claims.fmt(getattr(r, 'evidence_grounding', float('nan')))} (1-5).")
