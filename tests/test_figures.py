"""Figures draw the tables' own intervals (participant-cluster bootstrap), and a cell without a parsed answer is
an explicit mark, not a missing bar."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from balms import figures_style as style  # noqa: E402
from balms import report  # noqa: E402


def test_interval_bars_use_the_summary_intervals_and_mark_missing_cells():
    s = pd.DataFrame({"dataset": ["pmdata"] * 3, "system": ["healthllm", "rag", "phia"], "model": ["m"] * 3,
                      "mae": [0.5, np.nan, 1.0], "lo": [0.3, np.nan, 0.9], "hi": [0.8, np.nan, 1.6]})
    fig = report.interval_bars(s, x="system", y="mae", lo="lo", hi="hi", hue="model", col="dataset",
                               refs={"pmdata": 0.45}, paper_refs={"pmdata": 0.48, "globem": 0.80})
    ax = fig.axes[0]
    bars = [p for p in ax.patches]
    assert sorted(round(b.get_height(), 3) for b in bars) == [0.5, 1.0]
    # the error bar segments span exactly [lo, hi] of each drawn cell
    spans = sorted((round(seg[0][1], 3), round(seg[1][1], 3)) for coll in ax.collections
                   for seg in coll.get_segments() if len(seg) == 2 and seg[0][0] == seg[1][0])
    assert (0.3, 0.8) in spans and (0.9, 1.6) in spans
    marks = [line for line in ax.lines if line.get_marker() == "x"]
    assert len(marks) == 1  # the rag cell has no parsed answer
    assert any(t.get_text() == "no parsed answer" for t in ax.texts)
    refs = {(line.get_label(), line.get_linestyle(), line.get_ydata()[0]) for line in ax.lines
            if line.get_label().startswith("mean predictor")}
    # ours dashed, the paper's dotted, only the panel's own dataset (no GLOBEM line in the PMData panel)
    assert refs == {("mean predictor (ours)", "--", 0.45), ("mean predictor (paper)", ":", 0.48)}


def test_interval_bars_one_panel_per_backbone_and_a_row_per_dataset():
    s = pd.DataFrame({"dataset": ["pmdata", "pmdata", "globem"], "system": ["healthllm"] * 3,
                      "model": ["Qwen2.5-7B-Instruct", "Claude-Haiku-4.5", "Qwen2.5-7B-Instruct"],
                      "mode": ["zero-shot"] * 3, "lat": [1.0, 2.0, 3.0], "lo": [0.5, 1.5, 2.5], "hi": [1.5, 2.5, 3.5]})
    order = ["Qwen2.5-7B-Instruct", "Mistral-7B-Instruct-v0.3", "Claude-Haiku-4.5"]
    fig = report.interval_bars(s, x="system", y="lat", lo="lo", hi="hi", hue="mode", col="model", row="dataset",
                               col_order=order)
    assert len(fig.axes) == 6  # 2 datasets x 3 backbones, the backbone without a cell included
    titles = [ax.get_title() for ax in fig.axes]
    assert titles[:3] == [f"pmdata | {m}" for m in order] and titles[3] == "globem | Qwen2.5-7B-Instruct"
    heights = [[round(p.get_height(), 3) for p in ax.patches] for ax in fig.axes]
    assert heights == [[1.0], [], [2.0], [3.0], [], []]
    assert any(t.get_text() == "not run (no cell)" for t in fig.axes[1].texts)


def test_table3_puts_ours_beside_the_papers_column_of_the_same_backbone():
    from balms import experiments as ex

    summ = pd.DataFrame({"dataset": ["pmdata"] * 3, "system": ["healthllm"] * 3, "cot": [False] * 3,
                         "model": ["Claude-Haiku-4.5", "Qwen2.5-7B-Instruct", "smollm2-135m"],
                         "mae": [0.7, 0.9, 1.5], "mae_ci_low": [0.5, 0.8, 1.0], "mae_ci_high": [0.9, 1.0, 2.0],
                         "parse_failure_rate": [0.0, 0.0, 0.5], "n": [4] * 3, "source": ["real"] * 3,
                         "diff_vs_mean": [0.2, 0.4, 1.0], "diff_vs_mean_ci_low": [0.1, 0.3, float("nan")],
                         "diff_vs_mean_ci_high": [0.3, 0.5, float("nan")], "n_parsed": [4, 4, 2],
                         "mae_scored": [0.7, 0.9, 2.5], "n_out_of_range": [0, 0, 1]})
    mp = pd.DataFrame({"dataset": ["pmdata"], "mae_raw_mean": [0.5]})
    t3 = ex.table3_paper_vs_ours(summ, mp, cot=False)
    cols = list(t3.columns)
    i = cols.index("paper Qwen2.5-7B-Instruct")
    assert cols[i + 1:i + 11] == ["ours Qwen2.5-7B-Instruct", "ours Qwen2.5-7B-Instruct CI",
                                 "ours Qwen2.5-7B-Instruct scored",
                                 "ours Qwen2.5-7B-Instruct parse fail", "ours Qwen2.5-7B-Instruct out of range",
                                 "ours Qwen2.5-7B-Instruct errors",
                                 "diff Qwen2.5-7B-Instruct",
                                 "ours Qwen2.5-7B-Instruct minus mean predictor",
                                 "ours Qwen2.5-7B-Instruct minus mean predictor CI",
                                 "ours Qwen2.5-7B-Instruct n parsed"]
    assert cols.index("ours Claude-Haiku-4.5") == cols.index("paper Claude-Haiku-4.5") + 1
    assert t3.loc[0, "diff Claude-Haiku-4.5"] == pytest.approx(0.7 - 0.64)  # the paper's PMData Health-LLM cell
    assert t3.loc[0, "ours Claude-Haiku-4.5 minus mean predictor CI"] == "[0.10, 0.30]"
    assert t3.loc[0, "ours smollm2-135m minus mean predictor CI"] == ""  # no interval: said, not invented
    assert t3.loc[0, "ours smollm2-135m n parsed"] == 2
    # both MAE conventions shown; the profile's `scoring` picks the one compared with the paper (docs/scoring.md)
    assert t3.loc[0, "ours smollm2-135m scored"] == 2.5 and t3.loc[0, "ours smollm2-135m out of range"] == 1
    t3f = ex.table3_paper_vs_ours(summ.assign(mae_scored=[0.8, 1.2, 2.5]), mp, cot=False, scoring="fill")
    assert t3f.loc[0, "diff Claude-Haiku-4.5"] == pytest.approx(0.8 - 0.64)
    assert "paper Mistral-7B-Instruct-v0.3" in cols and "ours Mistral-7B-Instruct-v0.3" not in cols
    # a model that is not a paper backbone comes after every paper backbone, without a diff
    assert cols.index("ours smollm2-135m") > cols.index("paper Claude-Haiku-4.5") and "diff smollm2-135m" not in cols


def test_interval_bars_mark_the_papers_numbers():
    s = pd.DataFrame({"dataset": ["pmdata"] * 2, "system": ["healthllm", "rag"], "model": ["m"] * 2,
                      "mae": [0.5, 0.7], "lo": [0.4, 0.6], "hi": [0.6, 0.8]})
    fig = report.interval_bars(s, x="system", y="mae", lo="lo", hi="hi", hue="model", col="dataset",
                               paper_points={("pmdata", "rag"): [0.62, 0.66, np.nan]})
    marks = [line for line in fig.axes[0].lines if line.get_marker() == "D"]
    assert len(marks) == 1 and list(marks[0].get_ydata()) == [0.62, 0.66] and list(marks[0].get_xdata()) == [1, 1]


def _panel_titles(fig):
    return [ax.get_title() for ax in fig.axes if ax.get_title()]


def test_facet_keeps_a_panel_per_backbone_when_one_has_no_values():
    """Figure 4 in the paper profile: a backbone whose judged rationales have no Tier-1 value keeps its panel."""
    df = pd.DataFrame({"model": ["A", "A", "B", "B", "C"], "system": ["rag"] * 5,
                       "dimension": ["d1", "d2", "d1", "d2", "d1"],
                       "conditional accuracy": [0.5, 1.0, np.nan, np.nan, 0.2]})
    fig = report.facet(df, kind="bar", x="dimension", y="conditional accuracy", hue="system", col="model",
                       col_order=["A", "B", "C", "D"], title="t")
    titles = _panel_titles(fig)
    assert titles == ["A", "B", "C", "D"]  # the value alone, not seaborn's "model = A"
    empty = [ax.get_title() for ax in fig.axes if any("nothing parsed" in t.get_text() for t in ax.texts)]
    assert empty == ["B", "D"]
    # C has d1 only: its d2 slot says so
    assert [t.get_text() for t in fig.axes[2].texts] == [style.NOT_RUN]


def test_facet_with_no_value_at_all_still_draws_every_panel():
    df = pd.DataFrame({"model": ["A", "B"], "dimension": ["d1", "d1"], "conditional accuracy": [np.nan, np.nan]})
    fig = report.facet(df, kind="bar", x="dimension", y="conditional accuracy", col="model", title="t")
    assert _panel_titles(fig) == ["A", "B"]
    assert all(any(style.NOT_RUN in t.get_text() for t in ax.texts) for ax in fig.axes)


def test_figure4_radar_draws_gq_and_tier1_per_backbone_with_never_invoked_at_zero():
    """Figure 4's layout: one polar panel per backbone, one polygon per system over C1-C6 and GQ, the paper's GQ
    being (overall - 1) / 4 from the judgement table; a dimension without a value is drawn at 0 and named."""
    from balms.judges.llm_judge import JudgeResult, judgement_table
    from balms.judges.rubric import TIER1, TIER2

    def res(system, model, overall, c1):
        return JudgeResult(tier1={d: (c1 if d == "c1_alignment" else 1) for d in TIER1},
                           tier2={d: overall for d in TIER2}, status="scored",
                           meta={"dataset": "globem", "system": system, "model": model})

    t = judgement_table([res("healthllm", "m1", 5, None), res("healthllm", "m1", 3, None), res("rag", "m1", 1, 1),
                         res("rag", "m2", 2, 0)], by=("dataset", "model", "system"))
    got = t.set_index(["model", "system"])["gq"].to_dict()
    assert got == {("m1", "healthllm"): 0.75, ("m1", "rag"): 0.0, ("m2", "rag"): 0.25}
    axes = [f"{d}_coverage" for d in TIER1] + ["gq"]
    t.loc[t.system == "rag", "c2_slicing_coverage"] = np.nan
    fig = report.radar(t, axes=axes, hue="system", col="model", col_order=["m1", "m2", "m3"])
    polar = [ax for ax in fig.axes if ax.name == "polar"]
    assert len(polar) == 3 and [ax.get_title() for ax in polar] == ["m1", "m2", "m3"]
    lines = polar[0].get_lines()
    assert len(lines) == 2  # healthllm and rag on m1
    hl = next(ln for ln in lines if ln.get_label() == "healthllm")
    assert list(hl.get_ydata()) == [0, 1, 1, 1, 1, 1, 0.75, 0]  # C1 never invoked -> coverage 0; closed polygon
    assert any("n/a: c2_slicing_coverage" in ln.get_label() for ln in lines)
    assert "nothing judged" in [t.get_text() for t in polar[2].texts]


# ------------------------------------------------------------------ the figure style and its checks (issue 40) ---


def _summary():
    return pd.DataFrame({"dataset": ["pmdata", "pmdata", "globem"], "system": ["healthllm", "rag", "healthllm"],
                         "model": ["m"] * 3, "lookback": [7, 14, 7], "mae": [0.5, 0.6, 0.9],
                         "lo": [0.4, 0.5, 0.7], "hi": [0.6, 0.7, 1.1], "mean_prompt_tokens": [60.0, 600.0, 6000.0],
                         "mean_latency_s": [1.0, 2.0, 3.0]})


def _every_figure_function():
    """One figure from each figure-making function of balms.report, on the columns the notebooks plot."""
    import matplotlib.pyplot as plt

    s = _summary()
    yield "facet line", report.facet(s, kind="line", x="lookback", y="mean_prompt_tokens", hue="system",
                                     col="dataset", col_order=["pmdata", "globem", "diversityone"],
                                     title="Figure 2; data: real")
    yield "facet bar", report.facet(s, kind="bar", x="system", y="mae", hue="model", col="dataset",
                                    title="Table 4; data: real")
    yield "facet empty", report.facet(s.assign(mae=float("nan")), kind="bar", x="system", y="mae", hue="model",
                                      col="dataset", title="nothing parsed; data: real")
    yield "interval bars (log)", report.interval_bars(s, x="system", y="mean_prompt_tokens", lo="lo", hi="hi",
                                                      hue="model", col="dataset", log=True,
                                                      col_order=["pmdata", "globem", "diversityone"],
                                                      paper_points={("pmdata", "rag"): [0.55]})
    yield "forest", report.forest(pd.DataFrame({"comparison": ["a - b", "a - b"], "model": ["m1", "m2"],
                                                "claim": ["c1", "c1"], "diff": [0.1, -0.2], "lo": [0.0, -0.4],
                                                "hi": [0.2, 0.1], "verdict": ["agrees", "cannot tell"]}),
                                  label=["comparison", "model"], est="diff", lo="lo", hi="hi", color_by="verdict",
                                  group="claim", group_titles={"c1": "claim one"}, title="claims; data: real")
    yield "radar", report.radar(pd.DataFrame({"system": ["Health-LLM"], "backbone": ["m"], "GQ": [0.5],
                                              "RD": [0.4], "TC": [0.7]}),
                                axes=["GQ", "RD", "TC"], hue="system", col="backbone", title="Figure 4; data: real")
    plt.close("all")


@pytest.mark.parametrize("name", ["facet line", "facet bar", "facet empty", "interval bars (log)", "forest",
                                  "radar"])
def test_every_figure_function_passes_the_checks(name):
    figs = dict(_every_figure_function())
    fig = figs[name]
    style.relabel(fig)  # what save_figure does before it writes
    assert style.check_figure(fig, source="real") == []


def test_the_checks_catch_what_a_reader_trips_on():
    """Each check fails on the fault it is for (a check that cannot fail checks nothing)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3)
    axes[0].plot([1, 60], [1, 60])
    axes[0].set_yscale("log")  # matplotlib's default log ticks: 10^1
    axes[0].set_ylabel("mean_prompt_tokens")
    axes[1].set_title("measure = mode_rate")
    fig.suptitle("n = 160; data: mixed")
    got = "\n".join(style.check_figure(fig, n=10, source="real"))
    for fault in ("raw column name as y label", "seaborn facet title", "power-of-ten tick", "empty, without",
                  "title says n = 160", "title says data: mixed"):
        assert fault in got, (fault, got)
    style.plain_log(axes[0])
    style.relabel(fig)
    axes[1].text(0.5, 0.5, style.NOT_RUN)
    axes[2].text(0.5, 0.5, style.NOT_RUN)
    fig.suptitle("n = 10; data: real")
    assert style.check_figure(fig, n=10, source="real") == []
    fig.suptitle("n = 5 samples per cell; data: real")  # a per-group count is not the artefact's n
    assert style.check_figure(fig, n=35, source="real") == []
    plt.close(fig)


def test_forest_refuses_repeated_row_labels():
    df = pd.DataFrame({"comparison": ["pmdata healthllm zero-shot - mean predictor"] * 2, "model": ["a", "b"],
                       "diff": [0.1, 0.2], "lo": [0, 0], "hi": [1, 1]})
    with pytest.raises(ValueError, match="repeat"):
        report.forest(df, label="comparison", est="diff", lo="lo", hi="hi")
    fig = report.forest(df, label=["comparison", "model"], est="diff", lo="lo", hi="hi")
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert len(set(labels)) == 2 and all(" · " in x for x in labels)
    assert "lower" in fig.axes[0].get_xlabel()  # the axis says which way is which


def test_every_plotted_column_has_a_display_name():
    """The columns the notebooks hand to the figure functions (x=, y=) are declared in the one table."""
    import re
    from pathlib import Path

    from balms import paths

    used = set()
    for nb in sorted(Path(paths.PROJECT_ROOT, "notebooks").glob("[0-9][0-9]_*.py")):
        used |= set(re.findall(r'\b[xy]="([^"]+)"', nb.read_text()))
    missing = sorted(c for c in used if c not in style.DISPLAY)
    assert not missing, f"add to balms.figures_style.DISPLAY: {missing}"


def test_committed_figures_pass_the_checks():
    """save_figure records the checks beside each figure (<stem>.panels.json); every committed figure passes them,
    and its recorded title and panel titles name every dataset and system by its display name. Fails until the
    figures are regenerated with this code (older panels.json carry no checks, or older checks)."""
    import json
    from pathlib import Path

    from balms import paths

    found = sorted(Path(paths.PROJECT_ROOT).glob("figures/*.panels.json")) + \
        sorted(Path(paths.PROJECT_ROOT).glob("results/*/figures/*.panels.json"))
    assert found
    bad = {}
    for f in found:
        d = json.loads(f.read_text())
        raw = [f"raw name {n!r} in {t!r}" for t in [d.get("title", ""), *d.get("panels", [])]
               for n in style.raw_names_in(t)]  # also in figures saved before the check existed
        if d.get("problems", ["not checked: regenerate the figure"]) or raw:
            bad[str(f.relative_to(paths.PROJECT_ROOT))] = d.get("problems", ["not checked"]) + raw
    assert not bad, bad


def test_ranking_sentence_does_not_rank_ties():
    """Four equal values are not a ranking ("healthllm 0.00 > phia 0.00" was printed)."""
    from balms.experiments.claims import ranking_sentence

    df = pd.DataFrame({"system": ["healthllm", "phia", "rag", "raptor"], "v": [0.0, 0.0, 0.001, 0.5]})
    got = ranking_sentence(df, "v", item="system", digits=2)
    assert "raptor 0.50 > " in got and ">" not in got.split("raptor 0.50 > ")[1], got
    assert got.count(" = ") == 2, got


def test_committed_claims_rows_are_told_apart_by_comparison_and_model():
    """The claims figure labels each row with its comparison and model: in the committed table that pair is
    unique (the figure refuses repeats, test_forest_refuses_repeated_row_labels)."""
    from balms import paths

    t = pd.read_csv(paths.RESULTS_DIR / "cpu-study" / "tables" / "cpu_study_claims.csv")
    assert not t.duplicated(["comparison", "model"]).any()


def test_facet_titles_of_column_values_read_as_display_names():
    """Table 7's figure facets on `measure` (mode_rate, mae): the panels read "mode rate" and "MAE"."""
    long7 = pd.DataFrame({"dataset": ["pmdata"] * 2, "who": ["ours"] * 2, "measure": ["mode_rate", "mae"],
                          "value": [0.9, 0.6]})
    fig = report.facet(long7, kind="bar", x="dataset", y="value", hue="who", col="measure", sharey=False,
                       title="Table 7; data: real")
    assert any("raw column name in title" in p for p in style.check_figure(fig))
    style.relabel(fig)
    assert _panel_titles(fig) == ["mode rate", "MAE"] and style.check_figure(fig, source="real") == []
    assert [ax.get_xticklabels()[0].get_text() for ax in fig.axes] == ["PMData"] * 2


@pytest.mark.parametrize("where", ["panel 0 tick label", "legend entry", "panel 0 title", "title", "panel 0 y label"])
def test_a_raw_system_or_dataset_name_fails_the_checks_until_relabelled(where):
    """Every dataset and system a figure shows reads as the display-name table says ("healthllm" was a tick)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.bar([0, 1], [0.5, 0.7], label="ours")
    ax.set_xticks([0, 1], ["RAG", "Health-LLM"])
    ax.set_ylabel(style.label("mae"))
    ax.legend()
    fig.suptitle("Table 3; data: real")
    if where == "panel 0 tick label":
        ax.set_xticks([0, 1], ["RAG", "healthllm"])
    elif where == "legend entry":
        ax.legend(["phia (qwen2.5-coder-0.5b)"])
    elif where == "panel 0 title":
        ax.set_title("pmdata | qwen2.5-coder-0.5b")
    elif where == "title":
        fig.suptitle("Table 3; samples per dataset: globem 3; data: real")
    else:
        ax.set_ylabel("diversityone\n" + style.label("mae"))
    got = style.check_figure(fig, source="real")
    assert len(got) == 1 and got[0].startswith(f"{where}: raw dataset or system name"), got
    style.relabel(fig)
    assert style.check_figure(fig, source="real") == []
    shown = [t.get_text() for t in ax.get_xticklabels()] + [t.get_text() for t in ax.get_legend().get_texts()] + \
        [ax.get_title(), ax.get_ylabel(), fig._suptitle.get_text()]
    assert any(x in " ".join(shown) for x in ("Health-LLM", "PHIA (qwen2.5-coder-0.5b)", "PMData | qwen2.5-coder-0.5b",
                                              "GLOBEM 3", "DiversityOne\n"))
    plt.close(fig)


def test_names_come_from_the_registries_and_spare_model_names():
    from balms.agents.registry import display_names

    assert style.names()["healthllm"] == display_names()["healthllm"] and style.names()["pmdata"] == "PMData"
    # a key inside a model or file name is not a raw name
    assert style.display_text("rag-7b phia.csv rag") == "rag-7b phia.csv RAG"


def test_the_papers_values_other_than_as_diamonds_fail_the_checks():
    """The paper's values are black diamonds in every figure (figures_style.PAPER_MARK): a bar or a panel of the
    paper's values fails; diamonds and the paper's reference line pass."""
    s = pd.DataFrame({"dataset": ["pmdata"] * 2, "system": ["healthllm", "rag"], "model": ["m"] * 2,
                      "mae": [0.5, 0.7], "lo": [0.4, 0.6], "hi": [0.6, 0.8]})
    good = report.interval_bars(s, x="system", y="mae", lo="lo", hi="hi", hue="model", col="dataset",
                                paper_points={("pmdata", "rag"): [0.62]}, paper_refs={"pmdata": 0.5},
                                title="data: real")
    style.relabel(good)
    assert style.check_figure(good, source="real") == []
    as_bar = report.facet(s.assign(who=["paper (Qwen2.5-14B)", "ours"]), kind="bar", x="system", y="mae", hue="who",
                          col="dataset", title="data: real")
    style.relabel(as_bar)
    assert any("not drawn as diamonds" in p for p in style.check_figure(as_bar, source="real"))
    as_panel = report.facet(s.assign(panel=["paper: Qwen2.5-14B", "ours: m"]), kind="bar", x="system", y="mae",
                            hue="model", col="panel", title="data: real")
    style.relabel(as_panel)
    assert any("not as diamonds" in p for p in style.check_figure(as_panel, source="real"))
    named_after = report.facet(s.assign(system=["Sleep minutes (paper recipe)", "steps"]), kind="bar", x="system",
                               y="mae", hue="model", col="dataset", title="data: real")
    style.relabel(named_after)
    assert style.check_figure(named_after, source="real") == []  # a channel named after the paper is no paper value


def test_facet_bar_marks_a_category_a_panel_did_not_run():
    """Table 4's "ours" panel ran Health-LLM only: RAG, RAPTOR and PHIA say "not run" instead of an empty slot."""
    df = pd.DataFrame({"panel": ["paper", "paper", "ours"], "system": ["healthllm", "rag", "healthllm"],
                       "setting": ["full"] * 3, "MAE": [1.0, 1.2, 0.6]})
    fig = report.facet(df, kind="bar", x="system", y="MAE", hue="setting", col="panel", title="Table 4; data: real")
    ours = fig.axes[1]
    assert [t.get_text() for t in ours.texts] == [style.NOT_RUN]
    assert [t.get_text() for t in fig.axes[0].texts] == []
