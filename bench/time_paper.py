"""How long `make paper` takes, cold and warm, each measured in one uninterrupted run (bench/paper_timing.json).

cold: an empty cache (responses, RAPTOR summaries, embeddings, loaded tables; only the profile's embedded GGUF models
      are linked in, assembled first in the project's cache where a fresh clone has not yet done so), a fresh runs
      folder, no executed notebook: every model call made.
warm: the cache and the runs kept, the executed notebooks removed: every notebook re-executes and every cell is
      read back from its run file (what a second `make paper`, e.g. after a code edit, costs).

By default both run in build/time-paper/<profile>/ (own cache, runs, outputs: the committed tables are not
touched); `--in-place` times the project's own `make paper` (BALMS_CACHE_DIR / runs / tables as configured), and
`--from-log` records a `make paper` already run in place from its full terminal output (the per-notebook
"[nb] done in N s" lines make prints and the total that `time` printed). Per-notebook seconds are make's own lines;
the 1-minute load average at the start and end says whether the machine was idle. The demo profile's values and
the commit are recorded, so a test can tell a timing that no longer matches the demo (tests/test_demo_results.py).
A run with errors is no timing: a log whose grids report error records (balms.experiments.errors) is refused.

    python bench/time_paper.py --mode cold|warm [--profile demo] [--in-place] [--out bench/paper_timing.json]
    python bench/time_paper.py --mode cold --from-log LOG --load-start 0.5 --load-end 1.9
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DONE = re.compile(r"^\[(\d\d_[a-z0-9_]+)\] done in (\d+) s$")
REAL = re.compile(r"^real\s+(\d+)m([\d.]+)s$")


def parse_log(text: str) -> tuple[dict[str, int], float | None]:
    """Per-notebook seconds from make's "[nb] done in N s" lines and the `time` total, if printed."""
    per_nb = {m.group(1): int(m.group(2)) for line in text.splitlines() if (m := DONE.match(line.strip()))}
    total = next((int(m.group(1)) * 60 + float(m.group(2)) for line in text.splitlines()
                  if (m := REAL.match(line.strip()))), None)
    return per_nb, total


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def _run_make(profile: str, env: dict, exec_dir: str | None, log: Path) -> tuple[str, float]:
    cmd = ["make", "--no-print-directory", "paper", f"PROFILE={profile}"]
    cmd += [f"EXEC_DIR={exec_dir}"] if exec_dir else []
    t0 = time.monotonic()
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        out = []
        for line in proc.stdout:
            fh.write(line)
            out.append(line)
            if DONE.match(line.strip()) or "FAILED" in line or "RunErrors" in line:
                print(line, end="", flush=True)
        rc = proc.wait()
    total = time.monotonic() - t0
    if rc:
        raise SystemExit(f"make paper failed (exit {rc}); see {log}")
    text = "".join(out)
    refuse_errors(text, str(log))
    return text, total


def refuse_errors(log_text: str, where: str) -> None:
    """A timed run in which samples failed measured the failures, not the benchmark: no timing is recorded."""
    from balms.experiments.errors import grid_errors

    n = grid_errors(log_text)
    if n:
        raise SystemExit(f"{where}: the run had {n} error record(s) (see its 'grid of ... error records' lines): "
                         "refusing to record its timing; fix the errors and time it again")


def prepare_cold_cache(cache: Path, profile: str) -> list[str]:
    """An empty cache for the cold run with the profile's embedded GGUF models linked in. A fresh clone has not
    assembled them yet (`<cache>/models` appears on a model's first use), so each is assembled in the project's
    cache first; the folder is linked only when it exists (a single-file model is read from its wheel instead)."""
    from balms import paths
    from balms.experiments.cells import declared_cells
    from balms.experiments.config import load
    from balms.models import gguf_assets
    from balms.models.registry import MODELS

    cfg = load(profile)
    names = {c.model for c in declared_cells(cfg)} | {cfg.judge_model}
    assets = sorted({MODELS[n].asset for n in names if n in MODELS and MODELS[n].asset})
    for key in assets:
        gguf_assets.gguf_path(key)
    cache.mkdir(parents=True)
    models = paths.cache_dir() / "models"
    if models.is_dir():
        (cache / "models").symlink_to(models.resolve())
    return assets


def measure(profile: str, mode: str, in_place: bool) -> dict:
    env = dict(os.environ)
    exec_dir = None
    if in_place:
        executed = ROOT / "notebooks" / "executed" / profile
        if mode == "cold":
            raise SystemExit("--in-place cold would empty your own cache: point BALMS_CACHE_DIR at an empty folder "
                             "and run `make paper` under `time`, then record it with --from-log")
    else:
        base = ROOT / "build" / "time-paper" / profile
        cache, runs, out, executed = base / "cache", base / "runs", base / "out", base / "executed"
        if mode == "cold":
            shutil.rmtree(base, ignore_errors=True)
            prepare_cold_cache(cache, profile)
        elif not runs.is_dir():
            raise SystemExit(f"no cold run in {base}: run --mode cold first")
        env.update(BALMS_CACHE_DIR=str(cache), BALMS_RUNS_DIR=str(runs), BALMS_OUTPUT_DIR=str(out))
        exec_dir = str(executed.relative_to(ROOT))
    shutil.rmtree(executed, ignore_errors=True)
    log = ROOT / "build" / f"time-paper-{profile}-{mode}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    load0 = os.getloadavg()[0]
    text, total = _run_make(profile, env, exec_dir, log)
    per_nb, _ = parse_log(text)
    return {"total_s": round(total, 1), "notebooks_s": per_nb, "load_1m_start": round(load0, 2),
            "load_1m_end": round(os.getloadavg()[0], 2), "how": "in place" if in_place else "build/time-paper"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=["cold", "warm"], required=True)
    ap.add_argument("--profile", default="demo")
    ap.add_argument("--in-place", action="store_true")
    ap.add_argument("--from-log")
    ap.add_argument("--load-start", type=float)
    ap.add_argument("--load-end", type=float)
    ap.add_argument("--out", default=str(ROOT / "bench" / "paper_timing.json"))
    a = ap.parse_args(argv)
    from balms.experiments import config

    if a.from_log:
        per_nb, total = parse_log(Path(a.from_log).read_text(errors="replace"))
        if total is None or not per_nb:
            raise SystemExit(f"{a.from_log}: no `time` total or no '[nb] done in N s' line: not a timed make paper log")
        refuse_errors(Path(a.from_log).read_text(errors="replace"), a.from_log)
        row = {"total_s": round(total, 1), "notebooks_s": per_nb, "load_1m_start": a.load_start,
               "load_1m_end": a.load_end, "how": "in place, recorded from its log"}
    else:
        row = measure(a.profile, a.mode, a.in_place)
    row.update(profile_values=config.profile_values(a.profile), commit=_git("rev-parse", "--short", "HEAD"),
               measured_at=time.strftime("%Y-%m-%d %H:%M"), cpu_count=os.cpu_count(), machine=platform.machine())
    out = Path(a.out)
    data = json.loads(out.read_text()) if out.exists() else {}
    data.setdefault(a.profile, {})[a.mode] = row
    out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"{a.profile} {a.mode}: {row['total_s']:.0f} s ({row['total_s'] / 60:.1f} min); "
          + ", ".join(f"{k} {v} s" for k, v in row["notebooks_s"].items()) + f" -> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
