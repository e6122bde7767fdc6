"""The plan's estimate against an exact count (issue 36: the plan's wall-time error): `balms plan` prices each cell
from a block of `--per-cell` samples (balms.experiments.plan.scale_up); here the same plan also runs every sample,
so each cell's estimated calls stand beside its exact calls. bench-scale's plan (bench_scale.grid_plan: notebook
01's paper grid, the stand-in answering as the simulated servers do, its block size by default) on one backbone, the
real data at ../shared/data, hash embeddings, a fresh cache.

    python bench/plan_exact.py [--samples 160] [--per-cell 3] [--out bench/plan_exact.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import bench_scale  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=160, help="samples per cell (n_samples)")
    ap.add_argument("--per-cell", type=int, default=bench_scale.PLAN_PER_CELL,
                    help="the plan's block of samples per cell (default: bench-scale's)")
    ap.add_argument("--backbone", default="Qwen2.5-7B-Instruct")
    ap.add_argument("--out", default=str(ROOT / "bench" / "plan_exact.json"))
    a = ap.parse_args(argv)
    from balms.paths import shared_data_dir

    if shared_data_dir() is None:
        raise SystemExit("plan_exact needs the real data at ../shared/data")
    os.environ["BALMS_RAW_DIR"] = str(shared_data_dir())
    os.environ["BALMS_CACHE_DIR"] = tempfile.mkdtemp(prefix="balms-plan-exact-")
    block, exact = (bench_scale.grid_plan(a.samples, bench_scale.DATASETS, backbones=[a.backbone], per_cell=n)
                    for n in (a.per_cell, 10 ** 9))
    rows = [{"system": e["system"], "dataset": e["dataset"], "cot": e["cot"], "n_samples": e["n_samples"],
             "estimated_calls": b["calls"], "exact_calls": e["calls"]}
            for b, e in zip(block["cells"], exact["cells"], strict=True)]
    out = {"command": " ".join(["python bench/plan_exact.py", *(argv or sys.argv[1:])]),
           "backbone": a.backbone, "samples_per_cell": a.samples, "per_cell": a.per_cell,
           "estimated_calls": block["total"]["calls"], "exact_calls": exact["total"]["calls"], "cells": rows}
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
