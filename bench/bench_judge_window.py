"""What the judge's window (its input (1)) does to Evidence Grounding, measured on real rationales (issue 38).

The paper's judge sees "per-feature arrays over the look-back window" for every system; our demo's judge sees each
agent's own view (RAG: the retrieved days and the query day; PHIA: its frames). This judges the same CoT rationales
under both (`judge_window` "agent" and "lookback", everything else the CPU study's judge settings) and reports the
paired difference in Evidence Grounding (and Overall) with a participant-bootstrap interval.

Rationales: the CPU study's committed CoT cells on PMData (qwen2.5-coder-0.5b, replayed from its bundle: import it
into the cache first), the first `--n` of each system's nested days. Health-LLM is the control: its own view IS the
look-back arrays, so its two judge inputs are the same text (checked per rationale; then no judge call is made).

    balms bundle import results/cpu-study/cpu-study.bundle.tar.gz
    python bench/bench_judge_window.py [--systems rag healthllm] [--n 30] [--out bench/judge_window.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DIMS = ("evidence_grounding", "overall")


def rationales(cfg, system: str, n: int):
    """The first n CoT records with a rationale of `system` on PMData, and the PMData tables."""
    from balms.experiments.cohorts import cohort
    from balms.experiments.grid import make_cell, records_of

    recs = records_of(cfg, [make_cell(cfg, "pmdata", system, cfg.backbones[0], cot=True)])[0]
    return [r for r in recs if r.rationale][:n], {"pmdata": cohort("pmdata", cfg).tables}


def window_texts(recs, tables, window: str) -> dict[str, str]:
    from balms.judges.llm_judge import judge_window_text, window_for_record

    return {r.sample_id: judge_window_text(window_for_record(tables, r, window), r, window) for r in recs}


def judged(cfg, recs, tables, window: str) -> dict[str, dict]:
    """sample_id -> {user, window_chars, status, scores} for `recs` judged under `window`."""
    from balms.experiments.judging import _judge_backend, _judge_options
    from balms.judges.llm_judge import judge_records

    judge = _judge_backend(cfg, cfg.judge_model)
    results = judge_records(recs, tables, judge, **(_judge_options(cfg) | {"window": window}))
    texts = window_texts(recs, tables, window)
    return {r.sample_id: {"user": r.user, "window_chars": len(texts[r.sample_id]), "status": res.status,
                          **{d: res.tier2.get(d) for d in DIMS}}
            for r, res in zip(recs, results, strict=True)}


def paired(a: dict, b: dict, dim: str, seed: int = 0) -> dict:
    """Mean of lookback - agent over rationales scored under both, with a participant-bootstrap 95% interval."""
    from balms.metrics import mean_ci

    rows = [(a[s]["user"], b[s][dim] - a[s][dim]) for s in a
            if s in b and a[s][dim] is not None and b[s][dim] is not None]
    if not rows:
        return {"n": 0, "mean": None, "lo": None, "hi": None}
    mean, lo, hi = mean_ci([d for _, d in rows], [u for u, _ in rows], seed=seed)
    return {"n": len(rows), "n_users": len({u for u, _ in rows}), "mean": mean, "lo": lo, "hi": hi}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--systems", nargs="+", default=["rag", "healthllm"])
    ap.add_argument("--n", type=int, default=30)
    ap.add_argument("--out", default=str(ROOT / "bench" / "judge_window.json"))
    args = ap.parse_args()

    from balms import experiments as ex
    from balms.models.cache import process_calls

    cfg = ex.load("cpu-study")
    t0, calls0 = time.time(), process_calls()
    systems = {}
    for s in args.systems:
        recs, tables = rationales(cfg, s, args.n)
        texts = {w: window_texts(recs, tables, w) for w in ("agent", "lookback")}
        differ = sum(texts["agent"][k] != texts["lookback"][k] for k in texts["agent"])
        chars = {f"window_chars_{w}_median": statistics.median(map(len, t.values())) for w, t in texts.items()}
        if not differ:  # the same judge prompt under both windows: the same verdict, no call needed to know it
            systems[s] = {"n_rationales": len(recs), "windows_that_differ": 0, **chars,
                          "note": "the agent's own view is the look-back arrays: identical judge input"}
            continue
        agent, lookback = judged(cfg, recs, tables, "agent"), judged(cfg, recs, tables, "lookback")
        systems[s] = {"n_rationales": len(recs), "windows_that_differ": differ, **chars,
                      **{f"{d}_lookback_minus_agent": paired(agent, lookback, d) for d in DIMS},
                      **{f"{d}_mean_{w}": _mean(v, d) for w, v in (("agent", agent), ("lookback", lookback))
                         for d in DIMS},
                      "per_rationale": {k: {"agent": agent[k], "lookback": lookback[k]} for k in agent}}
    calls = {k: v - calls0[k] for k, v in process_calls().items()}
    out = {"judge_model": cfg.judge_model, "judge_mode": cfg.judge_mode, "grounding_hint": cfg.judge_grounding_hint,
           "agent_model": cfg.backbones[0], "dataset": "pmdata", "n_per_system": args.n, "seed": 0,
           "wall_s": round(time.time() - t0, 1), "model_calls": calls, "systems": systems}
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    for s, v in systems.items():
        eg = v.get("evidence_grounding_lookback_minus_agent")
        print(f"{s}: {v['windows_that_differ']}/{v['n_rationales']} judge windows differ"
              + (f"; evidence grounding lookback - agent = {eg['mean']:.3f} [{eg['lo']:.3f}, {eg['hi']:.3f}], "
                 f"n={eg['n']}" if eg else ""))


def _mean(d: dict, dim: str) -> float | None:
    vals = [v[dim] for v in d.values() if v[dim] is not None]
    return sum(vals) / len(vals) if vals else None


if __name__ == "__main__":
    main()
