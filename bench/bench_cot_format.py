"""What the CoT template's form does to the answers, measured on the CPU study's days (issue 38).

The paper profile prints Appendix D's CoT template as printed (`cot_format: printed`: its worked reasoning paragraph,
then "The user's stress score is 3."); the CPU study's committed CoT cells use our earlier reconstruction
(`answer_line`: a placeholder paragraph, then the format example's "Answer: 1"). This replays both forms' cells of
the CPU study's first backbone on PMData (the same seeded days, paired by sample) and reports, per system and form,
the parse failures, both MAEs (failures excluded and scored, docs/scoring.md), the answer shares (the commonest
answer, and the shares of 1 and 3, the two forms' example values), and the paired MAE difference printed - answer_line
with a participant-bootstrap interval.

Replay only (zero model calls): the answer_line responses come from the CPU study's bundle, the printed ones from
bench/cot_format_responses.jsonl.gz (run once with `balms run --config cpu-study --notebooks 02_cot --profile
cot-printed --set "-p cot_format printed -p datasets [pmdata]"`, then `balms.bundle.export_responses("cot-printed",
...)`).

    balms bundle import results/cpu-study/cpu-study.bundle.tar.gz
    balms bundle import-responses bench/cot_format_responses.jsonl.gz
    python bench/bench_cot_format.py [--systems healthllm rag] [--out bench/cot_format.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FORMS = ("answer_line", "printed")
EXAMPLE_VALUES = (1, 3)  # the value each form's example answer names ("Answer: 1"; "The user's stress score is 3.")


def form_records(cfg, system: str, form: str):
    from balms.experiments.grid import make_cell, records_of

    c = cfg.model_copy(update={"cot_format": form, "cache_mode": "replay"})
    return records_of(c, [make_cell(c, "pmdata", system, c.backbones[0], cot=True)], progress=False)[0]


def describe(recs) -> dict:
    from balms import metrics

    df = metrics.records_frame(recs)
    answered = df[df["status"] != "error"]
    shares = answered["prediction"].value_counts(normalize=True, dropna=False)
    share = metrics.answer_share(recs)
    return {"n": int(len(df)), "n_parse_failures": int(answered["prediction"].isna().sum()),
            "mae_excluded": metrics.mae(recs, "exclude"), "mae_scored": metrics.mae(recs, "fill"),
            "modal_answer": share["modal_answer"], "modal_share": share["answer_share"],
            "modal_label_share": share["label_share"], "collapse": share["collapse"],
            "share_answer_1": float(shares.get(1.0, 0.0)), "share_answer_3": float(shares.get(3.0, 0.0))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--systems", nargs="+", default=["healthllm", "rag"])
    ap.add_argument("--out", default=str(ROOT / "bench" / "cot_format.json"))
    args = ap.parse_args()

    from balms import experiments as ex
    from balms import metrics
    from balms.models.cache import process_calls

    cfg = ex.load("cpu-study")
    calls0 = process_calls()
    systems = {}
    for s in args.systems:
        recs = {f: form_records(cfg, s, f) for f in FORMS}
        labels = metrics.records_frame(recs["answer_line"])["label"]
        systems[s] = {**{f: describe(r) for f, r in recs.items()},
                      # what answering each form's example value on every day would score (the anchor's MAE)
                      **{f"mae_always_{v}": float((labels - v).abs().mean()) for v in EXAMPLE_VALUES},
                      **{f"printed_minus_answer_line_{p}": metrics.paired_difference(recs["printed"],
                                                                                   recs["answer_line"], policy=p)
                         for p in ("exclude", "fill")}}
    calls = {k: v - calls0[k] for k, v in process_calls().items()}
    if calls.get("made"):
        raise SystemExit(f"a replay made {calls['made']} model call(s): the cache lacks some responses")
    out = {"model": cfg.backbones[0], "dataset": "pmdata", "forms": list(FORMS), "systems": systems}
    Path(args.out).write_text(json.dumps(out, indent=1, default=str) + "\n")
    for s, v in systems.items():
        d = v["printed_minus_answer_line_exclude"]
        print(f"{s}: answer_line MAE {v['answer_line']['mae_excluded']:.3f} (share of 1 "
              f"{v['answer_line']['share_answer_1']:.2f}), printed {v['printed']['mae_excluded']:.3f} (share of 3 "
              f"{v['printed']['share_answer_3']:.2f}); printed - answer_line {d['diff']:.3f} "
              f"[{d['ci_low']:.3f}, {d['ci_high']:.3f}], n={d['n_pairs']}")


if __name__ == "__main__":
    main()
