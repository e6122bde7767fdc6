"""The LLM judge: one rationale in, a validated two-tier score (or an explicit "unscored") out.

Why so defensive: small judge models wrap JSON in prose or code fences, use single quotes, leave
trailing commas or give out-of-range scores. We decode greedily with a JSON schema where the backend
supports it, extract JSON robustly, validate every score, send ONE repair message naming the error,
and otherwise return status="unscored" with the reason. A score is never invented or clipped.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

import pandas as pd
from pydantic import BaseModel, Field

from balms.judges.rubric import (
    DIMENSIONS,
    TIER1,
    TIER1_VALUES,
    TIER2,
    TIER2_RANGE,
    build_messages,
    judge_json_schema,
    repair_message,
)
from balms.models.base import Backend, BackendError, GenParams, Message
from balms.models.retrying import with_retries

UnscoredCode = Literal["empty_rationale", "backend_error", "invalid_output", "no_logprobs", "no_score_tokens"]
JudgeMode = Literal["paper", "geval"]
JUDGE_MODES: tuple[str, ...] = ("paper", "geval")


class JudgeOutputError(ValueError):
    """The judge's text could not be turned into a valid, in-range score set."""


class JudgeResult(BaseModel):
    tier1: dict[str, int | None] = Field(default_factory=lambda: {d: None for d in TIER1})
    # integers in "paper" mode; in "geval" mode the expectation over the digits 1-5 (a float in [1, 5])
    tier2: dict[str, int | float | None] = Field(default_factory=lambda: {d: None for d in TIER2})
    justifications: dict[str, str] = Field(default_factory=dict)
    justify: bool = True  # False: the scores-only budget mode (no justifications asked)
    mode: JudgeMode = "paper"  # "paper": one greedy JSON; "geval": one question per dimension, see geval.py
    grounding_hint: bool = False  # the grounding checker's findings were shown to the judge (our extension)
    probs: dict[str, dict[str, float]] = Field(default_factory=dict)  # geval: answer distribution per dimension
    prob_mass: dict[str, float] = Field(default_factory=dict)  # geval: raw probability of the answer tokens
    status: Literal["scored", "unscored"] = "unscored"
    unscored_code: UnscoredCode | None = None
    unscored_reason: str | None = None
    raw_outputs: list[str] = Field(default_factory=list)  # every judge completion, in order
    response_keys: list[str] = Field(default_factory=list)  # their response-cache keys (what `balms bundle` packs)
    attempts: int = 0  # model calls made (1, or 2 with the repair retry)
    model_id: str = ""
    meta: dict[str, Any] = Field(default_factory=dict)  # sample_id, dataset, system, model, ... of the record

    @property
    def scored(self) -> bool:
        return self.status == "scored"


# ---------------------------------------------------------------- JSON extraction and validation

_THINK = re.compile(r"<think>.*?</think>", re.S | re.I)
_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.S)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")


def _balanced_objects(text: str) -> list[str]:
    """Every top-level {...} substring, respecting quoted strings (single or double)."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text[i] != "{":
            i += 1
            continue
        depth, j, quote = 0, i, None
        while j < n:
            c = text[j]
            if quote:
                if c == "\\":
                    j += 1
                elif c == quote:
                    quote = None
            elif c in "\"'" and not (c == "'" and j > 0 and text[j - 1].isalnum()):
                quote = c
            elif c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    out.append(text[i : j + 1])
                    break
            j += 1
        else:  # unbalanced: keep the tail, the repair step may still parse it
            out.append(text[i:])
            break
        i = j + 1
    return out


def _loads_lenient(s: str) -> Any:
    s = s.strip()
    try:
        return json.loads(s)
    except json.JSONDecodeError:
        pass
    s2 = _TRAILING_COMMA.sub(r"\1", s)
    try:
        return json.loads(s2)
    except json.JSONDecodeError:
        pass
    # Python-literal style: single quotes, None/True/False; map JSON literals outside strings.
    py = re.sub(r"\bnull\b", "None", s2)
    py = re.sub(r"\btrue\b", "True", py)
    py = re.sub(r"\bfalse\b", "False", py)
    return ast.literal_eval(py)  # raises ValueError/SyntaxError


def extract_json(text: str) -> dict:
    """The first JSON object in a model's text: fenced blocks first, then balanced braces.

    Tolerates prose around the object, ``` fences, single quotes, trailing commas, Python literals.
    """
    body = _THINK.sub("", text or "")
    candidates = [m.group(1) for m in _FENCE.finditer(body)]
    candidates += _balanced_objects(body)
    errors = []
    for cand in candidates:
        for inner in [cand, *(_balanced_objects(cand) if not cand.strip().startswith("{") else [])]:
            try:
                obj = _loads_lenient(inner)
            except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
                errors.append(f"{type(exc).__name__}: {str(exc)[:80]}")
                continue
            if isinstance(obj, dict):
                return obj
            errors.append(f"found {type(obj).__name__}, expected a JSON object")
    if not candidates:
        raise JudgeOutputError("no JSON object found in the judge output")
    raise JudgeOutputError("no parseable JSON object in the judge output (" + "; ".join(errors[:3]) + ")")


_NULLS = {"", "null", "none", "n/a", "na", "not invoked", "nan"}
_SCORE_KEYS = ("score", "value", "rating")
_JUST_KEYS = ("justification", "reason", "explanation", "rationale")


def _coerce_score(dim: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise JudgeOutputError(f"{dim}: score {value!r} is a boolean, expected an integer or null")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if value.is_integer():
            return int(value)
        raise JudgeOutputError(f"{dim}: score {value} is not an integer")
    if isinstance(value, str):
        s = value.strip().lower()
        if s in _NULLS:
            return None
        if re.fullmatch(r"[-+]?\d+(\.0+)?", s):
            return int(float(s))
        raise JudgeOutputError(f"{dim}: score {value!r} is not an integer or null")
    raise JudgeOutputError(f"{dim}: score of type {type(value).__name__} is not an integer or null")


def _flatten(obj: dict) -> dict:
    """Accept {"tier1": {...}, "tier2": {...}} as well as the flat shape; keys matched case-insensitively."""
    flat: dict = {}
    for k, v in obj.items():
        key = str(k).strip().lower()
        if key in ("tier1", "tier_1", "tier 1", "tier2", "tier_2", "tier 2") and isinstance(v, dict):
            flat.update({str(kk).strip().lower(): vv for kk, vv in v.items()})
        else:
            flat[key] = v
    return flat


def validate_judgement(obj: dict) -> tuple[dict[str, int | None], dict[str, int | None], dict[str, str]]:
    """Check every dimension is present and in range; return (tier1, tier2, justifications)."""
    flat = _flatten(obj)
    missing = [d for d in DIMENSIONS if d not in flat]
    if missing:
        raise JudgeOutputError(f"missing dimension(s): {', '.join(missing)}")
    scores, justs = {}, {}
    for d in DIMENSIONS:
        v = flat[d]
        if isinstance(v, dict):
            lv = {str(k).lower(): x for k, x in v.items()}
            skey = next((k for k in _SCORE_KEYS if k in lv), None)
            if skey is None:
                raise JudgeOutputError(f"{d}: no 'score' field")
            scores[d] = _coerce_score(d, lv[skey])
            justs[d] = str(next((lv[k] for k in _JUST_KEYS if k in lv and lv[k] is not None), "")).strip()
        else:
            scores[d] = _coerce_score(d, v)
            justs[d] = ""
    for d in TIER1:
        if scores[d] is not None and scores[d] not in TIER1_VALUES:
            raise JudgeOutputError(f"{d}: Tier-1 score {scores[d]} is not 0, 1 or null")
    lo, hi = TIER2_RANGE
    for d in TIER2:
        if scores[d] is not None and not lo <= scores[d] <= hi:
            raise JudgeOutputError(f"{d}: Tier-2 score {scores[d]} is outside {lo}-{hi}")
    return {d: scores[d] for d in TIER1}, {d: scores[d] for d in TIER2}, justs


def parse_judgement(text: str) -> tuple[dict, dict, dict]:
    return validate_judgement(extract_json(text))


# ---------------------------------------------------------------- judging


# Extra attempts for transient errors when the judge backend has no retry layer of its own. A backend from
# `get_backend` for a remote model already retries; stacking a second layer would multiply the attempts.
JUDGE_RETRIES = 2


def judge_rationale(
    backend: Backend,
    *,
    window_text: str,
    gold: int,
    predicted: int | None,
    rationale: str,
    scale: tuple[int, int],
    target: str,
    use_schema: bool = True,
    max_tokens: int = 1024,
    justify: bool = True,
    meta: dict | None = None,
    mode: str = "paper",
    grounding_hint: bool = False,
    window: Any = None,
) -> JudgeResult:
    """Grade one rationale (`target` and `scale` are recorded in the verdict's meta; the paper's judge prompt does
    not name them). `mode="paper"`: the paper's judge, one greedy JSON answer, schema-constrained when
    `use_schema` and supported. `mode="geval"`: one question per dimension scored from the judge's token
    distribution (balms.judges.geval; `max_tokens`, `justify` and `use_schema` do not apply). With
    `grounding_hint` (our extension) the judge also sees the grounding checker's findings on `window` (a Window
    or a case-file mapping; required then).

    Returns status="scored" with validated scores, or status="unscored" with `unscored_code` and
    `unscored_reason` (empty rationale, backend error, output still invalid after one repair, or in geval mode
    no log-probabilities / no answer token in them).
    """
    if mode not in JUDGE_MODES:
        raise ValueError(f"unknown judge mode {mode!r}; known: {', '.join(JUDGE_MODES)}")
    model_id = getattr(backend, "model_id", "")
    backend = with_retries(backend, retries=JUDGE_RETRIES)  # exactly one retry layer (the backend's or ours)
    res = JudgeResult(model_id=model_id, justify=justify and mode == "paper", mode=mode,
                      grounding_hint=grounding_hint, meta={"target": target, "scale": list(scale), **(meta or {})})
    if not (rationale or "").strip():
        res.unscored_code, res.unscored_reason = "empty_rationale", "the rationale is empty; nothing to judge"
        return res
    hint = None
    if grounding_hint:
        from balms.judges.geval import hint_for

        hint = hint_for(rationale, window)
    if mode == "geval":
        from balms.judges.geval import judge_geval, shared_prefix

        prefix = shared_prefix(window_text=window_text, gold=gold, predicted=predicted, rationale=rationale)
        return judge_geval(backend, res, prefix=prefix, hint=hint)
    params = GenParams(temperature=0.0, max_tokens=max_tokens, seed=0,
                       json_schema=judge_json_schema(justify) if use_schema else None)
    messages = build_messages(window_text=window_text, gold=gold, predicted=predicted,
                              rationale=rationale, justify=justify, hint=hint)
    error = ""
    for attempt in (1, 2):
        try:
            comp = backend.generate(messages, params)
        except BackendError as exc:
            if params.json_schema is not None and not exc.transient:
                # the backend refuses the schema: fall back to free text + robust extraction
                res.meta["schema_refused"] = str(exc)[:200]
                params = dataclasses.replace(params, json_schema=None)
                try:
                    comp = backend.generate(messages, params)
                except BackendError as exc2:
                    exc = exc2
                    comp = None
            else:
                comp = None
            if comp is None:
                res.unscored_code = "backend_error"
                res.unscored_reason = f"backend error on attempt {attempt}: {exc}"
                return res
        res.attempts = attempt
        res.model_id = comp.model_id or model_id
        res.raw_outputs.append(comp.text)
        if comp.cache_key:
            res.response_keys.append(comp.cache_key)
        try:
            res.tier1, res.tier2, res.justifications = parse_judgement(comp.text)
        except JudgeOutputError as exc:
            error = str(exc)
            if comp.finish_reason == "length":
                error += f" (the output was cut at max_tokens={max_tokens})"
            messages = [*messages, Message("assistant", comp.text), repair_message(error, justify)]
            continue
        res.status = "scored"
        return res
    res.unscored_code = "invalid_output"
    res.unscored_reason = f"judge output still invalid after one repair retry: {error}"
    return res


WindowSource = Callable[[Any], Any] | Mapping[str, Any]


# What the judge is shown as its input (1): "agent" = the view the record's agent had (RAG's retrieved days and query
# day, RAPTOR's records, PHIA's frames; ours, the demo's); "lookback" = the paper's Appendix D: "per-feature arrays
# over the look-back window", the same for every system (the paper profile)
JUDGE_WINDOWS = ("agent", "lookback")


def check_judge_window(view: str) -> str:
    if view not in JUDGE_WINDOWS:
        raise ValueError(f"judge window must be one of {JUDGE_WINDOWS}, got {view!r}")
    return view


def window_for_record(tables_by_dataset: Mapping[str, Any], rec, view: str = "agent"):
    """Rebuild the Window a record's agent saw: same sample (window ends the day before the target day
    unless the record's options say `include_target_day`), and the channel and context resolution the
    agents use (`balms.data.channels`), then, with `view="agent"`, the view the record's options describe
    (`agent_view`: RAG's retrieved days + query day, RAPTOR's retrieved records + query day, PHIA's full-record
    frames), so the judge sees exactly what the agent's prompt held; with `view="lookback"` the look-back window
    itself (the paper's judge input)."""
    import datetime as dt

    from balms.data.channels import agent_view, get_window, option_channels, prompt_channels
    from balms.data.samples import sample_from_row

    if rec.dataset not in tables_by_dataset:
        raise KeyError(f"record {rec.sample_id}: no tables for dataset {rec.dataset!r}")
    t = tables_by_dataset[rec.dataset]
    target = dt.date.fromisoformat(rec.target_date)
    end = target if rec.options.get("include_target_day") else target - dt.timedelta(days=1)
    sample = sample_from_row({"dataset": rec.dataset, "user": rec.user, "target_date": target, "label": rec.label,
                              "lookback": rec.lookback, "window_end": end,
                              "window_start": end - dt.timedelta(days=rec.lookback - 1), "source": rec.source})
    shown = rec.options.get("prompt_channels")  # recorded by the prompt agents: exactly what the prompt showed
    if shown:
        chans = [t.channel(n) for n in shown]
    else:  # PHIA and older records: the option as recorded, under the style recorded (none = corrected)
        chans = prompt_channels(t, option_channels(rec.options.get("channels")), rec.options.get("style", "corrected"))
    window = get_window(t, sample, context=rec.options.get("context", True), channels=chans)
    return window if check_judge_window(view) == "lookback" else agent_view(t, window, rec.options)


def judge_window_text(window, rec, view: str = "agent") -> str:
    """The judge's input (1) for a record: with `view="agent"` the data lines of the prompt its agent was given,
    rendered by the code that rendered that prompt (`balms.data.agent_input`) from the view `window_for_record`
    rebuilt; with `view="lookback"` the look-back window as the paper's template renders it (profile, one
    per-feature array per channel, the same-day self-report), whatever the system."""
    from balms.data.agent_input import input_text

    if check_judge_window(view) == "lookback":
        return input_text(window, {"style": "paper"})
    return input_text(window, rec.options)


def _window_for(record, source, view: str = "agent"):
    """The record's window from `source` (tables: rebuilt under `view`; a callable or mapping: as given)."""
    from balms.data.schema import DatasetTables

    if isinstance(source, DatasetTables):
        return window_for_record({source.name: source}, record, view)
    if callable(source):
        return source(record)
    if source and all(isinstance(v, DatasetTables) for v in source.values()):
        return window_for_record(source, record, view)
    if record.sample_id not in source:
        raise KeyError(f"no window for sample {record.sample_id!r} in the window mapping")
    return source[record.sample_id]


def judge_record(rec, tables_or_window_fn, backend: Backend, *, window: str = "agent", **kwargs) -> JudgeResult:
    """Judge one record's rationale against the window its agent saw. `tables_or_window_fn` is one of: a
    DatasetTables or a mapping dataset -> DatasetTables (windows rebuilt by `window_for_record`); a callable
    `record -> Window | str`; a mapping sample_id -> Window | str (text is used as given; the target and scale then
    come from the dataset's spec, `judge_target` and `scale`). The one path from a record to a judge request
    (notebook 07 and `balms judge run`).
    `window`: the judge's input (1), JUDGE_WINDOWS ("agent": the agent's own view; "lookback": the paper's).
    """
    from balms.data.schema import Window
    from balms.records import PredictionRecord

    rec = rec if isinstance(rec, PredictionRecord) else PredictionRecord.model_validate(rec)
    win = _window_for(rec, tables_or_window_fn, window)
    if isinstance(win, Window):
        text = judge_window_text(win, rec, window)
        target, scale = win.target.label, (win.target.scale_min, win.target.scale_max)
    elif isinstance(win, str):
        from balms.data.registry import dataset_names, get_dataset

        if rec.dataset not in dataset_names() or not get_dataset(rec.dataset).judge_target:
            raise KeyError(f"record {rec.sample_id}: dataset {rec.dataset!r} declares no judge_target; pass Windows "
                           "instead of text")
        target, scale = get_dataset(rec.dataset).judge_target, get_dataset(rec.dataset).scale
        text = win
    else:
        raise TypeError(f"window source returned {type(win).__name__} for {rec.sample_id}; expected Window or str")
    meta = {"sample_id": rec.sample_id, "dataset": rec.dataset, "user": rec.user, "system": rec.system,
            "model": rec.model, "cot": rec.cot, "executor": rec.options.get("executor"),
            "label": rec.label, "prediction": rec.prediction}
    return judge_rationale(backend, window_text=text, gold=rec.label, predicted=rec.prediction,
                           rationale=rec.rationale, scale=scale, target=target, meta=meta,
                           window=win if isinstance(win, Window) else None, **kwargs)


def judge_records(records: Iterable, tables_or_window_fn, backend: Backend, **kwargs) -> list[JudgeResult]:
    """`judge_record` over records (PredictionRecords or their dicts), one retry layer for all of them."""
    backend = with_retries(backend, retries=JUDGE_RETRIES)  # one layer for all records, not one per call
    return [judge_record(rec, tables_or_window_fn, backend, **kwargs) for rec in records]


def verdict_key(*, judge_model: str, model_id: str, justify: bool, max_tokens: int, mode: str,
                grounding_hint: bool, window: str = "agent") -> str:
    """A stored verdict is reused only when judge model, mode, grounding hint, budget, the judge's window and judge
    code are unchanged (the window enters the key only when not the agent's view: earlier keys stay valid)."""
    from balms.cellspec import digest, judge_code_fingerprint
    from balms.models.registry import backend_module

    code = judge_code_fingerprint(backend_module(judge_model))
    return digest({"judge_model": judge_model, "model_id": model_id, "justify": justify, "max_tokens": max_tokens,
                   "mode": mode, "grounding_hint": grounding_hint, "code": code,
                   **({"window": check_judge_window(window)} if window != "agent" else {})})


def result_of(verdict: dict) -> JudgeResult:
    """A stored verdict (a line of balms.judges.loop's verdict files) back as a JudgeResult."""
    return JudgeResult.model_validate({k: v for k, v in verdict.items()
                                       if k not in ("sample_id", "judge_model", "judge_key")})


# ---------------------------------------------------------------- aggregation (METHOD.md, "Judge")


def aggregate_judgements(results: Iterable[JudgeResult]) -> dict:
    """Aggregate a slice exactly as the paper: over the N *scored* results of the slice,

    Tier 1, per dimension: invocation rate = invoked/N, conditional accuracy = correct/invoked (NaN when
    nothing was invoked), coverage = invoked-and-correct/N. Headline = macro average of conditional
    accuracy over the dimensions where it is defined (`tier1_headline_dims` says which; NaN if none).
    Tier 2: mean over non-null scores. Unscored results are counted (`n_unscored`, by reason), never
    folded into any rate.
    """
    results = list(results)
    scored = [r for r in results if r.scored]
    n = len(scored)
    t1_rows = {}
    for d in TIER1:
        vals = [r.tier1.get(d) for r in scored]
        invoked = sum(v is not None for v in vals)
        correct = sum(v == 1 for v in vals)
        t1_rows[d] = {
            "invoked": invoked,
            "correct": correct,
            "invocation_rate": invoked / n if n else math.nan,
            "conditional_accuracy": correct / invoked if invoked else math.nan,
            "coverage": correct / n if n else math.nan,
        }
    tier1 = pd.DataFrame.from_dict(t1_rows, orient="index")
    defined = [d for d in TIER1 if not math.isnan(t1_rows[d]["conditional_accuracy"])]
    headline = float(pd.Series([t1_rows[d]["conditional_accuracy"] for d in defined]).mean()) if defined else math.nan
    t2_rows = {}
    for d in TIER2:
        vals = [r.tier2.get(d) for r in scored if r.tier2.get(d) is not None]
        t2_rows[d] = {"mean": float(pd.Series(vals, dtype=float).mean()) if vals else math.nan, "n": len(vals)}
    tier2 = pd.DataFrame.from_dict(t2_rows, orient="index")
    reasons = Counter(r.unscored_code or "unknown" for r in results if not r.scored)
    return {
        "n": len(results),
        "n_scored": n,
        "n_unscored": len(results) - n,
        "unscored_by_reason": dict(reasons),
        "tier1": tier1,
        "tier1_headline": headline,
        "tier1_headline_dims": defined,
        "tier1_headline_note": f"macro average of conditional accuracy over the {len(defined)} of {len(TIER1)} "
        "Tier-1 dimensions invoked at least once",
        "tier2": tier2,
    }


def general_quality(overall: float) -> float:
    """The paper's GQ (Figure 4): the Tier-2 overall Likert score rescaled to [0, 1], (overall - 1) / 4."""
    lo, hi = TIER2_RANGE
    return (overall - lo) / (hi - lo)


def judgement_table(results: Iterable[JudgeResult],
                    by: tuple[str, ...] = ("dataset", "system", "model")) -> pd.DataFrame:
    """One row per group of `result.meta[by]`: counts, Tier-1 rates, headline, Tier-2 means, GQ."""
    results = list(results)
    groups: dict[tuple, list[JudgeResult]] = {}
    for r in results:
        groups.setdefault(tuple(r.meta.get(k) for k in by), []).append(r)
    rows = []
    for key, rs in groups.items():
        agg = aggregate_judgements(rs)
        row = dict(zip(by, key, strict=True))
        row.update(n=agg["n"], n_scored=agg["n_scored"], n_unscored=agg["n_unscored"])
        for d, r in agg["tier1"].iterrows():
            row[f"{d}_invocation"] = r["invocation_rate"]
            row[f"{d}_cond_acc"] = r["conditional_accuracy"]
            row[f"{d}_coverage"] = r["coverage"]
        row["tier1_headline"] = agg["tier1_headline"]
        row["tier1_headline_n_dims"] = len(agg["tier1_headline_dims"])
        for d, r in agg["tier2"].iterrows():
            row[d] = r["mean"]
        row["gq"] = general_quality(row["overall"])
        rows.append(row)
    return pd.DataFrame(rows)
