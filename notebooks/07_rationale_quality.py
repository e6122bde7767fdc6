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
# numeric claim against the window the agent saw (value, day, trend). The paper profile uses the paper's judge
# (`judge_mode = "paper"`: one greedy JSON answer to the paper's Appendix D prompt, `balms judge prompt`), on the
# window text its agent was shown (the data lines of the agent's own prompt). The demo uses `judge_mode = "geval"`
# (one question per dimension, each the paper's line for it; the score is the expectation over the judge's score
# tokens) with `judge_grounding_hint = True` (our extension: the evidence-grounding question sees the checker's
# findings), because greedy JSON from a CPU model gives every rationale the same scores. The demo judges PMData
# and, for Figure 4 and Table 6, the 5 GLOBEM Health-LLM CoT rationales of notebook 04's cell.
#
# **What it teaches:** grading explanations: the paper's two-tier LLM-judge rubric, and a deterministic checker of
# every numeric claim in a rationale.
#
# **Paper artefact:** Figure 4, Tables 6 and 8 (case study D.1).
#
# **What to look at:** in Figure 4, Tier-1 coverage per check and GQ (GLOBEM, our rows beside the paper's); in
# the D.1 table, whether the judge ranks the two case-study rationales as the paper's reading does.
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
judge_model = None
judge_systems = None
judge_datasets = None
judge_max_tokens = None
judge_justify = None
judge_mode = None
judge_grounding_hint = None
settings = None  # other command-line overrides (P) as a dict: servers, batches, budgets

# %%
import json
import pandas as pd

from balms import experiments as ex, report, paths
from balms.experiments import claims
from balms.experiments.checks import record_check
from balms.judges.grounding import check_rationale
from balms.judges.rubric import TIER1

cfg = ex.from_notebook(globals())
NB = "07_rationale_quality"
judged = ex.judge_grid(cfg)
src = report.source_label(judged["source"])
judged_models = ex.models_run(judged)  # the backbones whose rationales were judged, as recorded
judges = list(dict.fromkeys(judged["judge_model"]))
cap = report.model_caption(judged_models)
jcap = report.model_caption(judges)
if cfg.judge_mode == "geval":
    mode = ("geval mode: one question per dimension, score = expectation over the judge's score tokens"
            + ("; evidence grounding shown the grounding checker's findings (our extension)"
               if cfg.judge_grounding_hint else ""))
else:
    mode = "with one-sentence justifications" if cfg.judge_justify else "scores only (budget mode, no justifications)"
print(f"{len(judged)} rationales judged by {jcap}, {mode}; unscored: {(judged.judge_status != 'scored').sum()}")
# what changes the judge's numbers, for every caption below: judge model and mode, the judge's window, n
window_text = {"agent": "the judge shown each agent's own view (ours)",
               "lookback": "the judge shown the look-back arrays (the paper's)"}[cfg.judge_window]
jcap_full = f"{jcap}, {cfg.judge_mode} mode {mode}; {window_text}"
# Figure 4 and Table 6: the paper's scope (GLOBEM; Health-LLM, RAG, PHIA) within what was judged
in_paper = judged.dataset.isin(ex.PAPER_JUDGE_DATASETS) & judged.system.isin(ex.PAPER_JUDGE_SYSTEMS)
paper_scope, wider = judged[in_paper], judged
print(f"paper scope (Figure 4, Table 6): {len(paper_scope)} rationales; judged grid: datasets "
      f"{sorted(set(judged.dataset))}, systems {sorted(set(judged.system))}")

# %% [markdown]
# ## Figure 4: Tier-1 temporal reasoning and GQ per backbone, the systems overlaid
# As the paper draws it: one radar per backbone, one polygon per system, GLOBEM only. GQ is the paper's: the Tier-2
# overall Likert score rescaled to [0, 1], (overall - 1) / 4. The Tier-1 axes show coverage (invoked and correct / N,
# in [0, 1], so a dimension the rationales never invoke sits at 0 as C1 and C5 do in the paper's figure); the
# paper's caption does not name its Tier-1 measure. Invocation rate and conditional accuracy are in the table.

# %%
T1_AXES = {f"{d}_coverage": d.split("_")[0].upper() for d in TIER1}
FIG4_AXES = [*T1_AXES, "gq"]


def tier1_long(agg):
    t1 = agg.melt(id_vars=["dataset", "model", "system"], value_vars=[c for c in agg.columns if c.endswith("_cond_acc")],
                  var_name="dimension", value_name="conditional accuracy")
    return t1.assign(dimension=t1.dimension.str.replace("_cond_acc", ""))


agg = ex.aggregate_judgements(paper_scope, by=["dataset", "model", "system"])
agg_all = ex.aggregate_judgements(wider, by=["dataset", "model", "system"])
if len(paper_scope):
    report.save_table(agg, "fig4_judge_aggregate", artefact="Figure 4 (table)", notebook=NB, source=src,
                      profile=cfg.profile, models=judged_models + judges, n=len(paper_scope),
                      caption=f"GLOBEM Tier-1 invocation/accuracy/coverage, Tier-2 means and GQ ((overall - 1) / 4); "
                              f"agents {cap}; judge {jcap_full}; n {len(paper_scope)} rationales")
    fig = report.radar(agg.assign(system=agg.system.map(ex.PAPER_SYSTEM_NAMES)), axes=FIG4_AXES, hue="system",
                       col="model", col_order=judged_models, labels={**T1_AXES, "gq": "GQ"},
                       title=f"Figure 4: LLM-as-judge on GLOBEM, Tier-1 coverage and GQ; agents {cap}; judge {jcap} "
                             f"({mode}); n = {len(paper_scope)} rationales; data {src}")
    report.save_figure(fig, "fig4_judge_radar", artefact="Figure 4", notebook=NB, source=src, profile=cfg.profile,
                       models=judged_models + judges, n=len(paper_scope))
else:
    print(f"no judged rationale is in the paper's scope ({', '.join(ex.PAPER_JUDGE_DATASETS)}; "
          f"{', '.join(ex.PAPER_JUDGE_SYSTEMS)}): this profile judged {sorted(set(judged.dataset))}, so Figure 4 is "
          "not drawn and Table 6 has the paper's rows only; the judged grid is below")
agg.round(2)

# %% [markdown]
# ## Figure 4's GQ beside the paper's
# The paper draws Figure 4 as radars without printing its Tier-1 values, but its GQ is Table 6's overall rescaled,
# so the paper's GQ per backbone and system is known exactly: (overall - 1) / 4.

# %%
paper_gq = report.paper_table("table6_globem_tier2").assign(gq=lambda t: (t.overall - 1) / 4, who="paper")
ours_gq = agg[agg.dataset == "globem"].rename(columns={"model": "backbone"}).assign(
    system=lambda t: t.system.map(ex.PAPER_SYSTEM_NAMES), who="ours")
gq = pd.concat([paper_gq, ours_gq], ignore_index=True)[["backbone", "system", "gq", "who"]]
if len(ours_gq):
    report.save_table(gq, "fig4_gq_vs_paper", artefact="Figure 4 (GQ, table)", notebook=NB, source=src,
                      profile=cfg.profile, models=judged_models + judges, n=len(paper_scope),
                      caption=f"GQ = (overall - 1) / 4 on GLOBEM: the paper's (from Table 6, Llama-3.3-70B) and ours; "
                              f"agents {cap}; judge {jcap_full}; n {len(paper_scope)} rationales")
    # ours as bars, the paper's backbones as black diamonds (one mark each)
    fig = report.interval_bars(ours_gq.assign(lo=float("nan"), hi=float("nan")), x="system", y="gq", lo="lo",
                               hi="hi", hue="backbone", col="dataset",
                               paper_points={("globem", sy): g.gq.tolist() for sy, g in paper_gq.groupby("system")},
                               paper_label="paper (one mark per backbone; judge Llama-3.3-70B)",
                               title=f"Figure 4's GQ on GLOBEM: ours ({cap}; judge {jcap}) beside the paper's backbones")
    report.save_figure(fig, "fig4_gq_vs_paper", artefact="Figure 4 (GQ)", notebook=NB, source=src,
                       profile=cfg.profile, models=judged_models + judges, n=len(paper_scope))
    best = gq.loc[gq[gq.who == "paper"].gq.idxmax()]
    print(f"our GQ: {', '.join(f'{r.system} {r.gq:.2f}' for r in ours_gq.itertuples())}; the paper's range "
          f"{gq[gq.who == 'paper'].gq.min():.2f}-{gq[gq.who == 'paper'].gq.max():.2f} (highest: {best.backbone} "
          f"{best.system} {best.gq:.2f})")
gq.round(3)

# %% [markdown]
# ## Beyond the paper: every judged dataset and system (when the grid is wider than GLOBEM x 3 systems)

# %%
if (~in_paper).any():
    report.save_table(agg_all, "judge_aggregate_all", artefact="Figure 4 (wider grid, table)", notebook=NB,
                      source=src, profile=cfg.profile, models=judged_models + judges, n=len(wider),
                      caption=f"every judged dataset and system; agents {cap}; judge {jcap}")
    fig = report.facet(tier1_long(agg_all), kind="bar", x="dimension", y="conditional accuracy", hue="system",
                       col="model", row="dataset", col_order=judged_models,
                       title=f"Tier-1 conditional accuracy over the whole judged grid: {cap}; judge {jcap}; data {src}")
    for ax in fig.axes:
        ax.tick_params(axis="x", rotation=45)
    report.save_figure(fig, "fig4_tier1_all", artefact="Figure 4 (wider grid)", notebook=NB, source=src,
                       profile=cfg.profile, models=judged_models + judges, n=len(wider))
else:
    print("the judged grid is the paper's scope: no wider-grid artefact")

# %% [markdown]
# ## Table 6: GLOBEM Tier-2, paper beside ours

# %%
# the paper's Table 6 omits Safety ("every cell scores 5.0"); ours is shown, since ours need not be 5.0
tier2 = ["faithfulness", "evidence_grounding", "domain_knowledge", "safety", "clarity", "overall"]
ours6 = agg[agg.dataset == "globem"].reindex(columns=["model", "system"] + tier2).rename(columns={"model": "backbone"})
ours6["system"] = ours6["system"].map(ex.PAPER_SYSTEM_NAMES)
t6 = pd.concat([report.paper_table("table6_globem_tier2").assign(who="paper"), ours6.assign(who="ours")], ignore_index=True)
report.save_table(t6, "table6_globem_tier2", artefact="Table 6", notebook=NB, source=src, profile=cfg.profile,
                  models=judged_models + judges, n=len(paper_scope),
                  caption=f"GLOBEM Tier-2 means (Safety ours only: the paper omits it); paper judge Llama-3.3-70B, "
                          f"ours {jcap_full}; n {len(paper_scope)} rationales")
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
# ## The same case study, judged by this profile's judge
# What to look for: the paper's audit says Claude's rationale is grounded and Qwen's mis-attributes two claims, so a
# judge that reads the evidence should score Claude's higher on evidence grounding. (The paper's greedy JSON judge
# on an embedded model gave both the same score; `judge_mode: geval` is our extension, labelled where used.)

# %%
d1 = ex.judge_case_study(cfg)
report.save_table(d1, "case_study_d1_judged", artefact="Case study D.1 (judged)", notebook=NB, source="real",
                  profile=cfg.profile, models=judges, n=len(d1),
                  caption=f"the paper's two D.1 rationales judged by {jcap} ({mode})")
eg_by = d1.set_index("rationale")["evidence_grounding"]  # NaN where the judge left a rationale unscored
gap = float(eg_by.get("Claude-Haiku-4.5", float("nan")) - eg_by.get("Qwen2.5-7B-Instruct", float("nan")))
print(f"Evidence grounding, Claude's rationale minus Qwen's: {claims.fmt(gap)} "
      + ("(Claude's scored higher, as the paper's audit implies)." if gap > 0 else
         "(Claude's NOT scored higher: this judge does not reproduce the paper's audit here)." if gap == gap else
         "(a rationale went unscored)."))
record_check(cfg, "judge_d1_grounding_claude_minus_qwen", round(float(gap), 3), "> 0", bool(gap > 0),
             notebook=NB, source="real")
d1.round(2)

# %% [markdown]
# ## The grounding checker over every rationale

# %%
ground = ex.ground_grid(cfg, judged)
gsum = ground.groupby(["dataset", "system"])[["n_claims", "supported", "wrong_day", "value_not_found", "unverifiable"]].sum().reset_index()
gsum["supported_share"] = gsum["supported"] / gsum["n_claims"].where(gsum["n_claims"] > 0)
report.save_table(gsum, "grounding_all_rationales", artefact="Grounding audit (all rationales)", notebook=NB,
                  source=src, profile=cfg.profile, models=judged_models, n=len(ground),
                  caption=f"numeric claims per rationale checked against the window; agents {cap}")
gsum.round(2)

# %% [markdown]
# What to look for: the judge's Tier-2 evidence-grounding score beside the share of numeric claims the deterministic
# checker could verify, per dataset and system (the checker needs no model, so it does not depend on the judge's size).

# %%
eg = (agg_all.groupby(["dataset", "system"])["evidence_grounding"].mean().reset_index()
      if "evidence_grounding" in agg_all else None)
cmp_ = gsum[["dataset", "system", "supported_share"]].merge(eg, on=["dataset", "system"], how="left") if eg is not None else gsum
for r in cmp_.itertuples():
    print(f"{r.dataset} {r.system}: checker-supported share {claims.fmt(r.supported_share)}, judge evidence grounding "
          f"{claims.fmt(getattr(r, 'evidence_grounding', float('nan')))} (1-5).")

# %% [markdown]
# Does the judge discriminate, and does it track grounding? The number of distinct Tier-2 overall scores across
# the judged rationales (a judge that gives every rationale the same score cannot rank them), and the Spearman rank
# correlation between the overall score and the checker's share of wrong claims per rationale (negative = the judge
# scores rationales with more wrong claims lower).

# %%
distinct = int(judged.loc[judged.judge_status == "scored", "overall"].round(2).nunique()) if "overall" in judged else 0
rho = ex.judge_vs_grounding(judged, ground)
print(f"{distinct} distinct Tier-2 overall value(s) over {int((judged.judge_status == 'scored').sum())} scored "
      f"rationales; Spearman rho with the wrong-claim share {claims.fmt(rho['rho'])} (p = {claims.fmt(rho['p'])}, "
      f"n = {rho['n']} rationales with at least one checked claim)"
      + ("." if rho["rho"] == rho["rho"] else ": too few rationales with checked claims, or no variation, to rank."))
record_check(cfg, "judge_tier2_overall_distinct", distinct, ">= 3", distinct >= 3, notebook=NB, source=src)
record_check(cfg, "judge_overall_vs_wrong_claims_spearman", round(rho["rho"], 3), "reported (< 0 = tracks grounding)",
             rho["rho"] == rho["rho"], notebook=NB, source=src)
