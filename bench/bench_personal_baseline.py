"""Seconds per call of the CPU study's single-call systems with the embedded 0.5B and 1.5B models, on real PMData
target days of the study (issue 26): the personal-baseline prompt (ours) beside Health-LLM and RAG zero-shot, as
the `cpu-study` profile configures them. Real calls (response cache off); each model is loaded and warmed up with
one call before timing. The machine's load average is recorded: on a shared 2-core VM the numbers move with it.

    python bench/bench_personal_baseline.py [--n 5] [--models qwen2.5-coder-0.5b qwen2.5-coder-1.5b]
        [--systems personal_baseline healthllm rag] [--out bench/personal_baseline.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _evenly(seq: list, k: int) -> list:
    step = max(len(seq) // max(k, 1), 1)
    return seq[::step][:k]


def measure(n: int, models: list[str], systems: list[str], profile: str = "cpu-study") -> dict:
    from balms.agents.registry import build_agent
    from balms.experiments import load
    from balms.experiments.cohorts import cohort
    from balms.experiments.grid import eval_samples
    from balms.models.base import GenParams, Message
    from balms.models.registry import get_backend

    cfg = load(profile)
    tables = cohort("pmdata", cfg).tables
    samples = _evenly(eval_samples(cfg, "pmdata"), n)
    out: dict = {"profile": profile, "dataset": "pmdata", "samples": [s.sample_id for s in samples], "cells": []}
    for model in models:
        backend = get_backend(model, cache_mode="off")
        t0 = time.perf_counter()
        backend.generate([Message("user", "Say OK.")], GenParams(max_tokens=2))  # load + warm up, not timed below
        out.setdefault("load_and_warmup_s", {})[model] = round(time.perf_counter() - t0, 2)
        for system in systems:
            agent = build_agent(system, cfg, model=model)
            recs = [agent.predict(s, tables, backend) for s in samples]
            lat = [r.latency_s / max(r.n_steps, 1) for r in recs]
            out["cells"].append({
                "model": model, "system": system, "n": len(recs), "s_per_call_mean": round(statistics.mean(lat), 2),
                "s_per_call_median": round(statistics.median(lat), 2), "s_per_call": [round(x, 2) for x in lat],
                "prompt_tokens_mean": round(statistics.mean(r.prompt_tokens for r in recs), 1),
                "completion_tokens_mean": round(statistics.mean(r.completion_tokens for r in recs), 1),
                "n_parsed": sum(r.prediction is not None for r in recs),
                "predictions": [r.prediction for r in recs], "labels": [r.label for r in recs]})
            print(json.dumps(out["cells"][-1]), flush=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--models", nargs="+", default=["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
    ap.add_argument("--systems", nargs="+", default=["personal_baseline", "healthllm", "rag"])
    ap.add_argument("--out", default=str(ROOT / "bench" / "personal_baseline.json"))
    a = ap.parse_args(argv)
    load0 = os.getloadavg()
    t0 = time.perf_counter()
    res = measure(a.n, a.models, a.systems)
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    res.update(commit=commit, machine=platform.machine(), cpus=os.cpu_count(), loadavg_before=load0,
               loadavg_after=os.getloadavg(), wall_s=round(time.perf_counter() - t0, 1),
               command="python bench/bench_personal_baseline.py " + " ".join(sys.argv[1:]))
    Path(a.out).write_text(json.dumps(res, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
