"""Rationale grading over a grid (notebook 07): the two-tier LLM judge on every CoT rationale, verdicts stored
beside each run and resumable, the paper's aggregation, and the deterministic grounding checker."""

from __future__ import annotations

import json

import pandas as pd

from balms.cellspec import JUDGE_CODE_PATHS, code_fingerprint, digest
from balms.experiments.cohorts import cohort
from balms.experiments.config import ExperimentConfig
from balms.experiments.grid import run_cell, run_path_of
from balms.records import PredictionRecord


def _window_for_record(cfg: ExperimentConfig, rec: PredictionRecord):
    """Exactly the window the agent saw (same sample, the agents' own channel and context resolution)."""
    from balms.judges.llm_judge import window_for_record

    return window_for_record({rec.dataset: cohort(rec.dataset, cfg).tables}, rec)


# the judge's verdicts also depend on the geval mode and the grounding checker it can quote
JUDGE_KEY_CODE_PATHS = (*JUDGE_CODE_PATHS, "judges/geval.py", "judges/grounding.py")


def judge_key(cfg: ExperimentConfig, judge_model: str, model_id: str) -> str:
    """A verdict is reused only when judge model, mode, grounding hint, budget and judge code are unchanged."""
    return digest({"judge_model": judge_model, "model_id": model_id, "justify": cfg.judge_justify,
                   "max_tokens": cfg.judge_max_tokens, "mode": cfg.judge_mode,
                   "grounding_hint": cfg.judge_grounding_hint, "code": code_fingerprint(JUDGE_KEY_CODE_PATHS)})


def judge_grid(cfg: ExperimentConfig, *, systems=None, judge_model: str | None = None, datasets=None,
               models=None) -> pd.DataFrame:
    """Judge the CoT rationale of every prediction of the grid; verdicts are written beside each run as
    `<run>.judge.jsonl` (resumable, one line per sample) and returned one row per rationale."""
    from balms.data.render import render_window
    from balms.judges.llm_judge import JudgeResult, judge_rationale
    from balms.models.registry import get_backend

    judge_model = judge_model or cfg.judge_model
    systems = systems or cfg.judge_systems
    from balms.models.routing import check_models

    check_models([judge_model], cfg.servers, cache_mode=cfg.cache_mode)
    judge = get_backend(judge_model, cache_mode=cfg.cache_mode, servers=cfg.servers)
    jkey = judge_key(cfg, judge_model, judge.model_id)
    rows = []
    for d in datasets or cfg.judged_datasets:
        seen = set()
        for m0 in models or cfg.backbones:
            for s in systems:
                m = cfg.models_for(s, [m0])[0]  # a system with its own backbone (system_backbones) is judged on it
                if (m, s) in seen:
                    continue
                seen.add((m, s))
                recs = run_cell(cfg, d, s, m, cot=True)
                if not recs:
                    continue
                run_path = run_path_of(cfg, recs[0])
                jpath = run_path.with_name(run_path.stem + ".judge.jsonl")
                done = {}
                if jpath.exists():
                    for line in jpath.read_text().splitlines():
                        try:
                            v = json.loads(line)
                        except json.JSONDecodeError:
                            continue  # torn line from a crash: judged again below
                        if v.get("judge_key") == jkey:
                            done[v["sample_id"]] = v
                with jpath.open("a") as fh:
                    for r in recs:
                        if r.sample_id not in done:
                            win = _window_for_record(cfg, r)
                            res = judge_rationale(judge, window_text=render_window(win), gold=r.label,
                                                  max_tokens=cfg.judge_max_tokens, justify=cfg.judge_justify,
                                                  mode=cfg.judge_mode, grounding_hint=cfg.judge_grounding_hint,
                                                  window=win,
                                                  predicted=r.prediction, rationale=r.rationale,
                                                  scale=(win.target.scale_min, win.target.scale_max),
                                                  target=win.target.label,
                                                  meta={"sample_id": r.sample_id, "dataset": d, "system": s,
                                                        "model": m, "user": r.user})
                            done[r.sample_id] = {"sample_id": r.sample_id, "judge_model": judge_model,
                                                 "judge_key": jkey,
                                                 **res.model_dump()}
                            fh.write(json.dumps(done[r.sample_id], default=str) + "\n")
                            fh.flush()
                        v = done[r.sample_id]
                        rows.append({"dataset": d, "system": s, "model": m, "sample_id": r.sample_id,
                                     "user": r.user, "lookback": r.lookback, "label": r.label,
                                     "prediction": r.prediction, "rationale": r.rationale, "source": r.source,
                                     "options": r.options, "judge_model": judge_model,
                                     "judge_status": v["status"], "judge_unscored_reason": v.get("unscored_reason"),
                                     "judge_mode": v.get("mode", "paper"),
                                     "judge_grounding_hint": v.get("grounding_hint", False),
                                     **{k: val for k, val in v["tier1"].items()},
                                     **{k: val for k, val in v["tier2"].items()},
                                     "judge_result": JudgeResult.model_validate(
                                         {k: val for k, val in v.items()
                                          if k not in ("sample_id", "judge_model", "judge_key")})})
    return pd.DataFrame(rows)


def aggregate_judgements(judged: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """The paper's aggregation (balms.judges.llm_judge.judgement_table) over groups of judged rationales."""
    from balms.judges.llm_judge import judgement_table

    results = []
    for row in judged.itertuples():
        r = row.judge_result.model_copy(deep=True)
        r.meta.update({k: getattr(row, k) for k in by})
        results.append(r)
    return judgement_table(results, by=tuple(by))


def ground_grid(cfg: ExperimentConfig, judged: pd.DataFrame) -> pd.DataFrame:
    """Run the deterministic grounding checker on every judged rationale against its own window."""
    from balms.judges.grounding import check_rationale
    from balms.records import PredictionRecord

    rows = []
    for row in judged.itertuples():
        rec = PredictionRecord(sample_id=row.sample_id, dataset=row.dataset, user=row.user,
                               target_date=row.sample_id.split("/")[2], lookback=row.lookback, label=row.label,
                               source=row.source, system=row.system, cot=True, model=row.model, model_id="",
                               options=row.options)
        win = _window_for_record(cfg, rec)
        rep = check_rationale(row.rationale or "", win, n_days=row.lookback)
        rows.append({"dataset": row.dataset, "system": row.system, "model": row.model, "sample_id": row.sample_id,
                     "n_claims": rep.n_claims, "supported": rep.supported, "wrong_day": rep.wrong_day,
                     "value_not_found": rep.value_not_found, "unverifiable": rep.unverifiable,
                     "n_trends": rep.n_trends})
    return pd.DataFrame(rows)
