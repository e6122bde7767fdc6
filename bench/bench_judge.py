"""Can the judge tell rationales apart on a CPU? Judge modes x embedded models on case study D.1 and a few more.

Rationale set (all on real windows):
- D.1: the paper's two rationales for one GLOBEM window (Qwen mis-attributes 2 of 4 claims to the wrong day,
  Claude none; balms/resources/case_study_d1.json).
- SYNTHETIC perturbations of D.1 (ours, labelled "syn:"): Claude's with one day swapped, Claude's with one value
  inflated, Qwen's with its two wrong days corrected, a vague one with no evidence, an alarmist one.
- real: Health-LLM CoT rationales written by qwen2.5-coder-0.5b on the first demo samples of GLOBEM and PMData
  (agent calls go through the response cache; only the judge is timed).

Per (model, judge config): D.1 evidence grounding and overall for both paper rationales, the number of distinct
overall values over the set (rounded to 2 decimals), and seconds per rationale, wall and process CPU (the
machine is shared; CPU seconds / threads is what an idle machine would take). The judge runs uncached
(`--cache-mode off`) so the timing is real.

    python bench/bench_judge.py [--models qwen2.5-coder-0.5b qwen2.5-coder-1.5b] \
        [--configs paper geval geval+hint] [--set d1|all] [--real 2] [--out bench/judge.json]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# name -> judge_rationale keyword arguments ("paper" = the demo's current scores-only greedy JSON)
CONFIGS = {
    "paper": dict(mode="paper", justify=False, max_tokens=160),
    "paper+justify": dict(mode="paper", justify=True, max_tokens=1024),
    "paper+hint": dict(mode="paper", justify=False, max_tokens=160, grounding_hint=True),
    "geval": dict(mode="geval"),
    "geval+hint": dict(mode="geval", grounding_hint=True),
}


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def d1_items() -> list[dict]:
    from balms.experiments.judging import case_study_items

    return [dict(it, name=f"d1:{it['name'].split('-')[0]}") for it in case_study_items()]


def synthetic_items(d1: list[dict]) -> list[dict]:
    """Perturbations of D.1 with a known effect on grounding (SYNTHETIC, made here, not model outputs)."""
    qwen, claude = d1[0], d1[1]
    cq, cc = qwen["rationale"], claude["rationale"]
    edits = {
        "syn:claude_day_swapped": (claude, cc.replace("days 3, 10, and 11", "days 5, 10, and 11")),
        "syn:claude_value_inflated": (claude, cc.replace("(920, NaN, NaN)", "(9200, NaN, NaN)")),
        "syn:qwen_days_fixed": (qwen, cq.replace("lower on day 2 (139", "lower on day 3 (139")
                                .replace("on day 10 (334.202", "on day 12 (334.202")),
        "syn:vague": (qwen, "The person seems to be somewhat anxious based on the data. Their behaviour looks "
                            "different from usual, so anxiety is probably high."),
        "syn:alarmist": (claude, cc.split(". ")[0] + ". These numbers prove a severe anxiety disorder; the user "
                                 "must start medication immediately and is clearly unstable."),
    }
    out = []
    for name, (src, text) in edits.items():
        assert text != src["rationale"], f"{name}: the perturbation did not apply"
        out.append(dict(src, name=name, rationale=text))
    return out


def real_items(n_per_dataset: int) -> list[dict]:
    """Health-LLM CoT rationales by qwen2.5-coder-0.5b on the demo's first samples (agent calls cached)."""
    from balms.agents.registry import make_agent
    from balms.experiments.cohorts import cohort
    from balms.experiments.config import ExperimentConfig
    from balms.judges.llm_judge import judge_window_text, window_for_record
    from balms.models.registry import get_backend

    cfg = ExperimentConfig()
    agent_be = get_backend("qwen2.5-coder-0.5b", cache_mode="rw")
    out = []
    for d in ("globem", "pmdata"):
        co = cohort(d, cfg)
        agent = make_agent("healthllm", cot=True, max_tokens=cfg.cot_max_tokens, seed=cfg.seed)
        for s in co.eval_samples(n_per_dataset, cfg.seed):
            rec = agent.predict(s, co.tables, agent_be)
            win = window_for_record({d: co.tables}, rec)
            out.append(dict(name=f"real:{rec.sample_id}", window_text=judge_window_text(win, rec), window=win,
                            gold=rec.label,
                            predicted=rec.prediction, rationale=rec.rationale or "",
                            scale=(win.target.scale_min, win.target.scale_max), target=win.target.label))
    return out


def run(models, configs, items, cache_mode: str) -> list[dict]:
    from balms.judges.llm_judge import judge_rationale
    from balms.models.base import GenParams, Message
    from balms.models.registry import get_backend

    rows = []
    for m in models:
        be = get_backend(m, cache_mode=cache_mode)
        t0, c0 = time.perf_counter(), _cpu()
        be.generate([Message("user", "hi")], GenParams(max_tokens=1))  # load the model outside the timing
        print(f"# {m}: loaded in {time.perf_counter() - t0:.1f} s wall, {_cpu() - c0:.1f} s CPU", flush=True)
        for cname in configs:
            kw = CONFIGS[cname]
            for it in items:
                t, c = time.perf_counter(), _cpu()
                res = judge_rationale(be, window_text=it["window_text"], gold=it["gold"], predicted=it["predicted"],
                                      rationale=it["rationale"], scale=it["scale"], target=it["target"],
                                      window=it["window"], **kw)
                row = dict(model=m, config=cname, item=it["name"], status=res.status, reason=res.unscored_reason,
                           wall_s=time.perf_counter() - t, cpu_s=_cpu() - c, calls=res.attempts,
                           tier1=res.tier1, tier2=res.tier2, mode=res.mode, grounding_hint=res.grounding_hint)
                rows.append(row)
                t2 = {k: (round(v, 2) if isinstance(v, float) else v) for k, v in res.tier2.items()}
                print(f"{m:20s} {cname:14s} {it['name']:40s} {res.status:8s} {row['wall_s']:6.1f}s "
                      f"cpu {row['cpu_s']:5.1f}s  t2={t2} t1={list(res.tier1.values())}"
                      + (f" [{res.unscored_reason}]" if res.unscored_reason else ""), flush=True)
    return rows


def summarise(rows: list[dict]) -> list[dict]:
    out = []
    keys = sorted({(r["model"], r["config"]) for r in rows}, key=lambda k: [r["model"] for r in rows].index(k[0]))
    for m, c in keys:
        rs = [r for r in rows if r["model"] == m and r["config"] == c]
        by = {r["item"]: r for r in rs}

        def t2(item, dim, by=by):
            r = by.get(item)
            return r["tier2"].get(dim) if r and r["status"] == "scored" else None

        overall = [r["tier2"]["overall"] for r in rs
                   if r["status"] == "scored" and r["tier2"].get("overall") is not None]
        eg = [r["tier2"]["evidence_grounding"] for r in rs
              if r["status"] == "scored" and r["tier2"].get("evidence_grounding") is not None]
        eq, ec = t2("d1:Qwen2.5", "evidence_grounding"), t2("d1:Claude", "evidence_grounding")
        out.append(dict(
            model=m, config=c, n=len(rs), n_scored=sum(r["status"] == "scored" for r in rs),
            d1_eg_qwen=eq, d1_eg_claude=ec, d1_overall_qwen=t2("d1:Qwen2.5", "overall"),
            d1_overall_claude=t2("d1:Claude", "overall"),
            claude_above_qwen_eg=(ec is not None and eq is not None and ec > eq),
            distinct_overall=len({round(float(v), 2) for v in overall}),
            distinct_eg=len({round(float(v), 2) for v in eg}),
            wall_s_per_rationale=sum(r["wall_s"] for r in rs) / len(rs),
            cpu_s_per_rationale=sum(r["cpu_s"] for r in rs) / len(rs)))
    return out


def _f(v) -> str:
    return "-" if v is None else (f"{v:.2f}" if isinstance(v, float) else str(v))


def markdown(summary: list[dict], command: str) -> str:
    head = ("| judge model | mode | D.1 evidence grounding Qwen / Claude | D.1 overall Qwen / Claude | "
            "distinct overall (set) | scored | s per rationale wall (CPU) |\n|---|---|---|---|---|---|---|")
    lines = [head]
    for s in summary:
        lines.append(f"| {s['model']} | {s['config']} | {_f(s['d1_eg_qwen'])} / {_f(s['d1_eg_claude'])} | "
                     f"{_f(s['d1_overall_qwen'])} / {_f(s['d1_overall_claude'])} | "
                     f"{s['distinct_overall']} of {s['n']} | "
                     f"{s['n_scored']}/{s['n']} | {s['wall_s_per_rationale']:.1f} ({s['cpu_s_per_rationale']:.1f}) |")
    return "\n".join(lines) + f"\n\nMeasured with: `{command}`"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
    ap.add_argument("--configs", nargs="+", default=["paper", "geval", "geval+hint"], choices=list(CONFIGS))
    ap.add_argument("--set", default="all", choices=["d1", "d1+syn", "all"])
    ap.add_argument("--real", type=int, default=2, help="real rationales per dataset (GLOBEM, PMData) in --set all")
    ap.add_argument("--cache-mode", default="off", choices=["off", "rw", "replay"],
                    help="judge calls; 'off' (default) so that the timing is real")
    ap.add_argument("--out", default=None, help="write rows and summary as JSON here")
    args = ap.parse_args(argv)
    items = d1_items()
    if args.set in ("d1+syn", "all"):
        items += synthetic_items(items[:2])
    if args.set == "all" and args.real:
        items += real_items(args.real)
    print(f"# {len(items)} rationales: {[it['name'] for it in items]}", flush=True)
    rows = run(args.models, args.configs, items, args.cache_mode)
    summary = summarise(rows)
    command = "python bench/bench_judge.py " + " ".join(sys.argv[1:] if argv is None else argv)
    print()
    print(markdown(summary, command))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"command": command, "summary": summary, "rows": rows}, indent=1,
                                             default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
