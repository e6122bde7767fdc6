"""Rationale grading over a grid (notebook 07): the two-tier LLM judge on every CoT rationale, verdicts stored
beside each run and resumable, the paper's aggregation, and the deterministic grounding checker."""

from __future__ import annotations

import pandas as pd

from balms.experiments.cohorts import cohort
from balms.experiments.config import ExperimentConfig
from balms.experiments.grid import make_cell, records_of, run_path_of
from balms.records import PredictionRecord


def _window_for_record(cfg: ExperimentConfig, rec: PredictionRecord):
    """Exactly the window the agent saw (same sample, the agents' own channel and context resolution)."""
    from balms.judges.llm_judge import window_for_record

    return window_for_record({rec.dataset: cohort(rec.dataset, cfg).tables}, rec)


def judge_key(cfg: ExperimentConfig, judge_model: str, model_id: str) -> str:
    """A verdict is reused only when judge model, mode, grounding hint, budget and judge code are unchanged."""
    from balms.judges.llm_judge import verdict_key

    return verdict_key(judge_model=judge_model, model_id=model_id, **_judge_options(cfg))


def _judge_backend(cfg: ExperimentConfig, judge_model: str):
    """The judge's backend, after the check that it is known and served (one message before any call)."""
    from balms.models.registry import get_backend
    from balms.models.routing import check_models

    check_models([judge_model], cfg.servers, cache_mode=cfg.cache_mode)
    return get_backend(judge_model, cache_mode=cfg.cache_mode, servers=cfg.servers)


def judge_concurrency(cfg: ExperimentConfig, judge_model: str) -> int:
    """Verdicts at once: the slots of the judge's servers (balms.experiments.scheduler; each server then kept at
    its limit), else `cfg.concurrency` (an embedded or replayed judge)."""
    from balms.experiments.scheduler import configure_slots, model_slots

    return model_slots(cfg, judge_model, configure_slots(cfg, [judge_model])) or cfg.concurrency


def _judge_options(cfg: ExperimentConfig) -> dict:
    """The profile's judge settings as `judge_rationale` keywords (the same for the grid and the case study)."""
    return dict(max_tokens=cfg.judge_max_tokens, justify=cfg.judge_justify, mode=cfg.judge_mode,
                grounding_hint=cfg.judge_grounding_hint, window=cfg.judge_window)


def judge_grid(cfg: ExperimentConfig, *, systems=None, judge_model: str | None = None, datasets=None,
               models=None) -> pd.DataFrame:
    """Judge the CoT rationale of every prediction of the grid; verdicts are written beside each run as
    `<run>.judge.jsonl` (resumable, one line per sample, by `balms.judges.loop`: the same loop and window text as
    `balms judge run`) and returned one row per rationale. Every cell's rationales go through one loop at once, as
    many in flight as the judge's servers have slots (a cell holds only a few). Backend errors are judged again
    (`retry_errors`)."""
    from balms.judges.llm_judge import result_of
    from balms.judges.loop import judge_files

    judge_model = judge_model or cfg.judge_model
    systems = systems or cfg.judge_systems
    judge = _judge_backend(cfg, judge_model)
    cells = []  # (dataset, system, model, records, tables)
    for d in datasets or cfg.judged_datasets:
        tables = {d: cohort(d, cfg).tables}
        seen = set()
        for m0 in models or cfg.backbones:
            for s in systems:
                m = cfg.models_for(s, [m0])[0]  # a system with its own backbone (system_backbones) is judged on it
                if (m, s) in seen:
                    continue
                seen.add((m, s))
                recs = records_of(cfg, [make_cell(cfg, d, s, m, cot=True)])[0]
                if recs:
                    cells.append((d, s, m, recs, tables))
    files = []
    for _, _, _, recs, tables in cells:
        run_path = run_path_of(cfg, recs[0])
        files.append((run_path.with_name(run_path.stem + ".judge.jsonl"), recs, tables))
    verdicts = judge_files(files, judge, judge_model=judge_model, key=judge_key(cfg, judge_model, judge.model_id),
                           retry_errors=cfg.retry_errors, concurrency=judge_concurrency(cfg, judge_model),
                           **_judge_options(cfg))
    rows = []
    for (d, s, m, recs, _), vs in zip(cells, verdicts, strict=True):
        for r, v in zip(recs, vs, strict=True):
            rows.append({"dataset": d, "system": s, "model": m, "sample_id": r.sample_id,
                         "user": r.user, "lookback": r.lookback, "label": r.label,
                         "prediction": r.prediction, "rationale": r.rationale, "source": r.source,
                         "options": r.options, "judge_model": judge_model,
                         "judge_status": v["status"], "judge_unscored_reason": v.get("unscored_reason"),
                         "judge_mode": v.get("mode", "paper"),
                         "judge_grounding_hint": v.get("grounding_hint", False),
                         **dict(v["tier1"]), **dict(v["tier2"]), "judge_result": result_of(v)})
    return pd.DataFrame(rows)


# the case file's window is the GLOBEM INS-W anxiety item the paper's D.1 predicts
CASE_STUDY_TARGET = "PHQ-4 anxiety subscale item (feel_anxious)"


def case_study_items(path=None) -> list[dict]:
    """The paper's case study D.1 as judge inputs, one per quoted rationale (the backbone's name under `name`):
    Qwen's mis-attributes two of four claims to the wrong day, Claude's none (the paper's hand audit)."""
    from balms import paths
    from balms.judges.case_file import load_case, render_case_window

    case = load_case(path or paths.CASE_STUDY_D1)
    base = dict(window_text=render_case_window(case), window=case["window"], gold=case["gold_label"],
                scale=tuple(case["scale"]), target=CASE_STUDY_TARGET)
    return [dict(base, name=name, predicted=r["prediction"], rationale=r["text"],
                 paper_wrong_day=len(r["paper_audit"]["wrong_day_claims"]))
            for name, r in case["rationales"].items()]


# the case study's verdicts, at the profile's runs root: they name the responses the study used, so those travel
# in bundles with the runs' own (balms.bundle)
CASE_STUDY_VERDICTS = "case_study_d1.judge.jsonl"


def judge_case_study(cfg: ExperimentConfig, *, judge_model: str | None = None) -> pd.DataFrame:
    """The profile's judge (model, mode, grounding hint, budget) on case study D.1: one row per rationale with its
    Tier-2 scores, its verdicts written to `CASE_STUDY_VERDICTS`. Calls go through the response cache, so a
    replayed run reproduces it without a model."""
    import json

    from balms.jsonl_store import rewrite_jsonl
    from balms.judges.llm_judge import judge_rationale
    from balms.judges.rubric import TIER2

    judge_model = judge_model or cfg.judge_model
    judge = _judge_backend(cfg, judge_model)
    rows, verdicts = [], []
    for it in case_study_items():
        res = judge_rationale(judge, window_text=it["window_text"], gold=it["gold"], predicted=it["predicted"],
                              rationale=it["rationale"], scale=it["scale"], target=it["target"], window=it["window"],
                              **{k: v for k, v in _judge_options(cfg).items() if k != "window"})  # D.1's own window
        verdicts.append(json.dumps({"case": it["name"], "judge_model": judge_model, **res.model_dump()},
                                   default=str, sort_keys=True))
        rows.append({"rationale": it["name"], "paper_wrong_day_claims": it["paper_wrong_day"],
                     "judge_model": judge_model, "judge_mode": res.mode, "judge_status": res.status,
                     **{d: (float(res.tier2[d]) if res.tier2.get(d) is not None else float("nan"))
                        for d in TIER2}})  # every dimension a number; NaN where unscored
    out = cfg.runs_root() / CASE_STUDY_VERDICTS
    out.parent.mkdir(parents=True, exist_ok=True)
    rewrite_jsonl(out, verdicts)
    return pd.DataFrame(rows)


def judge_vs_grounding(judged: pd.DataFrame, ground: pd.DataFrame) -> dict:
    """Spearman rank correlation, over the rationales both scored, between the judge's Tier-2 overall and the
    grounding checker's share of wrong claims (wrong day or value not found, of the numeric claims checked).
    A judge that tracks grounding gives a negative rho. NaN where fewer than 3 rationales or no variation."""
    from scipy.stats import spearmanr

    keys = ["dataset", "system", "model", "sample_id"]
    if judged.empty or ground.empty or "overall" not in judged:  # nothing scored: no overall column at all
        return {"rho": float("nan"), "p": float("nan"), "n": 0}
    g = ground.assign(wrong_share=(ground["wrong_day"] + ground["value_not_found"])
                      / ground["n_claims"].where(ground["n_claims"] > 0))
    both = judged[judged["judge_status"] == "scored"][keys + ["overall"]].merge(g[keys + ["wrong_share"]], on=keys)
    both = both.dropna(subset=["overall", "wrong_share"])
    if len(both) < 3 or both["overall"].nunique() < 2 or both["wrong_share"].nunique() < 2:
        return {"rho": float("nan"), "p": float("nan"), "n": len(both)}
    rho, pval = spearmanr(both["overall"], both["wrong_share"])
    return {"rho": float(rho), "p": float(pval), "n": len(both)}


def aggregate_judgements(judged: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """The paper's aggregation (balms.judges.llm_judge.judgement_table) over groups of judged rationales."""
    from balms.judges.llm_judge import judgement_table

    if judged.empty:  # nothing judged in this group: the grouping columns, no row
        return pd.DataFrame(columns=list(by))
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
