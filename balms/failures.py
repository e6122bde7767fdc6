"""PHIA failure taxonomy (the paper's Appendix B) over EVERY transcript, not a hand-picked sample.

F1 silent execution: an observation that shows nothing ("Code executed (no output)", status no_output).
F2 lost state: a NameError for a name that an earlier code block of the same episode assigned (the
   faithful executor runs each block in a fresh scope). Earlier blocks are parsed with `ast`.
F3 forced finish: the step budget ran out and the harness forced the final answer.
F4 magic-number thresholds: comparisons (`>`, `<`, `>=`, `<=`, `==`, `!=`) against numeric literals that
   are not derived from the user's data (directly, or through a name bound to a bare literal in the
   block, e.g. THRESHOLD = 7000). Skipped: trivial literals (0, 1, -1), literals the episode had
   already printed in an observation (read off the data), comparisons of time/size fields (hour, day,
   len(...), shape...), and names computed in the block (thr = daily.steps.median()).
F5 schema-blind aggregation: `.sum()` / `.mean()` (or np.sum/np.mean/sum) over a sub-day frame
   (`subday_df`, `subday` in older records, and names assigned from them) with no groupby/resample/pivot
   and no filter to one date.

`taxonomy_table` counts them per group (with `code_window_rate`, the share of episodes in which at least one
model-written block ran: without code, F1/F2/F4/F5 cannot occur); `failure_rates` gives events per window with
participant-bootstrap intervals for figures; `paper_rates` reads the paper's Appendix B.2 rates from the packaged
transcription (balms/resources/paper_tables/headline_figures.csv).

Detectors only read PredictionRecord transcripts: Step(kind="code"), Step(kind="observation",
meta={"status", "error_type"}), Step(kind="forced_finish").
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable

import pandas as pd

from balms.records import PredictionRecord, Step

FAILURES = ("F1", "F2", "F3", "F4", "F5")
NO_OUTPUT = "Code executed (no output)"
SUBDAY_FRAMES = ("subday_df", "subday")  # the current frame name, and the name in records before it
_TRIVIAL = {0, 1, -1}
_TIME_WORDS = {"hour", "hours", "minute", "minutes", "day", "days", "dayofweek", "weekday", "week", "weeks", "month",
               "year", "date", "dates", "time", "slot", "slot_index", "segment", "index", "idx", "len", "count",
               "size", "shape", "i", "j", "k", "n", "it", "iteration", "step_no"}
_NAME_ERR = re.compile(r"NameError: name '(\w+)' is not defined")
_NUM_IN_TEXT = re.compile(r"-?\d+(?:\.\d+)?")
_AGG_METHODS = {"sum", "mean"}
_AGG_FUNCS = {"sum", "mean", "nansum", "nanmean", "fsum"}
_GROUPERS = {"groupby", "resample", "pivot_table", "pivot", "rolling", "unstack"}


def _steps(record) -> list[Step]:
    if isinstance(record, PredictionRecord):
        return record.transcript
    tr = record["transcript"] if isinstance(record, dict) else record.transcript
    return [s if isinstance(s, Step) else Step.model_validate(s) for s in (tr or [])]


def _parse(code: str) -> ast.Module | None:
    try:
        return ast.parse(code)
    except (SyntaxError, ValueError):
        return None


def assigned_names(tree: ast.AST) -> set[str]:
    """Names a block binds at module scope: assignments, for/with targets, imports, defs."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update((a.asname or a.name).split(".")[0] for a in node.names)
    return out


def _loaded_names(tree: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _is_num(node) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool)


def _num_value(node) -> float:
    if isinstance(node, ast.UnaryOp):
        v = node.operand.value
        return -v if isinstance(node.op, ast.USub) else v
    return node.value


def _printed_numbers(texts: Iterable[str]) -> set[float]:
    out = set()
    for t in texts:
        for m in _NUM_IN_TEXT.findall(t or ""):
            v = float(m)
            out.update({v, round(v), round(v, 1), round(v, 2)})
    return out


def magic_thresholds(code: str, printed: set[float] | None = None) -> list[str]:
    """The comparisons of one block against literal constants not derived from data (F4 events)."""
    tree = _parse(code)
    if tree is None:
        return []
    printed = printed or set()
    # names bound to a bare literal in this block ("THRESHOLD = 7000") are literals too; a name bound
    # to anything computed (e.g. from the data) is not
    const_names: dict[str, ast.AST] = {}
    computed: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name) and _is_num(node.value):
                    const_names[t.id] = node.value
                elif isinstance(t, ast.Name):
                    computed.add(t.id)
    for name in computed:
        const_names.pop(name, None)

    def resolve_literal(o):
        """The literal behind an operand (itself, or the value of a name bound to a bare literal), else None."""
        if _is_num(o):
            return o
        if isinstance(o, ast.Name) and o.id in const_names:
            return const_names[o.id]
        return None

    events = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        operands = [resolve_literal(o) or o for o in (node.left, *node.comparators)]
        if not any(isinstance(op, (ast.Gt, ast.GtE, ast.Lt, ast.LtE, ast.Eq, ast.NotEq)) for op in node.ops):
            continue
        lits = [o for o in operands if _is_num(o)]
        others = [o for o in operands if not _is_num(o)]
        if not lits or not others:
            continue
        other_src = " ".join(ast.unparse(o) for o in others)
        if {w.lower() for w in re.findall(r"[A-Za-z_]+", other_src)} & _TIME_WORDS:
            continue  # time/size fields: hours, day numbers, len(...), loop counters
        for literal in lits:
            v = _num_value(literal)
            if v in _TRIVIAL or v in printed or round(v, 2) in printed:
                continue
            events.append(ast.unparse(node))
            break
    return events


def _root_name(node) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _chain_methods(node) -> list[str]:
    names = []
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        if isinstance(node, ast.Attribute):
            names.append(node.attr)
        node = node.func if isinstance(node, ast.Call) else node.value
    return names


def _filters_one_date(node) -> bool:
    src = ast.unparse(node)
    return bool(re.search(r"date\W*\]?\s*==|==\s*[^=]*date|\.loc\[\s*['\"]\d{4}-\d{2}-\d{2}", src))


def schema_blind_aggregations(code: str, subday_frames: Iterable[str] = SUBDAY_FRAMES) -> list[str]:
    """The sum/mean calls of one block over sub-day rows with no per-day grouping (F5 events)."""
    tree = _parse(code)
    if tree is None:
        return []
    sub = set(subday_frames)
    for node in ast.walk(tree):  # aliases: x = subday[...] / subday.query(...) without grouping
        if isinstance(node, ast.Assign) and _root_name(node.value) in sub \
                and not _GROUPERS & set(_chain_methods(node.value)):
            sub.update(t.id for t in node.targets if isinstance(t, ast.Name))
    events = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        target = None
        if (isinstance(node.func, ast.Name) and node.func.id in _AGG_FUNCS) or \
                (isinstance(node.func, ast.Attribute) and node.func.attr in _AGG_FUNCS
                 and isinstance(node.func.value, ast.Name)
                 and node.func.value.id in ("np", "numpy", "math", "statistics")):
            target = node.args[0] if node.args else None  # np.mean(x), sum(x)
        elif isinstance(node.func, ast.Attribute) and node.func.attr in _AGG_METHODS:
            target = node.func.value  # x.mean()
        if target is None or _root_name(target) not in sub:
            continue
        if _GROUPERS & set(_chain_methods(target)) or _filters_one_date(target):
            continue
        events.append(ast.unparse(node))
    return events


def classify_trace(record, *, subday_frames: Iterable[str] = SUBDAY_FRAMES) -> dict[str, int]:
    """Counts of F1-F5 events in one transcript (F3 is 0 or 1), plus `n_code_blocks` and
    `n_unparseable_blocks` (blocks `ast` cannot read, which F2/F4/F5 cannot inspect)."""
    steps = _steps(record)
    out = {f: 0 for f in FAILURES}
    out.update(n_code_blocks=0, n_unparseable_blocks=0, name_errors=0)
    earlier_assigned: set[str] = set()
    observations: list[str] = []
    last_tree = None
    for st in steps:
        if st.kind == "code":
            last_tree = _parse(st.content)
            out["n_code_blocks"] += 1
            if last_tree is None:
                out["n_unparseable_blocks"] += 1
            out["F4"] += len(magic_thresholds(st.content, _printed_numbers(observations)))
            out["F5"] += len(schema_blind_aggregations(st.content, subday_frames))
        elif st.kind == "observation":
            status = st.meta.get("status")
            if status == "no_output" or st.content.strip().startswith(NO_OUTPUT):
                out["F1"] += 1
            if st.meta.get("error_type") == "NameError" or "NameError" in st.content:
                out["name_errors"] += 1
                m = _NAME_ERR.search(st.content)
                missing = {m.group(1)} if m else (
                    (_loaded_names(last_tree) - assigned_names(last_tree)) if last_tree is not None else set())
                if missing & earlier_assigned:
                    out["F2"] += 1
            observations.append(st.content)
            if last_tree is not None:  # names of this block exist for later blocks only once it ran
                earlier_assigned |= assigned_names(last_tree)
            last_tree = None
        elif st.kind == "forced_finish":
            out["F3"] = 1
    if last_tree is not None:
        earlier_assigned |= assigned_names(last_tree)
    return out


def _meta_of(record) -> dict:
    if isinstance(record, PredictionRecord):
        d = record.model_dump(exclude={"transcript"})
    elif isinstance(record, dict):
        d = {k: v for k, v in record.items() if k != "transcript"}
    else:
        d = {k: v for k, v in record._asdict().items() if k != "transcript"}
    opts = d.get("options") or {}
    if d.get("executor") is None or (isinstance(d.get("executor"), float) and pd.isna(d["executor"])):
        d["executor"] = opts.get("executor") if isinstance(opts, dict) else None
    return d


def trace_table(records, *, subday_frames: Iterable[str] = SUBDAY_FRAMES) -> pd.DataFrame:
    """One row per record: its ids and F1-F5 counts."""
    if isinstance(records, pd.DataFrame):
        if "transcript" not in records.columns:
            raise ValueError("records frame has no 'transcript' column (experiments.run(..., keep_transcript=True))")
        rows_in = records.to_dict("records")
    else:
        rows_in = list(records)
    rows = []
    for r in rows_in:
        meta = _meta_of(r)
        rows.append({k: meta.get(k) for k in ("sample_id", "dataset", "user", "system", "model", "executor", "cot")}
                    | classify_trace(r, subday_frames=subday_frames))
    return pd.DataFrame(rows)


def taxonomy_table(records, by: Iterable[str] = ("dataset", "model", "executor"), *,
                   subday_frames: Iterable[str] = SUBDAY_FRAMES) -> pd.DataFrame:
    """Per group: n windows, for each failure the total events, events per window (`F1_per_window`) and
    the share of windows with at least one event (`F1_window_rate`)."""
    tt = trace_table(records, subday_frames=subday_frames)
    by = list(by)
    rows = []
    for key, g in tt.groupby(by, dropna=False, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        row = dict(zip(by, key, strict=True)) | {"n_windows": len(g), "n_code_blocks": int(g["n_code_blocks"].sum()),
                                     "n_unparseable_blocks": int(g["n_unparseable_blocks"].sum()),
                                     # share of episodes in which the sandbox ran at least one block the model wrote
                                     "code_window_rate": float((g["n_code_blocks"] > 0).mean())}
        for f in FAILURES:
            row[f"{f}_events"] = int(g[f].sum())
            row[f"{f}_per_window"] = float(g[f].mean())
            row[f"{f}_window_rate"] = float((g[f] > 0).mean())
        rows.append(row)
    return pd.DataFrame(rows)


def failure_rates(records, by: Iterable[str] = ("dataset", "model", "executor"), *, n_boot: int = 2000, seed: int = 0,
                  subday_frames: Iterable[str] = SUBDAY_FRAMES) -> pd.DataFrame:
    """Long format for figures: per group and failure, events per window with a 95% participant-bootstrap
    interval (`per_window`, `ci_low`, `ci_high`) and the number of windows."""
    from balms.metrics import mean_ci

    tt = trace_table(records, subday_frames=subday_frames)
    if "user" not in tt:
        raise ValueError("records have no 'user' field: the interval resamples participants")
    by = list(by)
    rows = []
    for key, g in tt.groupby(by, dropna=False, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        for f in FAILURES:
            m, lo, hi = mean_ci(g[f].to_numpy(dtype=float), g["user"].to_numpy(), n_boot=n_boot, seed=seed)
            rows.append(dict(zip(by, key, strict=True)) | {"failure": f, "per_window": m, "ci_low": lo, "ci_high": hi,
                                                           "n_windows": len(g)})
    return pd.DataFrame(rows)


# The paper's Appendix B.2 numbers (balms/resources/paper_tables/headline_figures.csv): which claim is which rate
_PAPER_CLAIMS = {
    "PHIA empty observations per traced window GLOBEM": ("globem", "F1"),
    "PHIA empty observations per traced window PMData": ("pmdata", "F1"),
    "PHIA force-finished traced PMData windows": ("pmdata", "F3"),
}


def paper_rates() -> pd.DataFrame:
    """The paper's per-window failure rates (Qwen2.5-14B, traced windows): dataset, failure, per_window, value as
    printed. "2.0 (168 events / 82 windows)" is 2.0 events per window; "8 of 10" (F3, at most one event per
    window) is 0.8. Read from the packaged transcription, so a figure marks what the CSV says."""
    from balms.paper import paper_table

    head = paper_table("headline_figures")
    rows = []
    for claim, (dataset, failure) in _PAPER_CLAIMS.items():
        got = head.loc[head["claim"] == claim, "value"]
        if got.empty:
            raise ValueError(f"headline_figures.csv: no row with claim {claim!r}")
        text = str(got.iloc[0])
        m = re.match(r"\s*(\d+(?:\.\d+)?)(?:\s+of\s+(\d+))?", text)
        if not m:
            raise ValueError(f"headline_figures.csv: claim {claim!r} has no leading number: {text!r}")
        value = float(m.group(1)) / (float(m.group(2)) if m.group(2) else 1.0)
        rows.append({"dataset": dataset, "failure": failure, "per_window": value, "printed": text})
    return pd.DataFrame(rows)
