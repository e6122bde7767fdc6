"""The project's one figure style: size, fonts, palette, the display name of every plotted column with its unit and
which way is better, the paper's values marked one way everywhere, and the checks every figure must pass.

`balms.report`'s figure functions (facet, interval_bars, forest, radar) and `save_figure` use it; notebooks name
columns, never axis text. `check_figure` is what tests/test_figures.py asserts on every figure function's output.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

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
    "relative_change": Display("relative change of MAE", "fraction", "lower"),
    "relative change": Display("relative change of MAE", "fraction", "lower"),
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


def names() -> dict[str, str]:
    """Every dataset and system as the paper names it (the registries' display names): what a tick, legend entry or
    title shows instead of the raw key ("healthllm" -> "Health-LLM", "pmdata" -> "PMData")."""
    from balms.agents.registry import display_names
    from balms.data.registry import dataset_names, get_dataset

    return {**{d: get_dataset(d).display_name for d in dataset_names()}, **display_names()}


@lru_cache(maxsize=1)
def _raw_names() -> re.Pattern:
    """A raw dataset or system key standing as a word of its own (not inside a model or file name)."""
    keys = sorted((k for k, v in names().items() if k != v), key=len, reverse=True)
    return re.compile(r"(?<![\w.-])(" + "|".join(map(re.escape, keys)) + r")(?![\w-]|\.\w)")


def raw_names_in(text: str) -> list[str]:
    """The raw dataset or system keys `text` shows instead of their display names."""
    return [m.group(1) for m in _raw_names().finditer(text or "")]


def display_text(text: str) -> str:
    """`text` with every raw dataset or system key replaced by its display name."""
    return _raw_names().sub(lambda m: names()[m.group(1)], text)


def _legends(fig) -> list:
    return [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend() is not None)]


def relabel(fig) -> None:
    """Every axis label that is a declared column name becomes its display text; every dataset or system key in a
    title, tick label or legend entry becomes its display name (`names`)."""
    fig.canvas.draw()  # categorical tick labels exist once drawn
    for ax in fig.axes:
        for get, put in ((ax.get_xlabel, ax.set_xlabel), (ax.get_ylabel, ax.set_ylabel)):
            t = get()
            put(label(t) if t in DISPLAY else display_text(t))
        # a column value as its display name: "mode_rate" -> "mode rate", "pmdata | m" -> "PMData | m"
        cols = {k: d.label for k, d in DISPLAY.items()}
        t = ax.get_title()
        m = re.fullmatch(r"(\w+) = (.+)", t)  # seaborn's facet titles "measure = mode_rate"
        if m:
            t = cols.get(m.group(2), display_text(m.group(2)).replace("_", " "))
        ax.set_title(display_text(" | ".join(cols.get(p, p) for p in t.split(" | "))))
        for axis in (ax.xaxis, ax.yaxis):
            ticks = axis.get_ticklabels()
            new = [display_text(x.get_text()) for x in ticks]
            if new != [x.get_text() for x in ticks]:
                axis.set_ticks(axis.get_ticklocs(), new)
    for leg in _legends(fig):
        for t in leg.get_texts():
            t.set_text(display_text(t.get_text()))
    if getattr(fig, "_suptitle", None) is not None:
        fig._suptitle.set_text(display_text(fig._suptitle.get_text()))


# text naming the paper as the source of values ("paper (Qwen2.5-14B)", "Qwen2.5-7B (paper)", "paper: Qwen2.5-7B"),
# not a thing named after it ("Sleep minutes (paper recipe)")
_PAPER_SIDE = re.compile(r"^paper\b|\(paper\)|\bpaper:")


def _paper_mark_problems(fig) -> list[str]:
    """The paper's values drawn as anything but PAPER_MARK's diamonds (a bar, a category, a panel of their own)."""
    from matplotlib.lines import Line2D

    problems = []
    for leg in _legends(fig):
        for text, handle in zip(leg.get_texts(), getattr(leg, "legend_handles", []), strict=False):
            ok = isinstance(handle, Line2D) and (handle.get_marker() == PAPER_MARK["marker"] or
                                                  (handle.get_marker() in ("None", "", None)
                                                   and handle.get_linestyle() not in ("None", "")))
            if _PAPER_SIDE.search(text.get_text()) and not ok:
                problems.append(f"legend entry {text.get_text()!r}: the paper's values not drawn as diamonds")
    for i, ax in enumerate(fig.axes):
        texts = [ax.get_title(), *(t.get_text() for t in ax.get_xticklabels() + ax.get_yticklabels())]
        for t in texts:
            if _PAPER_SIDE.search(t):
                problems.append(f"panel {i}: the paper's values as a category or panel ({t!r}), not as diamonds")
                break
    return problems


_RAW = re.compile(r"\b[a-z]+(_[a-z0-9]+)+\b")


def check_figure(fig, *, caption: str = "", n: int | None = None, source: str | None = None) -> list[str]:
    """What a reader would trip on, each as a sentence; empty = fine. A raw dataset or system key (not its display
    name) in any title, label, tick or legend entry; the paper's values drawn other than as diamonds; raw column
    names in axis labels or facet titles, seaborn's "col = value" titles, log ticks in powers of ten, an empty
    panel without a mark, a title or caption whose n or data source disagrees with the artefact's."""
    problems = []
    title = fig._suptitle.get_text() if getattr(fig, "_suptitle", None) is not None else ""
    fig.canvas.draw()
    texts = [("title", title)] + [("legend entry", t.get_text()) for leg in _legends(fig) for t in leg.get_texts()]
    for i, ax in enumerate(fig.axes):
        texts += [(f"panel {i} title", ax.get_title()), (f"panel {i} x label", ax.get_xlabel()),
                  (f"panel {i} y label", ax.get_ylabel())]
        texts += [(f"panel {i} tick label", t.get_text()) for t in ax.get_xticklabels() + ax.get_yticklabels()]
    problems += [f"{where}: raw dataset or system name {raw[0]!r} in {text!r} (figures_style.names)"
                 for where, text in texts if (raw := raw_names_in(text))]
    problems += _paper_mark_problems(fig)
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
