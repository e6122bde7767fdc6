"""Time and peak memory to build all PMData and all GLOBEM samples from the raw files.

    python bench/bench_data.py [--raw-root DIR]     (make bench-data)

Writes bench/data.json. Target: all PMData samples in < 10 s on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import time
import tracemalloc
from pathlib import Path

from balms import paths
from balms.data.loading import load_dataset
from balms.data.samples import build_samples, window_arrays


def bench(name: str, raw_root: Path | None) -> dict:
    """Timed run without tracing (tracemalloc slows pandas ~10x), then a traced run for peak memory."""
    out = _run(name, raw_root, trace=False)
    out["tracemalloc_peak_mb"] = _run(name, raw_root, trace=True)["tracemalloc_peak_mb"]
    return out


def _run(name: str, raw_root: Path | None, *, trace: bool) -> dict:
    if trace:
        tracemalloc.start()
    t0 = time.perf_counter()
    tables = load_dataset(name, raw_root)
    t1 = time.perf_counter()
    ss = build_samples(tables)
    t2 = time.perf_counter()
    arr = window_arrays(tables, ss.samples)  # every window materialised
    t3 = time.perf_counter()
    peak = 0
    if trace:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return {"dataset": name, "source": tables.source, "raw_dir": tables.raw_dir, "n_samples": len(ss),
            "load_s": round(t1 - t0, 3), "build_samples_s": round(t2 - t1, 3), "windows_s": round(t3 - t2, 3),
            "total_s": round(t3 - t0, 3), "tracemalloc_peak_mb": round(peak / 2**20, 1),
            "window_array_shape": list(arr.shape)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--raw-root", type=Path, default=None,
                    help="folder with pmdata/ and globem/ "
                         "(default: BALMS_RAW_DIR, else ../shared/data, else synthetic)")
    a = ap.parse_args(argv)
    root = a.raw_root
    if root is None and not os.environ.get("BALMS_RAW_DIR") and paths.shared_data_dir():
        root = paths.shared_data_dir()
    rows = [bench(n, root) for n in ("pmdata", "globem")]
    out = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
           "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
           "target": "all PMData samples < 10 s", "results": rows,
           "pmdata_target_met": rows[0]["total_s"] < 10}
    for r in rows:
        print(f"{r['dataset']:8s} {r['source']:9s} samples={r['n_samples']:5d} load={r['load_s']}s "
              f"samples={r['build_samples_s']}s windows={r['windows_s']}s total={r['total_s']}s "
              f"peak={r['tracemalloc_peak_mb']} MB")
    print(f"max RSS {out['max_rss_mb']} MB; PMData target met: {out['pmdata_target_met']}")
    dest = Path(__file__).resolve().parent / "data.json"
    dest.write_text(json.dumps(out, indent=1))
    print(f"wrote {dest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
