"""What PHIA's two paper-inconsistent options change, measured on the real data (no model call):

- `frame_span`: "record" (Appendix A: the user's full record up to the day before the target) vs "lookback"
  (Appendix D's trace: 14 days x 4 segments): rows of `daily_df` and `subday_df`, and the first prompt's size
  (faithful, and improved with its schema card, which summarises the frames).
- `sleep_recipe`: "corrected" vs "paper" (the Health-LLM prompt's PMData recipe): on how many window days the
  sleep value PHIA's daily frame holds differs between the two, and by how many minutes (median).

With `--real K`, also K real PMData episodes per option value with the embedded model at the demo's PHIA
settings (balms.experiments.config defaults: faithful executor, code_first primer, fence stop): the prediction,
the code blocks run, and the first prompt's tokens, so the options' effect on an episode is seen, not assumed.

    python bench/bench_phia_options.py [--n 100] [--real 3] [--out bench/phia_options.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def measure(dataset: str, n: int, seed: int = 0) -> list[dict]:
    import numpy as np

    from balms.agents.phia import DAILY_FRAME, SUBDAY_FRAME, PhiaAgent
    from balms.data.loading import load_dataset
    from balms.data.samples import build_samples
    from balms.experiments.cohorts import sample_order

    tables = load_dataset(dataset)
    pool = sorted(build_samples(tables).samples, key=lambda s: (s.user, s.target_date))
    samples = [pool[i] for i in sorted(sample_order(len(pool), n, seed)[:n])]
    rows = []
    for span in ("record", "lookback"):
        for recipe in ("corrected", "paper"):
            stats: dict[str, list] = {"daily_rows": [], "subday_rows": [], "prompt_chars_faithful": [],
                                      "prompt_chars_improved": []}
            for s in samples:
                for ex in ("faithful", "improved"):
                    agent = PhiaAgent(executor=ex, frame_span=span, sleep_recipe=recipe)
                    _, frames, msgs = agent._setup(s, tables)
                    stats[f"prompt_chars_{ex}"].append(sum(len(m.content) for m in msgs))
                stats["daily_rows"].append(len(frames[DAILY_FRAME]))
                stats["subday_rows"].append(len(frames[SUBDAY_FRAME]) if SUBDAY_FRAME in frames else 0)
            rows.append({"dataset": dataset, "source": tables.source, "n": len(samples), "frame_span": span,
                         "sleep_recipe": recipe,
                         **{f"mean_{k}": round(statistics.mean(v), 1) for k, v in stats.items()},
                         **{f"max_{k}": max(v) for k, v in stats.items() if k.endswith("rows")}})
    if {"sleep_minutes", "sleep_minutes_paper"} <= set(tables.daily.columns):
        diff, n_days = [], 0
        for s in samples:
            d = {r: PhiaAgent(frame_span="lookback", sleep_recipe=r)._setup(s, tables)[1][DAILY_FRAME]
                 for r in ("corrected", "paper")}
            a = d["corrected"]["sleep_minutes"].to_numpy(float)
            b = d["paper"]["sleep_minutes_paper"].to_numpy(float)
            n_days += len(a)
            both = ~(np.isnan(a) & np.isnan(b))
            neq = both & ~np.isclose(np.nan_to_num(a, nan=-1), np.nan_to_num(b, nan=-1))
            diff += list(np.abs(np.nan_to_num(a) - np.nan_to_num(b))[neq & ~np.isnan(a) & ~np.isnan(b)])
            rows_neq = int(neq.sum())
            rows[-1].setdefault("_neq", 0)
            rows[-1]["_neq"] += rows_neq
        neq_total = rows[-1].pop("_neq")
        for r in rows:
            r["sleep_days_differing"] = f"{neq_total}/{n_days} ({neq_total / n_days:.0%})"
            r["sleep_median_abs_diff_min"] = round(float(np.median(diff)), 1) if diff else 0.0
    return rows


def real_episodes(k: int, seed: int = 0) -> list[dict]:
    """K PMData episodes per (frame_span, sleep_recipe) variant with the embedded model, demo settings."""
    from balms.agents.registry import config_options, make_agent
    from balms.data.loading import load_dataset
    from balms.data.samples import build_samples
    from balms.experiments import config
    from balms.experiments.cohorts import sample_order
    from balms.models.registry import get_backend

    cfg = config.ExperimentConfig()
    tables = load_dataset("pmdata")
    pool = sorted(build_samples(tables).samples, key=lambda s: (s.user, s.target_date))
    samples = [pool[i] for i in sorted(sample_order(len(pool), k, seed)[:k])]
    backend = get_backend(cfg.backbones[0])
    rows = []
    for span, recipe in (("record", "corrected"), ("lookback", "corrected"), ("record", "paper")):
        opts = config_options("phia", cfg, False, cfg.backbones[0]) | {"frame_span": span, "sleep_recipe": recipe}
        agent = make_agent("phia", **opts)
        for s in samples:
            r = agent.predict(s, tables, backend)
            rows.append({"frame_span": span, "sleep_recipe": recipe, "sample_id": s.sample_id, "label": s.label,
                         "prediction": r.prediction, "code_blocks": sum(st.kind == "code" for st in r.transcript),
                         "prompt_tokens": r.prompt_tokens, "n_calls": r.n_steps, "error": r.error})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100, help="seeded samples per dataset (the evaluation order)")
    ap.add_argument("--real", type=int, default=0, help="real PMData episodes per option value (embedded model)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "phia_options.json"))
    a = ap.parse_args(argv)
    rows = measure("pmdata", a.n) + measure("globem", a.n)
    out = {"command": f"python bench/bench_phia_options.py --n {a.n}" + (f" --real {a.real}" if a.real else ""),
           "rows": rows}
    if a.real:
        out["episodes"] = real_episodes(a.real)
        for r in out["episodes"]:
            print(json.dumps(r))
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    for r in rows:
        print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
