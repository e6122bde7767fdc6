"""Artefacts: tables (CSV + Markdown + LaTeX) and figures (PNG + PDF), the paper's numbers beside ours,
and `tables/index.csv`, the list of every artefact a profile produced.

    balms report index --profile demo     # check and print the artefact index
    balms report html --profile demo      # static HTML report (see balms.report_html)
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd

from balms import figures_style as style
from balms import paths
from balms.data.loading import source_label  # noqa: F401 - notebooks call report.source_label
from balms.models.registry import model_caption  # noqa: F401 - notebooks call report.model_caption
from balms.paper import paper_table  # noqa: F401 - notebooks call report.paper_table
from balms.paths import index_path, output_dirs  # the index helpers live in paths: report_html uses them too

INDEX_COLUMNS = ["artefact", "path", "notebook", "source", "profile", "models", "n", "caption"]


def _register(profile: str, row: dict) -> None:
    """Add or replace one artefact row; locked, so notebooks running in parallel (make -j2) lose no row."""
    import fcntl

    path = index_path(profile)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        idx = pd.read_csv(path) if path.exists() else pd.DataFrame(columns=INDEX_COLUMNS)
        idx = idx[idx["path"] != row["path"]]
        idx = pd.concat([idx, pd.DataFrame([row])], ignore_index=True)[INDEX_COLUMNS]
        tmp = path.with_name(path.name + ".tmp")
        idx.sort_values(["artefact", "path"]).to_csv(tmp, index=False)
        tmp.replace(path)


def _rel(p: Path) -> str:
    try:
        return str(p.relative_to(paths.PROJECT_ROOT))
    except ValueError:
        return str(p)


def save_table(df: pd.DataFrame, stem: str, *, artefact: str, notebook: str, source: str, profile: str,
               models: Iterable[str] = (), n: int | None = None, caption: str = "") -> Path:
    """Write `stem`.csv/.md/.tex and register the CSV in the index. Returns the CSV path."""
    tdir, _ = output_dirs(profile)
    csv = tdir / f"{stem}.csv"
    df.to_csv(csv, index=False)
    head = f"{artefact}: {caption}\n\nData source: {source}. Models: {', '.join(models) or 'none'}.\n\n"
    (tdir / f"{stem}.md").write_text(head + df.to_markdown(index=False, floatfmt=".3f") + "\n")
    (tdir / f"{stem}.tex").write_text(
        df.to_latex(index=False, float_format="%.3f", caption=f"{artefact}: {caption} ({source} data)",
                    label=f"tab:{stem}", na_rep="--")
    )
    _register(profile, {"artefact": artefact, "path": _rel(csv), "notebook": notebook, "source": source,
                        "profile": profile, "models": ";".join(models), "n": n, "caption": caption})
    return csv


def save_figure(fig, stem: str, *, artefact: str, notebook: str, source: str, profile: str,
                models: Iterable[str] = (), n: int | None = None, caption: str = "") -> Path:
    """Write `stem`.png/.pdf; the figure should already carry backbone, source and n in its title."""
    _, fdir = output_dirs(profile)
    png = fdir / f"{stem}.png"
    style.relabel(fig)
    fig.savefig(png, dpi=200, bbox_inches="tight")
    fig.savefig(fdir / f"{stem}.pdf", bbox_inches="tight", metadata={"CreationDate": None})  # byte-stable
    # what the figure shows, machine-readable (the paper dry run checks one panel per backbone from this)
    sup = fig._suptitle.get_text() if getattr(fig, "_suptitle", None) is not None else ""
    panels = [ax.get_title() for ax in fig.axes if ax.get_title()]
    # the figure checks (balms.figures_style), recorded beside the figure and said on stderr: a test reads them
    problems = style.check_figure(fig, caption=caption, n=n, source=source)
    for p in problems:
        print(f"balms: figure {stem}: {p}", file=sys.stderr)
    (fdir / f"{stem}.panels.json").write_text(json.dumps({"title": sup, "panels": panels, "problems": problems},
                                                         indent=1) + "\n")
    _register(profile, {"artefact": artefact, "path": _rel(png), "notebook": notebook, "source": source,
                        "profile": profile, "models": ";".join(models), "n": n, "caption": caption})
    return png


def side_by_side(ours: pd.DataFrame, paper: pd.DataFrame, on: list[str], values: list[str]) -> pd.DataFrame:
    """Outer-join ours and the paper's on `on`; for each value column: paper_<v>, ours_<v>, diff_<v> (ours - paper).

    Rows only one side has are kept (NaN on the other): a reader sees what we did not reproduce.
    """
    o = ours[on + [v for v in values if v in ours.columns]].rename(columns={v: f"ours_{v}" for v in values})
    p = paper[on + [v for v in values if v in paper.columns]].rename(columns={v: f"paper_{v}" for v in values})
    m = p.merge(o, on=on, how="outer")
    cols = list(on)
    for v in values:
        if f"paper_{v}" not in m:
            m[f"paper_{v}"] = float("nan")
        if f"ours_{v}" not in m:
            m[f"ours_{v}"] = float("nan")
        m[f"diff_{v}"] = m[f"ours_{v}"] - m[f"paper_{v}"]
        cols += [f"paper_{v}", f"ours_{v}", f"diff_{v}"]
    return m[cols]


def check_index(profile: str) -> pd.DataFrame:
    """Every indexed artefact exists on disk; raises naming the missing ones."""
    path = index_path(profile)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no artefact index; run the notebooks first (make paper PROFILE={profile})")
    idx = pd.read_csv(path)
    missing = [p for p in idx["path"] if not (paths.PROJECT_ROOT / p).exists()]
    if missing:
        raise FileNotFoundError(f"{path}: indexed artefacts missing on disk: {missing}")
    return idx


def _notebook_artefacts(index: Path, notebook: str) -> list[Path]:
    """Every file of the artefacts `notebook` registered in `index` (a table's csv/md/tex, a figure's png/pdf)."""
    if not index.exists():
        return []
    idx = pd.read_csv(index)
    out = []
    for p in idx.loc[idx["notebook"] == notebook, "path"]:
        p = paths.PROJECT_ROOT / p
        exts = (".csv", ".md", ".tex") if p.suffix == ".csv" else (".png", ".pdf")
        out += [p.with_suffix(e) for e in exts if p.with_suffix(e).exists()]
    return out


def snapshot(profile: str, notebook: str, to: Path) -> int:
    """Copy the committed artefacts of `notebook` to `to` before a re-run (what `written` compares against)."""
    import shutil

    shutil.rmtree(to, ignore_errors=True)
    to.mkdir(parents=True)
    tdir, _ = paths.committed_dirs(profile)
    files = _notebook_artefacts(tdir / "index.csv", notebook)
    for f in files:
        shutil.copy2(f, to / f.name)
    return len(files)


def _table_differences(a: Path, b: Path) -> list[str]:
    """What differs, numbers compared (1e-9), latency columns apart, as `balms bundle compare` does ([]: equal)."""
    from balms.bundle import compare_tables

    return compare_tables(a.parent, b.parent, only=[a.name])


# why a re-run's artefact can differ from the committed one, by kind (printed under the list)
WHY_DIFFERS = {
    ".csv": "a table's numbers differ only when its inputs or code do: other data (a synthetic fallback, another "
            "copy), answers the model made in this run (a cold run's answers depend on the llama.cpp build and on the "
            "order of the calls, docs/_generated/reproducibility.md) or code that computes them differently; with the "
            "same data, the committed responses and unchanged code they are equal",
    ".png": "a figure is compared byte for byte: matplotlib, its fonts or the figure style change the bytes, not only "
            "the numbers (its table says whether the numbers moved)",
}


def written(profile: str, notebook: str, before: Path) -> list[tuple[str, str, str]]:
    """(path, "equal" | "differs" | "new", what differs) for every artefact `notebook` wrote in this profile's output:
    tables by their numbers (latency columns apart), figures by their bytes, against the copy `snapshot` took."""
    tdir, _ = output_dirs(profile)
    rows = []
    for f in _notebook_artefacts(tdir / "index.csv", notebook):
        if f.suffix not in (".csv", ".png"):
            continue
        ref = before / f.name
        what = ""
        if not ref.exists():
            status = "new"
        elif f.suffix == ".csv":
            diffs = _table_differences(f, ref)
            status, what = ("differs", diffs[0][:160]) if diffs else ("equal", "")
        else:
            status = "equal" if f.read_bytes() == ref.read_bytes() else "differs"
        rows.append((_rel(f), status, what))
    return rows


def facet(data: pd.DataFrame, *, kind: str, x: str, y: str, hue: str | None = None, col: str | None = None,
          title: str = "", **kw):
    """A seaborn relplot/catplot that keeps one panel per `col` value (in `col_order` when given) even where a
    panel has nothing to draw (e.g. a backbone whose answers all failed to parse, or a judge that found no
    temporal claim): that panel says so instead of vanishing, and when no value exists at all the figure still
    has its panels, titled as seaborn would, rather than the notebook crashing."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    style.apply()
    msg = f"{style.NOT_RUN}: no {style.DISPLAY.get(y, style.Display(y)).label}\n(nothing parsed or scored here)"
    ok = (data.dropna(subset=[y]) if y in data else data.iloc[0:0]).reset_index(drop=True)
    panels = None
    if col:
        order = kw.pop("col_order", None)
        panels = list(order) if order is not None else list(dict.fromkeys(data[col])) if col in data else []
    if ok.empty:
        names = panels or [None]
        fig, axes = plt.subplots(1, len(names), figsize=(3 * len(names), 2.5), squeeze=False)
        for ax, v in zip(axes.flat, names, strict=True):
            ax.axis("off")
            ax.text(0.5, 0.5, msg, ha="center", va="center", fontsize=7, transform=ax.transAxes)
            if v is not None:
                ax.set_title(str(v))
        fig.suptitle(_wrap(title, style.title_width(fig)))
        return fig
    if col:
        kw["col_order"] = panels
    # the legend goes below the panels, its labels wrapped: seaborn's own, right of a single narrow panel, leaves
    # no room for the panel when a label is long (a model caption) and fails ("left cannot be >= right")
    legend = kw.pop("legend", "auto") if hue else False
    if kind == "line":
        g = sns.relplot(data=ok, x=x, y=y, hue=hue, col=col, kind="line", marker="o", height=3, legend=False, **kw)
    else:
        g = sns.catplot(data=ok, x=x, y=y, hue=hue, col=col, kind=kind, height=3, legend=False, **kw)
    if legend:
        levels = list(kw.get("hue_order") or dict.fromkeys(ok[hue]))
        pal = kw.get("palette")
        palette = pal if isinstance(pal, dict) else dict(zip(levels, sns.color_palette(pal, n_colors=len(levels)),
                                                              strict=True))
        sat = 0.75 if kind in ("bar", "box", "violin", "boxen") else 1  # seaborn draws those patches desaturated
        handles = [plt.Line2D([], [], color=sns.desaturate(palette[v], sat), marker="s" if kind != "line" else "o",
                              linestyle="") for v in levels]
        g.figure.legend(handles, [textwrap.fill(str(v), 60) for v in levels], title=style.label(hue),
                        loc="upper center", bbox_to_anchor=(0.5, 0.0), frameon=False, fontsize=7, title_fontsize=7)
    if col and not kw.get("row"):
        for ax, v in zip(g.axes.flat, panels, strict=False):
            if not (ok[col] == v).any():
                ax.text(0.5, 0.5, msg, ha="center", va="center", fontsize=7, transform=ax.transAxes)
            elif kind == "bar":  # a category of the shared x axis without a value in this panel says so
                have = {str(c) for c in ok.loc[ok[col] == v, x]}
                for pos, tick in zip(ax.get_xticks(), ax.get_xticklabels(), strict=False):
                    if tick.get_text() not in have:
                        ax.text(pos, 0, style.NOT_RUN, rotation=90, ha="center", va="bottom", fontsize=6,
                                color="grey", transform=ax.get_xaxis_transform())
    g.set_titles("{col_name}" if col else "")
    g.set_axis_labels(style.label(x), style.label(y))
    g.figure.suptitle(_wrap(title, style.title_width(g.figure)), y=1.06)
    return g.figure


def _wrap(title: str, width: int = 110) -> str:
    """Lines of ~110 characters, never breaking a model name ("Qwen2.5-7B-Instruct") at a hyphen."""
    return textwrap.fill(title, width, break_on_hyphens=False, break_long_words=False)


def radar(data: pd.DataFrame, *, axes: list[str], hue: str, col: str, col_order: list | None = None,
          labels: dict | None = None, title: str = ""):
    """One polar panel per `col` value, one closed polygon per `hue` value over the `axes` columns (each in [0, 1];
    the paper's Figure 4 layout). A NaN is drawn at 0 with its axis label marked "n/a" in that panel's legend entry
    rather than dropped; a panel with no row says so."""
    import matplotlib.pyplot as plt

    style.apply()
    panels = list(col_order) if col_order is not None else list(dict.fromkeys(data[col]))
    fig, axs = plt.subplots(1, max(len(panels), 1), figsize=(3.6 * max(len(panels), 1), 3.8), squeeze=False,
                            subplot_kw={"projection": "polar"})
    theta = np.linspace(0, 2 * np.pi, len(axes), endpoint=False)
    for ax, v in zip(axs.flat, panels, strict=False):
        ax.set_title(str(v), fontsize=8, pad=14)
        ax.set_xticks(theta)
        ax.set_xticklabels([(labels or {}).get(a, a) for a in axes], fontsize=7)
        ax.set_ylim(0, 1)
        ax.set_yticks([0.25, 0.5, 0.75, 1.0])
        ax.tick_params(axis="y", labelsize=6)
        sub = data[data[col] == v]
        if sub.empty:
            ax.text(0.5, 0.5, "nothing judged", ha="center", va="center", fontsize=7, transform=ax.transAxes)
            continue
        for _, r in sub.iterrows():
            vals = np.array([float(r[a]) for a in axes])
            missing = [(labels or {}).get(a, a) for a, x in zip(axes, vals, strict=True) if np.isnan(x)]
            vals = np.nan_to_num(vals, nan=0.0)
            name = str(r[hue]) + (f" (n/a: {', '.join(missing)})" if missing else "")
            ax.plot(np.append(theta, theta[0]), np.append(vals, vals[0]), marker="o", markersize=3, label=name)
            ax.fill(np.append(theta, theta[0]), np.append(vals, vals[0]), alpha=0.15)
        ax.legend(fontsize=6, loc="upper right", bbox_to_anchor=(1.35, 1.15))
    # lines of ~110 characters, never breaking a model name ("Qwen2.5-7B-Instruct") at a hyphen
    fig.suptitle(_wrap(title, style.title_width(fig)))
    fig.tight_layout()
    return fig


def interval_bars(summary: pd.DataFrame, *, x: str, y: str, lo: str, hi: str, hue: str, col: str | None = None,
                  row: str | None = None, title: str = "", ylabel: str | None = None, refs: dict | None = None,
                  log: bool = False, missing_label: str = "no parsed answer", col_order: list | None = None,
                  paper_points: dict | None = None, paper_label: str = "paper (one mark per backbone)",
                  paper_refs: dict | None = None, sharey: bool = True):
    """Bars of a summary table with ITS intervals (the participant-cluster bootstrap the tables report), one
    panel per `col` value (e.g. one per backbone, in `col_order` when given) and one panel row per `row` value.
    A cell without a value is drawn as an explicit mark, never a silently missing bar; a panel whose slice has
    no cell at all says so. `refs` = {row or col value: y} draws a dashed reference line in the panels of that
    value (e.g. the mean predictor of a dataset). `paper_points` = {(row or col value, x value): [values]} marks
    the paper's numbers for that cell (black diamonds), so a figure shows them beside ours, not only the CSV;
    {(row or col value, x value, hue value): [values]} marks them beside that hue's bar. The paper's values are
    drawn this way only, never as bars of their own (figures_style.check_figure).
    `paper_refs` = {row or col value: y} draws the paper's reference line (e.g. its mean predictor) dotted beside
    ours."""
    import matplotlib.pyplot as plt
    import numpy as np

    style.apply()
    cols = (list(col_order) if col_order is not None else list(dict.fromkeys(summary[col]))) if col else [None]
    rows_ = list(dict.fromkeys(summary[row])) if row else [None]
    xs = list(dict.fromkeys(summary[x]))
    hues = list(dict.fromkeys(summary[hue]))
    width = 0.8 / max(len(hues), 1)
    fig, axes = plt.subplots(len(rows_), len(cols), figsize=(3.2 * len(cols) + 1, 3.2 * len(rows_)),
                             squeeze=False, sharey=sharey)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ri, rv in enumerate(rows_):
        for ci, cv in enumerate(cols):
            ax = axes[ri][ci]
            sub = summary
            if row:
                sub = sub[sub[row] == rv]
            if col:
                sub = sub[sub[col] == cv]
            if sub.empty:
                ax.text(0.5, 0.5, f"{style.NOT_RUN} (no cell)", ha="center", va="center", transform=ax.transAxes,
                        fontsize=7)
            for j, h in enumerate(hues):
                for i, xv in enumerate(xs):
                    cell = sub[(sub[x] == xv) & (sub[hue] == h)]
                    if cell.empty:
                        continue
                    pos = i - 0.4 + width * (j + 0.5)
                    val = float(cell[y].iloc[0])
                    if np.isnan(val):
                        ax.plot(pos, 0, marker="x", color=colors[j % len(colors)], ms=8, mew=2)
                        ax.annotate(missing_label, (pos, 0), rotation=90, fontsize=6, ha="center", va="bottom",
                                    xytext=(0, 6), textcoords="offset points")
                        continue
                    err = None
                    l_, h_ = float(cell[lo].iloc[0]), float(cell[hi].iloc[0])
                    if not (np.isnan(l_) or np.isnan(h_)):
                        err = [[max(val - l_, 0)], [max(h_ - val, 0)]]
                    ax.bar(pos, val, width, yerr=err, capsize=2, color=colors[j % len(colors)],
                           label=str(h) if h not in ax.get_legend_handles_labels()[1] else None)
            for i, xv in enumerate(xs):
                for key in (rv, cv):
                    # (panel, x): at the x category; (panel, x, hue): beside that hue's bar
                    at = [(i, (paper_points or {}).get((key, xv), []))] + [
                        (i - 0.4 + width * (j + 0.5), (paper_points or {}).get((key, xv, h), []))
                        for j, h in enumerate(hues)]
                    for pos, vals in at:
                        pts = [v for v in vals if v is not None and not np.isnan(v)]
                        if key is not None and pts:
                            ax.plot([pos] * len(pts), pts, **style.PAPER_MARK, label=paper_label)
            for key in (rv, cv):
                for lines, kw, label in ((refs, style.OURS_LINE, "mean predictor (ours)"),
                                         (paper_refs, style.PAPER_LINE, "mean predictor (paper)")):
                    if lines and key is not None and lines.get(key) is not None and not np.isnan(lines[key]):
                        ax.axhline(lines[key], **kw, label=label)
            ax.set_xticks(range(len(xs)), [str(v) for v in xs], rotation=30, fontsize=7)
            ax.set_title(" | ".join(str(v) for v in (rv, cv) if v is not None), fontsize=8)
            if log and not sub.empty:
                ax.set_yscale("log")
                style.plain_log(ax)
        axes[ri][0].set_ylabel((f"{rv}\n" if rv is not None else "") + (ylabel or style.label(y)))
    labels, handles = [], []
    for ax in axes.flat:
        for h_, l_ in zip(*ax.get_legend_handles_labels(), strict=True):
            if l_ not in labels:
                labels.append(l_)
                handles.append(h_)
    if labels:  # below the panels: a legend inside one would cover its bars
        fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 4), bbox_to_anchor=(0.5, 0))
    intervals = summary[[lo, hi]].notna().all(axis=1).any()
    fig.suptitle(_wrap(title + (" (error bars: 95% participant-bootstrap intervals of the tables; "
                                if intervals else " (") + "x = cell without a parsed answer)", style.title_width(fig)))
    fig.tight_layout(rect=(0, 0.04 * (1 + len(labels) // 4) if labels else 0, 1, 1))
    return fig



def forest(df: pd.DataFrame, *, label: str | list[str], est: str, lo: str, hi: str, color_by: str | None = None,
           group: str | None = None, group_titles: dict | None = None, title: str = "",
           xlabel: str = "difference, first term minus second (95% interval); left of 0: the first is lower"):
    """One horizontal interval per row (a forest plot) with a zero line, rows grouped under a heading per `group`
    value (e.g. one per claim, `group_titles` its text). `label`: a column or columns joined with " · " (e.g.
    comparison and model); row labels must be unique, else a reader cannot tell two rows apart (ValueError). Rows
    without an interval show the point alone and rows without an estimate say so, so nothing silently
    disappears. The legend sits below the plot, never over a row."""
    import matplotlib.pyplot as plt

    style.apply()
    cols = [label] if isinstance(label, str) else list(label)
    # a part an earlier part already names is not repeated ("... qwen2.5-coder-1.5b - ..." needs no " · model")
    import re

    labels = [" · ".join(p for i, p in enumerate(parts)
                         if not any(re.search(rf"(?<!\S){re.escape(p)}(?!\S)", q) for q in parts[:i]))
              for parts in df[cols].astype(str).itertuples(index=False)]
    dup = sorted({x for x in labels if labels.count(x) > 1})
    if dup:
        raise ValueError(f"forest: row labels repeat ({dup[:3]}); add a column that tells them apart to `label`")
    rows: list[tuple[str, object]] = []  # ("head", text) | ("row", (label, record))
    groups = list(dict.fromkeys(df[group])) if group else [None]
    for gv in groups:
        sub = df[df[group] == gv] if group else df
        if group:
            rows.append(("head", textwrap.shorten(str((group_titles or {}).get(gv, gv)), 95, placeholder=" ...")))
        rows += [("row", (lab, r)) for lab, (_, r) in zip([labels[df.index.get_loc(i)] for i in sub.index],
                                                          sub.iterrows(), strict=True)]
    fig, ax = plt.subplots(figsize=(style.PAGE_WIDTH, 0.22 * max(len(rows), 2) + 1.6))
    kinds = list(dict.fromkeys(df[color_by])) if color_by else [None]
    colours = dict(zip(kinds, plt.rcParams["axes.prop_cycle"].by_key()["color"] * 4, strict=False))
    ys = np.arange(len(rows))[::-1]
    ticks, names = [], []
    for y, (kind, item) in zip(ys, rows, strict=True):
        if kind == "head":
            ax.text(0, y, item, transform=ax.get_yaxis_transform(), ha="left", va="center", fontweight="bold",
                    fontsize=style.FONT_SIZE - 1)
            continue
        lab, r = item
        ticks.append(y)
        names.append(lab)
        c = colours[r[color_by]] if color_by else "C0"
        if pd.isna(r[est]):
            ax.text(0, y, "no estimate (no parsed pairs)", va="center", fontsize=7, color="grey")
            continue
        if not (pd.isna(r[lo]) or pd.isna(r[hi])):
            ax.plot([r[lo], r[hi]], [y, y], color=c, lw=2)
        ax.plot([r[est]], [y], "o", color=c, ms=4, label=r[color_by] if color_by else None)
    ax.axvline(0, color="black", lw=0.8)
    ax.set_yticks(ticks, names, fontsize=style.FONT_SIZE - 2)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_xlabel(xlabel)
    if color_by:
        handles, names_ = ax.get_legend_handles_labels()
        uniq = dict(zip(names_, handles, strict=True))
        fig.legend(uniq.values(), uniq.keys(), loc="lower center", ncol=len(uniq), bbox_to_anchor=(0.5, 0))
    fig.suptitle(_wrap(title, style.title_width(fig)))
    fig.tight_layout(rect=(0, 0.03 if color_by else 0, 1, 1))
    return fig
