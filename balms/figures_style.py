"""The project's one figure style: size, fonts, palette, the display name of every plotted column with its unit and
which way is better, the paper's values marked one way everywhere, and the checks every figure must pass.

`balms.report`'s figure functions (facet, interval_bars, forest, radar) and `save_figure` use it; notebooks name
columns, never axis text. `check_figure` is what tests/test_figures.py asserts on every figure function's output.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# page width of the book and a paper column, inches; a figure wider than PAGE_WIDTH is shrunk when read
PAGE_WIDTH = 7.0
FONT_SIZE = 8
PALETTE = "colorblind"  # seaborn's: distinguishable with the common colour-vision deficiencies
PAPER_MARK = {"marker": "D", "ms": 4, "color": "black", "ls": "none", "alpha": 0.8}  # the paper's values
PAPER_LINE = {"color": "black", "ls": ":", "lw": 1}  # the paper's reference (e.g. its mean predictor)
OURS_LINE = {"color": "black", "ls": "--", "lw": 1}  # our reference line
NOT_RUN = "not run"  # the mark of a panel with nothing to draw


@dataclass(frozen=True)
class Display:
    label: str
    unit: str = ""
    better: str | None = None  # "lower" | "higher" | None (no better side)


# every column a figure plots, declared once: tests check that no axis shows a raw name instead
DISPLAY: dict[str, Display] = {
    "mae": Display("MAE", "label points", "lower"),
    "MAE": Display("MAE", "label points", "lower"),
    "relative_change": Display("relative change of MAE", "%", "lower"),
    "relative change": Display("relative change of MAE", "%", "lower"),
    "mean_latency_s": Display("mean latency per sample", "s", "lower"),
    "latency_s": Display("latency per sample", "s", "lower"),
    "mean_prompt_tokens": Display("mean prompt tokens per sample", "tokens"),
    "lookback": Display("look-back window", "days"),
    "per_window": Display("failures per window", "", "lower"),
    "mode_rate": Display("mode rate", "share of answers that are the modal one", "lower"),
    "n": Display("samples", "count"),
    "count": Display("samples", "count"),
    "missing": Display("missing days", "share"),
    "diff": Display("difference, first term minus second (95% interval)", "", None),
    "conditional accuracy": Display("conditional accuracy", "share", "higher"),
    "value": Display("value", ""),
    "gq": Display("GQ, overall quality rescaled", "0-1", "higher"),
    "backbone": Display("backbone"),
    "system": Display("system"),
    "dataset": Display("dataset"),
    "label": Display("label", "native scale"),
    "channel": Display("channel"),
    "dimension": Display("dimension"),
    "failure": Display("failure"),
    "x": Display(""),
}


def label(column: str) -> str:
    """Axis text of a column: display name, unit and which way is better ("MAE (label points; lower is better)")."""
    d = DISPLAY.get(column)
    if d is None:
        return column.replace("_", " ")
    extra = [x for x in (d.unit, f"{d.better} is better" if d.better else "") if x]
    return d.label + (f" ({'; '.join(extra)})" if extra else "")


def n_per(df, by: str = "dataset", n: str = "n", what: str = "samples") -> str:
    """The n a title states, per group as counted (not the profile's n_samples: a dataset may have fewer)."""
    got = df.groupby(by, sort=False)[n].max()
    return f"{what} per {by}: " + ", ".join(f"{k} {int(v)}" for k, v in got.items())


def title_width(fig) -> int:
    """Characters of a title line that fit the figure's width at the title's font size."""
    return max(40, int(fig.get_figwidth() * 72 / (0.55 * (FONT_SIZE + 1))))


def apply() -> None:
    """Set the style for every figure drawn after it (report's figure functions call it)."""
    import matplotlib as mpl
    import seaborn as sns

    sns.set_theme(style="whitegrid", palette=PALETTE, rc={"grid.linewidth": 0.4})
    mpl.rcParams.update({"font.size": FONT_SIZE, "axes.titlesize": FONT_SIZE, "axes.labelsize": FONT_SIZE,
                         "xtick.labelsize": FONT_SIZE - 1, "ytick.labelsize": FONT_SIZE - 1,
                         "legend.fontsize": FONT_SIZE - 1, "legend.title_fontsize": FONT_SIZE,
                         "figure.titlesize": FONT_SIZE + 1,
                         "savefig.dpi": 200, "legend.frameon": False})


def plain_log(ax, axis: str = "y") -> None:
    """A log axis with plain numbers (60, not 6x10^1)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    a = ax.yaxis if axis == "y" else ax.xaxis
    a.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))  # 1-2-5: several ticks within one decade
    a.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    a.set_minor_formatter(NullFormatter())


def relabel(fig) -> None:
    """Every axis label that is a declared column name becomes its display text."""
    for ax in fig.axes:
        for get, put in ((ax.get_xlabel, ax.set_xlabel), (ax.get_ylabel, ax.set_ylabel)):
            t = get()
            if t in DISPLAY:
                put(label(t))
        t = ax.get_title()
        m = re.fullmatch(r"(\w+) = (.+)", t)  # seaborn's facet titles "measure = mode_rate"
        if m:
            t = m.group(2).replace("_", " ")
        # a dataset as the paper names it (the registry's display name): "pmdata | m" -> "PMData | m"
        names = _dataset_names() | {k: d.label for k, d in DISPLAY.items()}
        ax.set_title(" | ".join(names.get(p, p) for p in t.split(" | ")))


def _dataset_names() -> dict[str, str]:
    from balms.data.registry import dataset_names, get_dataset

    return {d: get_dataset(d).display_name for d in dataset_names()}


_RAW = re.compile(r"\b[a-z]+(_[a-z0-9]+)+\b")


def check_figure(fig, *, caption: str = "", n: int | None = None, source: str | None = None) -> list[str]:
    """What a reader would trip on, each as a sentence; empty = fine. Raw column names in axis labels or facet
    titles, seaborn's "col = value" titles, log ticks in powers of ten, an empty panel without a mark, a title or
    caption whose n or data source disagrees with the artefact's."""
    problems = []
    title = fig._suptitle.get_text() if getattr(fig, "_suptitle", None) is not None else ""
    for i, ax in enumerate(fig.axes):
        if ax.name == "polar":
            continue
        for what, text in (("x label", ax.get_xlabel()), ("y label", ax.get_ylabel())):
            if text in DISPLAY and label(text) != text or _RAW.search(text or ""):
                problems.append(f"panel {i}: raw column name as {what}: {text!r}")
        if " = " in ax.get_title():
            problems.append(f"panel {i}: seaborn facet title {ax.get_title()!r}")
        raw = [p for p in ax.get_title().split(" | ") if p in DISPLAY and DISPLAY[p].label != p]
        if raw:
            problems.append(f"panel {i}: raw column name in title {ax.get_title()!r}")
        fig.canvas.draw()
        for tick in ax.get_yticklabels() + ax.get_xticklabels():
            if "times" in tick.get_text() or "^{" in tick.get_text():
                problems.append(f"panel {i}: power-of-ten tick {tick.get_text()!r}")
                break
        drawn = ax.patches or ax.lines or ax.collections or ax.images
        if ax.axison and not drawn and not any(t.get_text().strip() for t in ax.texts):
            problems.append(f"panel {i} ({ax.get_title()!r}): empty, without a '{NOT_RUN}' mark")
    for text, where in ((title, "title"), (caption, "caption")):
        # an unqualified "n = 160" is the artefact's n; "n = 5 samples per cell" states a per-group count
        for m in re.finditer(r"\bn = (\d+)(?![^;,()]*\bper\b)", text):
            if n is not None and int(m.group(1)) != n:
                problems.append(f"{where} says n = {m.group(1)}, the artefact n = {n}")
        m = re.search(r"data: (real|synthetic|mixed)", text)
        if m and source and m.group(1) != source:
            problems.append(f"{where} says data: {m.group(1)}, the artefact's source is {source}")
    return problems
