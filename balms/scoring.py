"""Which parse-failure convention the paper's printed numbers allow (docs/scoring.md), checked from its tables.

The paper does not say how a parse failure enters MAE. PHIA with Qwen2.5-14B on DiversityOne decides it: Table 7
prints 757 of 761 windows unparsed and MAE 2.11 (the same value as Table 3's cell), Table 3 prints its +CoT MAE
and the mean predictor's. Each candidate rule is tested against those printed values, read as intervals (a value
printed to two decimals is anywhere in `[x - HALF_CENT, x + HALF_CENT)`). Assumptions, stated in the doc: labels are
integers on 1-5 (the text: "a daily evening mood self-report", "a single integer self-report target"); the failed
windows' labels have about the spread the mean predictor's MAE measures; the +CoT windows have the same labels.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

HALF_CENT = 0.005  # a number printed to two decimals


@dataclass(frozen=True)
class PrintedCell:
    """The printed numbers one cell gives: windows, failures, MAE, its +CoT MAE and the mean predictor's MAE."""

    n: int
    n_fail: int
    mae: float
    cot_mae: float
    mean_predictor_mae: float
    scale: tuple[int, int]


def diversityone_phia_cell() -> PrintedCell:
    """Table 7's DiversityOne row with Table 3's +CoT cell and mean predictor (PHIA, Qwen2.5-14B-Instruct)."""
    from balms.paper import paper_table

    t7 = paper_table("table7_phia_mode_collapse").set_index("dataset").loc["DiversityOne"]
    t3 = paper_table("table3_zero_shot_mae")
    cell = t3[(t3["backbone"] == "Qwen2.5-14B-Instruct") & (t3["system"] == "PHIA")].iloc[0]
    mean = t3[t3["system"] == "Mean Predictor"].iloc[0]
    if abs(float(cell["diversityone_mae"]) - float(t7["mae"])) > 1e-9:
        raise ValueError("Table 3 and Table 7 disagree on the DiversityOne PHIA MAE; the derivation assumes one cell")
    return PrintedCell(n=int(t7["n_windows"]), n_fail=int(t7["mode_count"]), mae=float(t7["mae"]),
                       cot_mae=float(cell["diversityone_cot_mae"]),
                       mean_predictor_mae=float(mean["diversityone_mae"]), scale=(1, 5))


def _fill_verdict(c: PrintedCell, v: float, answers: tuple[int, int]) -> tuple[bool, bool, str]:
    """Failures scored as the answer v: can it give the printed MAE, and its +CoT MAE?"""
    lo, hi = c.scale
    n_ok = c.n - c.n_fail
    a, b = min(answers[0], v), max(answers[1], v)  # every prediction (parsed or filled) lies in [a, b]
    max_parsed_err = max(hi - answers[0], answers[1] - lo)
    # the failed windows' mean |y - v| the printed MAE allows, whatever the parsed windows' errors were
    need_lo = ((c.mae - HALF_CENT) * c.n - n_ok * max_parsed_err) / c.n_fail
    need_hi = (c.mae + HALF_CENT) * c.n / c.n_fail
    spread = c.mean_predictor_mae + HALF_CENT  # mean |y - m| of the labels, m their mean
    if lo < v < hi:  # inside the scale: a failure costs at most max(v - lo, hi - v)
        reach = max(v - lo, hi - v)
        if reach < need_lo:
            return False, False, f"a failure costs at most {reach:g}, the printed MAE needs {need_lo:.3f}"
        ms = [lo, hi]  # the most permissive label means for the +CoT bound below
    else:  # at or beyond a scale end every label sits on one side of v: mean |y - v| = |m - v|
        sign = 1 if v <= lo else -1
        ms = [m for m in (v + sign * need_lo, v + sign * need_hi) if lo <= m <= hi]
        if not ms:
            return False, False, "the printed MAE needs a label mean off the scale"
    # +CoT: every error <= max(y - a, b - y) = (b - a)/2 + |y - c|, and mean |y - c| <= spread + |m - c|
    c_mid = (a + b) / 2
    cot_bound = max((b - a) / 2 + spread + abs(m - c_mid) for m in ms)
    cot_ok = cot_bound >= c.cot_mae - HALF_CENT
    label_means = "-".join(f"{m:.2f}" for m in sorted(ms))
    return True, cot_ok, (f"needs the failed windows' mean label {label_means}; +CoT can reach at most "
                          f"{cot_bound:.2f} (printed {c.cot_mae:.2f})")


def fill_rule_table(cell: PrintedCell | None = None) -> pd.DataFrame:
    """One row per candidate rule: does it give the printed MAE, and the printed +CoT MAE with answers parsed on
    the label scale (1-5) or on the prompt's printed range (0-5)?"""
    c = cell or diversityone_phia_cell()
    lo, hi = c.scale
    n_ok = c.n - c.n_fail
    rows = []
    # exclusion: the mean of n_ok integer errors is a multiple of 1/n_ok
    hits = [k / n_ok for k in range(0, n_ok * (hi - lo) + 1) if abs(k / n_ok - c.mae) < HALF_CENT]
    rows.append({"rule": "exclude (integer labels)", "fill": None, "mae": bool(hits), "cot_1_5": bool(hits),
                 "cot_0_5": bool(hits),
                 "why": f"the mean of {n_ok} integer errors is a multiple of 1/{n_ok}; "
                        + ("one rounds to the printed MAE" if hits else "none rounds to the printed MAE")})
    mid = (lo + hi) / 2
    for name, v in (("the low scale end", lo), ("the high scale end", hi), ("the midpoint", mid),
                    ("0, the low end of the prompt's '0 to 5'", 0), ("one above the scale", hi + 1)):
        ok, cot15, why = _fill_verdict(c, v, (lo, hi))
        _, cot05, _ = _fill_verdict(c, v, (0, hi))
        rows.append({"rule": f"fill at {name}", "fill": v, "mae": ok, "cot_1_5": ok and cot15,
                     "cot_0_5": ok and cot05, "why": why})
    # the mean predictor's value: a failure costs |y - m|, on average the mean predictor's own MAE
    need = ((c.mae - HALF_CENT) * c.n - n_ok * (hi - lo)) / c.n_fail
    rows.append({"rule": "fill at the mean predictor's value", "fill": None, "mae": False, "cot_1_5": False,
                 "cot_0_5": False, "why": f"a failure costs the mean predictor's {c.mean_predictor_mae:.2f} on "
                                          f"average, the printed MAE needs {need:.3f}"})
    # the far end (policy "worst"): a failure costs (hi - lo)/2 + |y - mid|, so mean |y - mid| must be small, and
    # then the labels cannot spread as far as the mean predictor's MAE says: mean |y - m| <= 2 mean |y - mid|
    far_hi = (c.mae + HALF_CENT) * c.n / c.n_fail - (hi - lo) / 2
    ok = 2 * far_hi >= c.mean_predictor_mae - HALF_CENT
    rows.append({"rule": "fill at the far scale end (worst)", "fill": None, "mae": ok, "cot_1_5": ok,
                 "cot_0_5": ok, "why": f"needs mean abs(y - {mid:g}) <= {far_hi:.3f}, which caps the labels' spread "
                                       f"at {2 * far_hi:.2f} < the mean predictor's {c.mean_predictor_mae:.2f}"})
    return pd.DataFrame(rows)


DOC_FILE_NAME = "scoring.md"
_START, _END = "<!-- fill-rules:start (balms docs scoring --write) -->", "<!-- fill-rules:end -->"


def _yes(v: bool) -> str:
    return "yes" if v else "**no**"


def render_table(table: pd.DataFrame | None = None) -> str:
    t = fill_rule_table() if table is None else table
    lines = ["| rule | gives the printed MAE 2.11 | and +CoT 3.15, answers 1-5 | and +CoT 3.15, answers 0-5 | why |",
             "|---|---|---|---|---|"]
    lines += [f"| {r.rule} | {_yes(r.mae)} | {_yes(r.cot_1_5)} | {_yes(r.cot_0_5)} | {r.why} |"
              for r in t.itertuples()]
    return "\n".join(lines)


def with_table(doc: str) -> str:
    """The doc with its generated block replaced by the current table."""
    if _START not in doc or _END not in doc:
        raise ValueError(f"docs/{DOC_FILE_NAME} lacks the markers {_START!r} ... {_END!r}")
    head, rest = doc.split(_START, 1)
    _, tail = rest.split(_END, 1)
    return f"{head}{_START}\n{render_table()}\n{_END}{tail}"
