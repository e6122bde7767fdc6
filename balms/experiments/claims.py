"""Sentences computed from results, for the notebooks: no finding is written before the numbers exist.

Every helper takes the numbers a notebook just printed and returns one plain sentence. Comparisons use
intervals: a difference is called lower / higher only when its 95% interval excludes 0, otherwise it is
"indistinguishable at this n"; with no interval (too few samples or clusters) it says so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import pandas as pd


def _ok(x) -> bool:
    return x is not None and not (isinstance(x, float) and math.isnan(x)) and not pd.isna(x)


def fmt(x, digits: int = 2) -> str:
    return f"{x:.{digits}f}" if _ok(x) else "n/a"


def pct(x, digits: int = 1) -> str:
    return f"{x:.{digits}%}" if _ok(x) else "n/a"


def verdict(diff, lo, hi) -> str:
    """'lower' (interval entirely below 0), 'higher' (entirely above), 'indistinguishable' (it holds 0),
    'no interval' (an end is missing: fewer than two participants, balms.metrics._cluster_bootstrap). A point
    interval comes from two or more participants whose every resample gives the same mean (e.g. each day's answer
    moved by the same step): it is read like any other, so [0, 0] is indistinguishable and [-1, -1] lower."""
    if not (_ok(diff) and _ok(lo) and _ok(hi)):
        return "no interval"
    if hi < 0:
        return "lower"
    if lo > 0:
        return "higher"
    return "indistinguishable"


def compare_sentence(a: str, b: str, diff, lo, hi, *, what: str = "MAE", n: int | None = None,
                     digits: int = 2) -> str:
    """``A's MAE is lower than B's (difference -0.12, 95% CI -0.20 to -0.03; n = 40).`` `diff` = A - B."""
    if n == 0:
        return f"{a} vs {b}: no sample with a parsed answer on both sides, nothing to compare."
    v = verdict(diff, lo, hi)
    tail = f"difference {fmt(diff, digits)}, 95% CI {fmt(lo, digits)} to {fmt(hi, digits)}"
    if n is not None:
        tail += f"; n = {n}"
    if v == "no interval":
        return f"{a} vs {b}: {what} difference {fmt(diff, digits)}, no interval at this n ({tail})."
    if v == "indistinguishable":
        return f"{a} and {b} have indistinguishable {what} at this n ({tail})."
    return f"{a}'s {what} is {v} than {b}'s ({tail})."


def versus_paper(ours, lo, hi, paper, *, digits: int = 2) -> str:
    """Where the paper's number falls relative to our interval."""
    if not _ok(paper):
        return "no paper number"
    if not (_ok(lo) and _ok(hi)) or lo == hi:
        rel = "above" if _ok(ours) and paper > ours else "below" if _ok(ours) and paper < ours else "equal to"
        return f"paper {fmt(paper, digits)} is {rel} ours {fmt(ours, digits)} (no interval)"
    where = "inside" if lo <= paper <= hi else "above" if paper > hi else "below"
    return f"paper {fmt(paper, digits)} is {where} our interval {fmt(lo, digits)}-{fmt(hi, digits)}"


def mean_predictor_sentence(summary: pd.DataFrame, *, keys=("dataset", "system", "model")) -> str:
    """How many cells beat / lose to / tie the mean predictor on the same samples (paired differences
    `diff_vs_mean` with `diff_vs_mean_ci_low/high`, as `balms.experiments.summarize(..., cfg=cfg)` writes)."""
    cols = ["diff_vs_mean", "diff_vs_mean_ci_low", "diff_vs_mean_ci_high"]
    if summary.empty or not set(cols) <= set(summary.columns):
        return "No cell was compared with the mean predictor."
    v = summary.apply(lambda r: verdict(r[cols[0]], r[cols[1]], r[cols[2]]), axis=1)
    k = [c for c in keys if c in summary.columns]
    better = summary[v == "lower"]
    names = ", ".join(" ".join(str(r[c]) for c in k) for _, r in better.iterrows())
    s = (f"Of {len(summary)} cells, {int((v == 'lower').sum())} have a lower MAE than the mean predictor on the same "
         f"samples, {int((v == 'higher').sum())} a higher one, {int((v == 'indistinguishable').sum())} are "
         f"indistinguishable at this n and {int((v == 'no interval').sum())} have no interval (too few samples or "
         "participants)")
    return s + (f"; lower: {names}." if names else ".")


def ranking_sentence(df: pd.DataFrame, value: str, *, item: str, within: str | None = None, what: str = "",
                     unit: str = "", digits: int = 1, descending: bool = True) -> str:
    """``globem: phia 12.3 s > raptor 8.1 s > ...`` per group, highest first (the mean of `value` per item)."""
    parts = []
    groups = df.groupby(within, sort=True) if within else [("", df)]
    for g, sub in groups:
        m = sub.groupby(item)[value].mean().dropna().sort_values(ascending=not descending)
        if m.empty:
            continue
        shown = [(i, f"{v:.{digits}f}") for i, v in m.items()]
        order = shown[0][0] + f" {shown[0][1]}{unit}"
        for (_, a), (i, b) in zip(shown, shown[1:], strict=False):  # tied as printed: "=", not ">"
            order += f" {'=' if a == b else '>' if descending else '<'} {i} {b}{unit}"
        parts.append(f"{g}: {order}" if within else order)
    if not parts:
        return f"No {what or value} to rank."
    return f"{what or value} by {item}, {'highest' if descending else 'lowest'} first: " + "; ".join(parts) + "."


def slope_per_unit(df: pd.DataFrame, x: str, y: str, by: list[str]) -> pd.DataFrame:
    """Least-squares slope of y on x per group (e.g. prompt tokens per extra look-back day)."""
    rows = []
    for key, g in df.groupby(by, sort=True):
        g = g.dropna(subset=[x, y])
        key = key if isinstance(key, tuple) else (key,)
        if g[x].nunique() < 2:
            slope = math.nan
        else:
            xm = g[x] - g[x].mean()
            slope = float((xm * (g[y] - g[y].mean())).sum() / (xm ** 2).sum())
        rows.append(dict(zip(by, key, strict=True)) | {"slope": slope, "n_points": len(g)})
    return pd.DataFrame(rows)


def growth_sentence(slopes: pd.DataFrame, *, label: str, per: str, by: list[str], digits: int = 0) -> str:
    """'Prompt tokens per extra look-back day: pmdata healthllm +41, pmdata rag +0, ...'."""
    if slopes.empty:
        return f"No {label} to relate to {per}."
    items = [f"{' '.join(str(r[c]) for c in by)} {r['slope']:+.{digits}f}" if _ok(r["slope"])
             else f"{' '.join(str(r[c]) for c in by)} n/a (one {per} only)" for _, r in slopes.iterrows()]
    return f"{label} per extra {per}: " + ", ".join(items) + "."


def relative_change_sentences(table: pd.DataFrame, *, change_col: str, paper: Mapping[tuple, float],
                              keys=("dataset", "system")) -> list[str]:
    """One sentence per row: our relative change beside the paper's reported one (if any)."""
    out = []
    for _, r in table.iterrows():
        key = tuple(r[k] for k in keys)
        ours = r[change_col]
        p = paper.get(key)
        ptxt = "no paper number" if p is None else "the paper reports it flat" if p == 0 else \
            f"the paper reports about {p:+.0%}"
        if _ok(ours):
            sign = "lower" if ours < 0 else "higher" if ours > 0 else "unchanged"
            out.append(f"{' '.join(map(str, key))}: MAE {ours:+.0%} ({sign} at the longest look-back); {ptxt}.")
        else:
            out.append(f"{' '.join(map(str, key))}: no MAE at both ends of the sweep; {ptxt}.")
    return out


def concentration_sentence(label_counts: Mapping, *, dataset: str) -> str:
    """Share of samples on the most common label and on the two most common labels."""
    s = pd.Series({k: int(v) for k, v in label_counts.items()}).sort_values(ascending=False)
    if s.sum() == 0:
        return f"{dataset}: no samples."
    top1, top2 = s.iloc[0] / s.sum(), s.iloc[:2].sum() / s.sum()
    return (f"{dataset}: {top1:.0%} of the {int(s.sum())} labels are {s.index[0]}, {top2:.0%} are one of the two "
            f"most common values ({', '.join(map(str, s.index[:2]))}).")


def baseline_sentence(base: pd.DataFrame, *, dataset: str, reference: str = "mean_predictor") -> str:
    """Which baselines have a lower MAE than the reference on the same held-out days (point values: the
    baselines are deterministic given the split; no interval is claimed)."""
    sub = base[base["dataset"] == dataset].set_index("baseline")["mae"]
    if reference not in sub.index:
        return f"{dataset}: no {reference} MAE."
    ref = sub[reference]
    lower = [f"{b} {v:.3f}" for b, v in sub.drop(reference).sort_values().items() if v < ref]
    higher = [f"{b} {v:.3f}" for b, v in sub.drop(reference).sort_values().items() if v >= ref]
    return (f"{dataset}: {reference} MAE {ref:.3f}; lower: {', '.join(lower) or 'none'}; "
            f"not lower: {', '.join(higher) or 'none'} (point estimates on one split).")
