"""Do two llama.cpp builds give the same greedy answers? The installed build against the portable AVX2 wheel, each
re-answering real committed prompts (the CPU study's cells, rebuilt by their own agents from their specs) with the
response cache off, compared with each other and with the committed answers, and the installed build again with the
calls in the reverse order; speed beside (issue 37).

A cold run on another machine is reproducible only if the build computes the same floats: the AVX-512 build takes
other code paths than the AVX2 one, and a machine without AVX-512 can only run the portable build. Each flavour runs
in its own process (a build is a shared library): the portable wheel is unpacked into a temporary folder that
shadows the installed package on PYTHONPATH. Threads are fixed (BALMS_LLAMA_THREADS) and recorded.

    python bench/bench_reproducibility.py [--n 8] [--wheels ../shared/wheels] [--out bench/reproducibility.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUNDLE = ROOT / "results" / "cpu-study" / "cpu-study.bundle.tar.gz"
# (dataset, run-file stem prefix): single-call cells of the embedded default and the larger backbone
CELLS = [("pmdata", "healthllm__qwen2.5-coder-0.5b__zs__L14__"), ("globem", "healthllm__qwen2.5-coder-0.5b__zs__L14__"),
         ("pmdata", "rag__qwen2.5-coder-0.5b__zs__L14__"), ("pmdata", "healthllm__qwen2.5-coder-0.5b__cot__L14__")]

PROBE = r"""
import json, sys, time
import llama_cpp
from balms.cellspec import CellSpec
from balms.experiments.cohorts import cohort
from balms.experiments.grid import cell_from_spec
from balms.models.registry import get_backend

jobs = json.loads(sys.stdin.read())
out = []
for job in jobs:
    cell = cell_from_spec(CellSpec.model_validate({k: v for k, v in job["spec"].items() if k != "key"}))
    backend = get_backend(cell.spec.model, cache_mode="off")
    by_id = {s.sample_id: s for s in cell.samples}
    for sid in job["sample_ids"]:
        t = time.perf_counter()
        rec = cell.agent.predict(by_id[sid], cohort(cell.spec.dataset).tables, backend)
        out.append({"sample_id": sid, "cell": job["stem"], "raw_answer": rec.raw_answer, "rationale": rec.rationale,
                    "prediction": rec.prediction, "s": time.perf_counter() - t})
print(json.dumps({"module": llama_cpp.__file__, "system_info": llama_cpp.llama_print_system_info().decode().strip(),
                  "answers": out}))
"""


def jobs_from_bundle(n: int) -> tuple[list[dict], dict[str, dict]]:
    """The first `n` records of each cell in CELLS, with the cell's spec (from its manifest)."""
    jobs, committed = [], {}
    with tarfile.open(BUNDLE) as tar:
        names = tar.getnames()
        for dataset, prefix in CELLS:
            run = next(x for x in names if f"/{dataset}/{prefix}" in x and x.endswith(".jsonl"))
            manifest = json.load(tar.extractfile(run.removesuffix(".jsonl") + ".manifest.json"))
            records = [json.loads(line) for line in tar.extractfile(run).read().decode().splitlines() if line.strip()]
            records = [r for r in records if r.get("status") == "ok"][:n]
            stem = Path(run).name.removesuffix(".jsonl")
            jobs.append({"stem": stem, "spec": manifest["cell"], "sample_ids": [r["sample_id"] for r in records]})
            committed.update({(stem, r["sample_id"]): r for r in records})
    return jobs, committed


def probe(jobs: list[dict], pythonpath: str | None, threads: int) -> dict:
    env = dict(os.environ, BALMS_LLAMA_THREADS=str(threads), PYTHONPATH=os.pathsep.join(
        [p for p in (pythonpath, str(ROOT), os.environ.get("PYTHONPATH")) if p]))
    p = subprocess.run([sys.executable, "-c", PROBE], input=json.dumps(jobs), env=env, cwd=ROOT,
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"probe failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def compare(a: list[dict], b: list[dict] | dict) -> dict:
    """How many answers (final text and rationale) are identical, and how many parsed scores agree."""
    key = lambda r: (r["cell"], r["sample_id"])  # noqa: E731
    other = b if isinstance(b, dict) else {key(r): r for r in b}
    pairs = [(r, other[key(r)]) for r in a if key(r) in other]
    same_text = sum(r["raw_answer"] == o["raw_answer"] and r["rationale"] == o["rationale"] for r, o in pairs)
    return {"n": len(pairs), "identical_text": same_text, "same_prediction": sum(
        r["prediction"] == o["prediction"] for r, o in pairs),
            "differ": [{"cell": r["cell"], "sample_id": r["sample_id"], "a": r["raw_answer"][:120],
                        "b": o["raw_answer"][:120]} for r, o in pairs
                       if r["raw_answer"] != o["raw_answer"] or r["rationale"] != o["rationale"]][:10]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=8, help="records per cell")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--wheels", default=str(ROOT.parent / "shared" / "wheels"))
    ap.add_argument("--out", default=str(ROOT / "bench" / "reproducibility.json"))
    args = ap.parse_args()
    jobs, committed = jobs_from_bundle(args.n)
    result = {"command": " ".join(["python", "bench/bench_reproducibility.py", *sys.argv[1:]]),
              "machine": platform.platform(), "cpus": os.cpu_count(), "threads": args.threads,
              "cells": [j["stem"] for j in jobs], "installed": probe(jobs, None, args.threads)}
    wheels = sorted(Path(args.wheels).glob("llama_cpp_python-*.whl"))
    if not wheels:
        raise SystemExit(f"no portable wheel in {args.wheels}: nothing to compare against")
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", tmp, str(wheels[-1])],
                       check=True)
        result["portable"] = probe(jobs, tmp, args.threads)
    # the same build, prompts and samples in the reverse order: does an answer depend on what was read before it?
    reverse = [dict(j, sample_ids=j["sample_ids"][::-1]) for j in jobs[::-1]]
    result["order"] = {"how": "the installed build, the same jobs with cells and samples in reverse order",
                       **compare(result["installed"]["answers"], probe(reverse, None, args.threads)["answers"])}
    inst, port = result["installed"]["answers"], result["portable"]["answers"]
    result["installed_vs_portable"] = compare(inst, port)
    result["installed_vs_committed"] = compare(inst, committed)
    result["portable_vs_committed"] = compare(port, committed)
    result["seconds_per_answer"] = {k: sum(r["s"] for r in result[k]["answers"]) / len(result[k]["answers"])
                                    for k in ("installed", "portable")}
    Path(args.out).write_text(json.dumps(result, indent=1))
    for k in ("installed_vs_portable", "installed_vs_committed", "portable_vs_committed", "order"):
        c = result[k]
        print(f"{k:24s} identical {c['identical_text']}/{c['n']}, same score {c['same_prediction']}/{c['n']}")
    print("s per answer:", {k: round(v, 2) for k, v in result["seconds_per_answer"].items()})


if __name__ == "__main__":
    main()
