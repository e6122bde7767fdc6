"""Which embedded model for which role? Each agent role run for real on real PMData and GLOBEM prompts.

Roles (the demo's budgets and prompt style, `balms.experiments.config` defaults):
- `healthllm zs`: Health-LLM zero-shot (one call, zs_max_tokens).
- `rag zs`: RAG zero-shot (top-3 retrieved days + the query day, MiniLM embeddings).
- `healthllm cot`: Health-LLM CoT at cot_max_tokens, without and with the forced answer (a reply cut off by the
  budget or ended without an answer line is asked for its answer alone, `cot_force_answer`, `cot_force_missing`);
  the first call is the same, so the second variant costs only the forced-answer calls.
- `phia <executor> <variant>`: PHIA episodes (phia_max_iters steps of phia_step_tokens, then the forced finish)
  under both executor contracts (a forced finish without an answer asked once more, `phia_force_answer`), with
  the plain prompt ("plain", the paper profile's) and with our primers (`code_first`, `example`; `+stop` = the
  code-fence stop), see balms.agents.prompts.PHIA_PRIMERS.

Per (model, role): n prompts, parse rate (a valid integer answer), for PHIA the code-block rate (share of
episodes in which the sandbox executed at least one block the model wrote), the data-code rate (at least one
executed block reads `daily_df`/`subday_df`), the share of blocks copied verbatim from the `example` primer, and
F1/F2 events (balms.failures); seconds per model call (mean over every call; cached calls count at the latency
measured when they were generated) and calls per prompt. The machine is shared: the 1-minute load average is
recorded at the start and end of each row's run (for rows served entirely from the response cache the load of
the run that measured them is kept from the previous bench/roles.json).

Calls go through the response cache (BALMS_CACHE_DIR), so a re-run costs nothing; `--cache-mode off` re-measures.

    python bench/bench_roles.py [--models qwen2.5-coder-0.5b qwen2.5-coder-1.5b smollm2-135m] [--n 6]
                                [--roles healthllm_zs rag_zs cot phia] [--phia-variants plain code_first+stop]
                                [--out bench/roles.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ROLES = ("healthllm_zs", "rag_zs", "cot", "phia")
DATASETS = ("pmdata", "globem")  # the real datasets (DiversityOne is synthetic here)
# PHIA variants: name -> PhiaAgent options beyond the executor
PHIA_VARIANTS = {
    "plain": {},
    "plain+stop": {"fence_stop": True},
    "code_first": {"primer": "code_first"},
    "code_first+stop": {"primer": "code_first", "fence_stop": True},
    "example+stop": {"primer": "example", "fence_stop": True},
}
DEFAULT_PHIA_VARIANTS = ("plain", "code_first+stop", "example+stop")
FRAMES = ("daily_df", "subday_df")


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def pick_samples(n: int, seed: int):
    """n prompts split over PMData and GLOBEM: each dataset's first demo evaluation samples (seeded)."""
    from balms.experiments.cohorts import cohort
    from balms.experiments.config import ExperimentConfig
    from balms.paths import shared_data_dir

    if not os.environ.get("BALMS_RAW_DIR") and shared_data_dir() is not None:
        os.environ["BALMS_RAW_DIR"] = str(shared_data_dir())  # as the Makefile does
    cfg = ExperimentConfig(seed=seed)
    out = []
    per = [n // len(DATASETS) + (i < n % len(DATASETS)) for i in range(len(DATASETS))]
    for d, k in zip(DATASETS, per, strict=True):
        co = cohort(d, cfg)
        if co.source != "real":
            raise SystemExit(f"bench_roles: {d} is {co.source}, not real data (set BALMS_RAW_DIR)")
        out += [(co.tables, s) for s in co.eval_samples(k, seed)]
    return cfg, out


def _calls(rec) -> list:
    return [st for st in rec.transcript if st.kind in ("completion", "forced_answer", "forced_finish")]


def summarize(model: str, role: str, variant: str, recs: list, load0: float, load1: float, wall: float) -> dict:
    from balms.agents.prompts import PHIA_EXAMPLE
    from balms.failures import classify_trace

    calls = [st for r in recs for st in _calls(r)]
    lat = [float(st.meta.get("latency_s") or 0.0) for st in calls]
    gen = [int(st.meta.get("completion_tokens") or 0) for st in calls]
    row = {
        "model": model, "role": role, "variant": variant, "n": len(recs),
        "parse_rate": round(sum(r.prediction is not None for r in recs) / len(recs), 3) if recs else None,
        "s_per_call": round(statistics.mean(lat), 2) if lat else None,
        "calls_per_prompt": round(len(calls) / len(recs), 2) if recs else None,
        "gen_tokens_per_call": round(statistics.mean(gen), 1) if gen else None,
        "cached_share": round(sum(bool(st.meta.get("cached")) for st in calls) / len(calls), 3) if calls else None,
        "load_1m_start": load0, "load_1m_end": load1, "wall_s": round(wall, 1),
        "predictions": [r.prediction for r in recs],
        "labels": [r.label for r in recs],
    }
    if role.endswith("cot"):
        row["cut_by_budget_rate"] = round(sum(any(st.meta.get("finish_reason") == "length" for st in r.transcript
                                                  if st.kind == "completion") for r in recs) / len(recs), 3)
        row["forced_rate"] = round(sum(any(st.kind == "forced_answer" for st in r.transcript)
                                       for r in recs) / len(recs), 3)
        row["parse_errors"] = sorted({r.parse_error for r in recs if r.parse_error})
    if role.startswith("phia"):
        codes = [[st.content for st in r.transcript if st.kind == "code"] for r in recs]
        example_code = PHIA_EXAMPLE.split("```python\n", 1)[1].split("```", 1)[0].strip()
        tax = [classify_trace(r) for r in recs]
        n_blocks = sum(len(c) for c in codes)
        row |= {
            "code_block_rate": round(sum(bool(c) for c in codes) / len(recs), 3),
            "data_code_rate": round(sum(any(f in b for b in c for f in FRAMES) for c in codes) / len(recs), 3),
            "blocks_per_episode": round(n_blocks / len(recs), 2),
            "copied_example_share": round(sum(b.strip() == example_code for c in codes for b in c) / n_blocks, 3)
            if n_blocks else None,
            "F1_events": sum(t["F1"] for t in tax), "F2_events": sum(t["F2"] for t in tax),
            "F3_rate": round(sum(t["F3"] for t in tax) / len(recs), 3),
        }
    return row


def run_role(model: str, role: str, samples, cfg, cache_mode: str, phia_variants=DEFAULT_PHIA_VARIANTS,
             records_out: Path | None = None) -> list[dict]:
    from balms.agents.registry import make_agent
    from balms.models.registry import get_backend

    be = get_backend(model, cache_mode=cache_mode)
    common = dict(seed=cfg.seed)
    jobs = []  # (role label, variant, agent)
    if role == "healthllm_zs":
        jobs.append(("healthllm zs", "paper", make_agent("healthllm", max_tokens=cfg.zs_max_tokens,
                                                          style=cfg.prompt_style, **common)))
    elif role == "rag_zs":
        jobs.append(("rag zs", "paper", make_agent("rag", max_tokens=cfg.zs_max_tokens, style=cfg.prompt_style,
                                                    **common)))
    elif role == "cot":
        for force in (False, True):
            jobs.append(("healthllm cot", "force_answer" if force else "plain",
                         make_agent("healthllm", cot=True, max_tokens=cfg.cot_max_tokens, style=cfg.prompt_style,
                                    force_answer=force, force_missing=force and cfg.cot_force_missing, **common)))
    elif role == "phia":
        for ex in ("faithful", "improved"):
            for v in phia_variants:
                jobs.append((f"phia {ex}", v, make_agent("phia", executor=ex, max_iters=cfg.phia_max_iters,
                                                         max_tokens=cfg.phia_step_tokens, **PHIA_VARIANTS[v],
                                                         force_answer=cfg.phia_force_answer,
                                                         **common)))
    rows = []
    for label, variant, agent in jobs:
        load0, t0 = _load(), time.perf_counter()
        recs = []
        for tables, s in samples:
            recs.append(agent.predict(s, tables, be))
        row = summarize(model, label, variant, recs, load0, _load(), time.perf_counter() - t0)
        if records_out is not None:  # the full records (transcripts included), for reading what the models wrote
            with records_out.open("a") as fh:
                for r in recs:
                    fh.write(json.dumps({"bench_role": label, "bench_variant": variant,
                                         **r.model_dump(mode="json")}) + "\n")
        rows.append(row)
        print(fmt_row(row), flush=True)
    return rows


COLS = ("model", "role", "variant", "n", "parse_rate", "code_block_rate", "data_code_rate", "s_per_call",
        "calls_per_prompt", "cached_share", "load_1m_start")


def fmt_row(r: dict) -> str:
    def f(v):
        return "-" if v is None else (f"{v:.2f}" if isinstance(v, float) else str(v))
    return " | ".join(f(r.get(c)) for c in COLS)


def markdown(rows: list[dict]) -> str:
    """The README table: model, role, variant, n, parse rate, code-block rate, s per call, load average."""
    def f(v, pct=False):
        return "-" if v is None else (f"{v:.0%}" if pct else f"{v:.1f}" if isinstance(v, float) else str(v))
    lines = ["| model | role | variant | n | parse rate | code-block rate | s per call | calls per prompt | load 1m |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['role']} | {r['variant']} | {r['n']} | {f(r['parse_rate'], True)} | "
                     f"{f(r.get('code_block_rate'), True)} | {f(r['s_per_call'])} | {f(r['calls_per_prompt'])} | "
                     f"{f(r['load_1m_start'])}-{f(r['load_1m_end'])} |")
    return "\n".join(lines)


def keep_measured_load(rows: list[dict], previous: list[dict]) -> None:
    """Rows answered entirely from the cache keep the load average of the run that measured them."""
    prev = {(r["model"], r["role"], r["variant"], r["n"]): r for r in previous}
    for r in rows:
        old = prev.get((r["model"], r["role"], r["variant"], r["n"]))
        if r.get("cached_share") == 1.0 and old is not None:
            for k in ("load_1m_start", "load_1m_end", "measured_at"):
                if k in old:
                    r[k] = old[k]
        r.setdefault("measured_at", time.strftime("%Y-%m-%d %H:%M"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "smollm2-135m"])
    ap.add_argument("--roles", nargs="+", default=list(ROLES), choices=ROLES)
    ap.add_argument("--phia-variants", nargs="+", default=list(DEFAULT_PHIA_VARIANTS), choices=list(PHIA_VARIANTS))
    ap.add_argument("--n", type=int, default=6, help="prompts per role, split over PMData and GLOBEM")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache-mode", default="rw", choices=["rw", "off"])
    ap.add_argument("--out", default=str(ROOT / "bench" / "roles.json"))
    ap.add_argument("--records", default=None, help="also append every record (with transcript) to this JSONL")
    args = ap.parse_args(argv)
    cfg, samples = pick_samples(args.n, args.seed)
    out = Path(args.out)
    previous = json.loads(out.read_text())["rows"] if out.exists() else []
    print("# " + " | ".join(COLS), flush=True)
    rows: list[dict] = []
    for m in args.models:
        for role in args.roles:
            rows += run_role(m, role, samples, cfg, args.cache_mode, args.phia_variants,
                             Path(args.records) if args.records else None)
    keep_measured_load(rows, previous)
    # rows of models/roles not run this time are kept from the previous file
    done = {(r["model"], r["role"], r["variant"]) for r in rows}
    rows = [r for r in previous if (r["model"], r["role"], r["variant"]) not in done] + rows
    doc = {"command": "python bench/bench_roles.py " + " ".join(sys.argv[1:] if argv is None else argv),
           "samples": [s.sample_id for _, s in samples], "cpu_count": os.cpu_count(), "machine": platform.machine(),
           "threads": int(os.environ.get("BALMS_LLAMA_THREADS", 2)),
           "config": {k: getattr(cfg, k) for k in ("prompt_style", "zs_max_tokens", "cot_max_tokens",
                                                    "phia_max_iters", "phia_step_tokens", "cot_force_missing",
                                                    "phia_force_answer")},
           "rows": rows}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(markdown(rows))
    print(f"# wrote {out} ({len(rows)} rows)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
