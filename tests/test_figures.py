"""Figures draw the tables' own intervals (participant-cluster bootstrap), and a cell without a parsed answer is
an explicit mark, not a missing bar."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from balms import report  # noqa: E402


def test_interval_bars_use_the_summary_intervals_and_mark_missing_cells():
    s = pd.DataFrame({"dataset": ["pmdata"] * 3, "system": ["healthllm", "rag", "phia"], "model": ["m"] * 3,
                      "mae": [0.5, np.nan, 1.0], "lo": [0.3, np.nan, 0.9], "hi": [0.8, np.nan, 1.6]})
    fig = report.interval_bars(s, x="system", y="mae", lo="lo", hi="hi", hue="model", col="dataset",
                               refs={"pmdata": 0.45})
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
    assert any(line.get_linestyle() == "--" and line.get_ydata()[0] == 0.45 for line in ax.lines)
