"""`balms judge ...`: the grounding checker on a case file, and the LLM judge over a run's records.

    balms judge ground --case balms/resources/case_study_d1.json --json
    balms judge run --records runs/x.jsonl --model smollm2-135m --out runs/x.judge.jsonl
    balms judge prompt --style paper
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

from balms.data.schema import DataError
from balms.judges.case_file import load_case


def ground_case(case: dict) -> dict:
    """Per rationale: the grounding summary, the claims, and the paper's hand audit when the file has one."""
    from balms.judges.grounding import check_rationale

    n = len(next(iter(case["window"].values()))["values"])
    dates = None
    if case.get("window_start"):
        start = dt.date.fromisoformat(case["window_start"])
        dates = [start + dt.timedelta(days=i) for i in range(n)]
    out = {}
    for name, r in case["rationales"].items():
        rep = check_rationale(r["text"], case["window"], n_days=n, dates=dates)
        out[name] = {"prediction": r.get("prediction"), **rep.summary(),
                     "claims": [c.model_dump() for c in rep.claims]}
        if "paper_audit" in r:
            out[name]["paper_audit"] = r["paper_audit"]
    return out


def _fmt_claim(c: dict) -> str:
    vals = ", ".join(
        ("NaN" if v["value"] is None else format(v["value"], "g"))
        + (f" day {v['cited_days']}" if v["cited_days"] else "")
        + (f" (found on {v['found_days']})" if v["status"] == "wrong_day" else "")
        for v in c["values"])
    extra = f" trend {c['direction']} days {c['trend_days']}" if c["kind"] == "trend" else ""
    return f"    [{c['status']}] {c['kind']} {c['channel']}: {vals}{extra}"


def _ground(args) -> int:
    try:
        res = ground_case(load_case(Path(args.case)))
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(res, indent=1, default=str))
        return 0
    for name, r in res.items():
        print(f"{name}: {r['n_claims']} claims, {r['value_match']} values found, {r['n_day_cited']} cite a day: "
              f"{r['correct_day']} correct day, {r['wrong_day']} wrong day; value not found {r['value_not_found']}, "
              f"unverifiable {r['unverifiable']}; multi-day trends {r['n_trends']} (other changes {r['n_changes']})")
        for c in r["claims"]:
            print(_fmt_claim(c))
        if "paper_audit" in r:
            print(f"    paper: {json.dumps(r['paper_audit'])}")
    return 0


def _window_fn():
    """record -> Window, rebuilt from the dataset (tables loaded once per dataset)."""
    from balms.data.loading import load_dataset
    from balms.judges.llm_judge import window_for_record

    tables = {}

    def fn(rec):
        if rec.dataset not in tables:
            tables[rec.dataset] = load_dataset(rec.dataset)
        return window_for_record(tables, rec)

    return fn


def _run(args) -> int:
    from balms.judges.llm_judge import aggregate_judgements, result_of, verdict_key
    from balms.judges.loop import judge_into
    from balms.models.registry import DEFAULT_MODEL, get_backend
    from balms.records import PredictionRecord

    path = Path(args.records)
    recs = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            recs.append(PredictionRecord.model_validate_json(line))
        except ValueError as exc:
            raise DataError(path, f"not a PredictionRecord: {str(exc)[:200]}", row=i) from None
    if args.limit:
        recs = recs[: args.limit]
    judge_model = args.model or DEFAULT_MODEL
    backend = get_backend(judge_model, cache_mode=args.cache_mode)
    out = Path(args.out) if args.out else path.with_name(path.stem + ".judge.jsonl")
    opts = dict(max_tokens=args.max_tokens, justify=not args.scores_only, mode=args.mode,
                grounding_hint=args.grounding_hint)
    key = verdict_key(judge_model=judge_model, model_id=getattr(backend, "model_id", ""), **opts)
    # the loop notebook 07 uses: same window text, same request, verdicts resumable under the same key
    verdicts = judge_into(out, recs, _window_fn(), backend, judge_model=judge_model, key=key, **opts)
    agg = aggregate_judgements([result_of(v) for v in verdicts])
    summary = {k: (v.to_dict(orient="index") if hasattr(v, "to_dict") else v) for k, v in agg.items()}
    summary["out"] = str(out)
    print(json.dumps(summary, indent=1, default=str) if args.json else
          f"{agg['n']} rationales, {agg['n_scored']} scored, {agg['n_unscored']} unscored {agg['unscored_by_reason']}; "
          f"Tier-1 headline {agg['tier1_headline']:.3f} ({agg['tier1_headline_note']}); verdicts in {out}\n"
          f"{agg['tier1'].round(3)}\n{agg['tier2'].round(3)}")
    return 0


# what `balms judge prompt` fills the template with: the paper's case study D.1 (Qwen's rationale) or placeholders
EXAMPLE_INPUTS = dict(window_text="<the agent's input window: the data lines of its prompt>", gold="<gold label>",
                      predicted="<predicted label>", rationale="<the agent's rationale>")


def judge_prompt_text(style: str = "paper", justify: bool = True, case: bool = False) -> str:
    """The judge's messages as text. `style="paper"`: the paper's judge (one JSON answer for all twelve
    dimensions); `"geval"`: our per-dimension questions (the shared prefix once, then each question)."""
    from balms.judges import geval, rubric

    inputs = dict(EXAMPLE_INPUTS)
    if case:
        from balms.experiments.judging import case_study_items

        it = next(i for i in case_study_items() if i["name"] == "Qwen2.5-7B-Instruct")
        inputs = dict(window_text=it["window_text"], gold=it["gold"], predicted=it["predicted"],
                      rationale=it["rationale"])
    if style == "paper":
        msgs = rubric.build_messages(**inputs, justify=justify)
        return "\n".join(f"=== {m.role} ===\n{m.content}" for m in msgs) + "\n"
    prefix = geval.shared_prefix(**inputs)
    parts = [f"=== system ===\n{geval.SYSTEM_PROMPT}", f"=== user (shared prefix) ===\n{prefix}"]
    parts += [f"=== question {d} ===\n{geval.question(d)}" for d in rubric.DIMENSIONS]
    return "\n".join(parts) + "\n"


def _prompt(args) -> int:
    print(judge_prompt_text(args.style, justify=not args.scores_only, case=args.case), end="")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("judge", help="rationale grounding checker and LLM judge")
    sub = p.add_subparsers(dest="judge_command", required=True)
    g = sub.add_parser("ground", help="fact-check every numeric claim of the rationales in a case file")
    g.add_argument("--case", required=True, help="JSON shaped like balms/resources/case_study_d1.json")
    g.add_argument("--json", action="store_true", help="print JSON")
    g.set_defaults(func=_ground)
    r = sub.add_parser("run", help="LLM-judge every rationale of a run (records JSONL)")
    r.add_argument("--records", required=True)
    r.add_argument("--model", default=None, help="judge model registry name (default: the embedded model)")
    r.add_argument("--out", default=None, help="verdicts JSONL (default: <records>.judge.jsonl)")
    r.add_argument("--limit", type=int, default=0)
    r.add_argument("--max-tokens", type=int, default=1024, help="judge output budget (default 1024)")
    r.add_argument("--scores-only", action="store_true",
                   help="ask for bare scores, no justifications (about a fifth of the output tokens)")
    r.add_argument("--mode", default="paper", choices=["paper", "geval"],
                   help="paper: one greedy JSON answer (the paper's judge); geval: one question per dimension, "
                   "score = expectation over the judge's score tokens (needs token log-probabilities)")
    r.add_argument("--grounding-hint", action="store_true",
                   help="show the judge the grounding checker's findings (our extension, not the paper's)")
    r.add_argument("--cache-mode", default="rw", choices=["rw", "replay", "off"])
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=_run)
    q = sub.add_parser("prompt", help="print the judge prompt (the paper's Appendix D template, or geval's questions)")
    q.add_argument("--style", default="paper", choices=["paper", "geval"],
                   help="paper: the paper's judge prompt (judge_mode paper); geval: our per-dimension questions")
    q.add_argument("--scores-only", action="store_true",
                   help="the budget mode's prompt: bare scores, no justifications")
    q.add_argument("--case", action="store_true",
                   help="fill in the paper's case study D.1 (Qwen's rationale) instead of placeholders")
    q.set_defaults(func=_prompt)
