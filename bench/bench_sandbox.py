"""Sandbox round-trip latency per block: persistent worker (improved) vs a fresh process per block (faithful).

Each block is a small realistic pandas query over a 90-day frame. Times are the wall time of `Sandbox.run`
as the agent sees it. `faithful_back_to_back` waits for each fresh process to start (worst case);
`faithful_with_gap` leaves a pause between blocks, as an LLM generating its next Thought would, so the
prespawned process is already warm. Writes bench/sandbox.json and prints the ratio of medians.

    python bench/bench_sandbox.py [--blocks 30] [--gap-s 1.0]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np

from balms.sandbox import Sandbox, SandboxLimits
from balms.sandbox.suite import demo_frames

BLOCK = "print(daily['steps'].rolling(7).mean().iloc[-1], daily['sleep_min'].median())"


def _measure(mode: str, blocks: int, gap_s: float = 0.0) -> dict:
    times = []
    t0 = time.perf_counter()
    with Sandbox(demo_frames(90, seed=1), mode=mode, limits=SandboxLimits(wall_s=30)) as sb:
        first = sb.run(BLOCK)  # includes the first worker start; reported separately
        first_s = time.perf_counter() - t0
        assert first.status == "ok", first
        for _ in range(blocks):
            if gap_s:
                time.sleep(gap_s)
            t = time.perf_counter()
            obs = sb.run(BLOCK)
            times.append(time.perf_counter() - t)
            assert obs.status == "ok", obs
    arr = np.array(times)
    return {"mode": mode, "blocks": blocks, "gap_s": gap_s, "first_block_s": round(first_s, 4),
            "median_s": round(float(np.median(arr)), 5), "p95_s": round(float(np.percentile(arr, 95)), 5),
            "mean_s": round(float(arr.mean()), 5), "max_s": round(float(arr.max()), 5)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=30)
    ap.add_argument("--gap-s", type=float, default=1.0)
    ap.add_argument("--out", default=str(Path(__file__).with_name("sandbox.json")))
    args = ap.parse_args()
    improved = _measure("improved", args.blocks)
    faithful = _measure("faithful", args.blocks)
    gap = _measure("faithful", max(5, args.blocks // 3), gap_s=args.gap_s)
    ratio = faithful["median_s"] / improved["median_s"]
    report = {"block": BLOCK, "python": platform.python_version(), "persistent_worker": improved,
              "fresh_process_back_to_back": faithful, "fresh_process_with_gap": gap,
              "ratio_fresh_over_persistent_median": round(ratio, 1),
              "ratio_fresh_with_gap_over_persistent_median": round(gap["median_s"] / improved["median_s"], 1)}
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    for name in ("persistent_worker", "fresh_process_back_to_back", "fresh_process_with_gap"):
        r = report[name]
        print(f"{name:<28} median {r['median_s'] * 1000:8.2f} ms   p95 {r['p95_s'] * 1000:8.2f} ms   "
              f"(n={r['blocks']}, first block {r['first_block_s']:.2f} s)")
    print(f"fresh process / persistent worker (median): {ratio:.1f}x  -> {args.out}")


if __name__ == "__main__":
    main()
