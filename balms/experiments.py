"""What the notebooks share: cohorts, seeded evaluation samples, and cached, resumable grids of runs.

A notebook builds an `ExperimentConfig` from its papermill parameters, then calls `run_grid`, which runs
(dataset x system x backbone x CoT x look-back) cells through `balms.runner` into
`runs/<profile>/.../<cell>.jsonl`. Every model call goes through the response cache, so re-running a
notebook is cheap and a crashed run resumes where it stopped.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from balms import paths
from balms.data.schema import DatasetTables, Sample
from balms.records import PredictionRecord


@dataclass
class ExperimentConfig:
    """Notebook parameters, in one object. Field names match profiles/*.yaml."""

    profile: str = "demo"
    datasets: list[str] = field(default_factory=lambda: ["diversityone", "pmdata", "globem"])
    systems: list[str] = field(default_factory=lambda: ["healthllm", "rag", "raptor", "phia"])
    backbones: list[str] = field(default_factory=lambda: ["qwen2.5-coder-0.5b"])
    judge_model: str = "qwen2.5-coder-1.5b"
    n_samples: int = 6  # evaluation samples per dataset (0 = all test samples)
    lookbacks: list[int] = field(default_factory=lambda: [7, 14, 21, 28])
    horizon_datasets: list[str] = field(default_factory=lambda: ["pmdata", "globem"])
    horizon_backbone: str | None = None  # default: first backbone
    horizon_systems: list[str] | None = None  # default: all systems
    judge_systems: list[str] = field(default_factory=lambda: ["healthllm", "rag", "phia"])
    judge_max_tokens: int = 1024
    judge_justify: bool = True  # False: scores only (the demo's budget mode, about a fifth of the tokens)
    phia_max_iters: int = 10
    phia_step_tokens: int = 320  # max tokens per PHIA model call (thought + code)
    zs_max_tokens: int = 32
    cot_max_tokens: int = 384
    raptor_summary_tokens: int = 96  # max tokens of one RAPTOR day summary
    raptor_memory: str = "lookback"  # "history" = every earlier day (the paper; one summary per day), "lookback"
    seed: int = 0
    cache_mode: str = "rw"
    concurrency: int = 1
    raw_root: str | None = None  # default: BALMS_RAW_DIR or data/raw

    @classmethod
    def from_params(cls, **params) -> "ExperimentConfig":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(params) - names)
        if unknown:
            raise ValueError(f"unknown experiment parameters {unknown}; known: {sorted(names)}")
        return cls(**params)

    def runs_root(self) -> Path:
        return paths.runs_dir() / self.profile


@dataclass
class Cohort:
    """A dataset's tables, all its samples, and the seeded target-day split."""

    dataset: str
    tables: DatasetTables
    sampleset: object  # balms.data.samples.SampleSet
    train: list[Sample]
    test: list[Sample]

    @property
    def source(self) -> str:
        return self.tables.source

    @property
    def train_mean(self) -> float:
        return float(np.mean([s.label for s in self.train]))

    def eval_samples(self, n: int, seed: int) -> list[Sample]:
        """n seeded test samples (0 = all), sorted by user and date, identical for every system/backbone."""
        pool = sorted(self.test, key=lambda s: (s.user, s.target_date))
        if n and n < len(pool):
            rng = np.random.default_rng(seed)
            pick = rng.choice(len(pool), size=n, replace=False)
            pool = [pool[i] for i in sorted(pick)]
        return pool


@lru_cache(maxsize=None)
def _cohort(dataset: str, lookback: int | None, raw_root: str | None, seed: int) -> Cohort:
    from balms.data.loading import load_dataset
    from balms.data.samples import build_samples, split_target_days

    tables = load_dataset(dataset, Path(raw_root) if raw_root else None)
    ss = build_samples(tables, lookback=lookback)
    train, test = split_target_days(ss.samples, seed=seed)
    return Cohort(dataset, tables, ss, list(train), list(test))


def cohort(dataset: str, cfg: ExperimentConfig | None = None, lookback: int | None = None) -> Cohort:
    cfg = cfg or ExperimentConfig()
    return _cohort(dataset, lookback, cfg.raw_root, cfg.seed)


def with_lookback(sample: Sample, lookback: int) -> Sample:
    """The same target day and window end, with a different look-back length (Figure 5's design)."""
    start = sample.window_end - dt.timedelta(days=lookback - 1)
    return dataclasses.replace(sample, lookback=lookback, window_start=start)


def agent_options(cfg: ExperimentConfig, system: str, cot: bool, extra: dict | None = None) -> dict:
    opts: dict = {"max_tokens": cfg.cot_max_tokens if cot else cfg.zs_max_tokens, "seed": cfg.seed}
    if system == "phia":
        opts["max_iters"] = cfg.phia_max_iters
        opts["max_tokens"] = cfg.phia_step_tokens
        opts["executor"] = "faithful"
    if system == "raptor":
        opts["memory"] = cfg.raptor_memory
        opts["summary_max_tokens"] = cfg.raptor_summary_tokens
    opts.update(extra or {})
    return opts


def _cell_path(cfg: ExperimentConfig, dataset: str, system: str, model: str, cot: bool, lookback: int,
               options: dict) -> Path:
    key = hashlib.sha1(json.dumps(options, sort_keys=True, default=str).encode()).hexdigest()[:8]
    name = f"{system}__{model.replace('/', '_')}__{'cot' if cot else 'zs'}__L{lookback}__{key}.jsonl"
    return cfg.runs_root() / dataset / name


def run_cell(cfg: ExperimentConfig, dataset: str, system: str, model: str, *, cot: bool = False,
             lookback: int | None = None, options: dict | None = None,
             samples: list[Sample] | None = None, progress: bool = True) -> list[PredictionRecord]:
    """Run one (dataset, system, model, cot, look-back, options) cell; cached and resumable."""
    from balms.agents.registry import make_agent
    from balms.models.registry import get_backend
    from balms.runner import load_records, run_samples

    co = cohort(dataset, cfg)
    if samples is None:
        samples = co.eval_samples(cfg.n_samples, cfg.seed)
    if lookback is not None:
        samples = [with_lookback(s, lookback) for s in samples]
    lb = samples[0].lookback if samples else (lookback or 0)
    opts = agent_options(cfg, system, cot, options)
    path = _cell_path(cfg, dataset, system, model, cot, lb, opts)
    path.parent.mkdir(parents=True, exist_ok=True)
    agent = make_agent(system, cot=cot, **opts)
    backend = get_backend(model, cache_mode=cfg.cache_mode)
    run_samples(agent, backend, samples, co.tables, path, concurrency=cfg.concurrency, progress=progress,
                manifest_extra={"profile": cfg.profile, "dataset": dataset, "system": system, "model": model,
                                "cot": cot, "lookback": lb, "options": opts, "source": co.source})
    wanted = {s.sample_id for s in samples}
    return [r for r in load_records(path) if r.sample_id in wanted]


def run_grid(cfg: ExperimentConfig, *, datasets=None, systems=None, models=None, cots=(False,),
             lookbacks=(None,), options: dict | None = None, samples_for=None,
             keep_transcript: bool = False) -> pd.DataFrame:
    """Run every cell of the grid; one row per prediction record (transcripts only when asked: they are big)."""
    rows = []
    for d in datasets or cfg.datasets:
        for L in lookbacks:
            samples = samples_for(d) if samples_for else None
            for m in models or cfg.backbones:
                for s in systems or cfg.systems:
                    for c in cots:
                        recs = run_cell(cfg, d, s, m, cot=c, lookback=L, options=options, samples=samples)
                        drop = set() if keep_transcript else {"transcript"}
                        rows.extend(r.model_dump(exclude=drop) | {"n_transcript": len(r.transcript)}
                                    for r in recs)
    return pd.DataFrame(rows)


def mean_predictor_rows(cfg: ExperimentConfig, datasets=None) -> pd.DataFrame:
    """The paper's reference baseline on the same evaluation samples: train-set mean, raw and rounded."""
    out = []
    for d in datasets or cfg.datasets:
        co = cohort(d, cfg)
        ev = co.eval_samples(cfg.n_samples, cfg.seed)
        y = np.array([s.label for s in ev], dtype=float)
        m = co.train_mean
        out.append({"dataset": d, "source": co.source, "n": len(ev), "train_mean": m,
                    "mae_raw_mean": float(np.abs(y - m).mean()) if len(y) else np.nan,
                    "mae_rounded_mean": float(np.abs(y - round(m)).mean()) if len(y) else np.nan})
    return pd.DataFrame(out)


def config_from_namespace(ns: dict) -> ExperimentConfig:
    """Build the config from a notebook's globals (its parameters cell plus papermill's injected one)."""
    names = {f.name for f in dataclasses.fields(ExperimentConfig)}
    return ExperimentConfig.from_params(**{k: v for k, v in ns.items() if k in names})


CELL_KEYS = ["dataset", "system", "model", "cot", "lookback"]


def summarize(df: pd.DataFrame, by: list[str] | None = None, *, cfg: ExperimentConfig | None = None,
              n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """One row per cell: n, MAE with a participant-bootstrap 95% CI, parse failures, mode collapse, cost.

    Parse failures are excluded from MAE (the paper's convention as we read it) and always reported beside it;
    `mae_worst` charges each failure the worst possible error on the scale, `mae_mean_fill` the mean
    predictor's. With `cfg`, each cell is also compared with the mean predictor on the same samples
    (paired difference with a participant-bootstrap CI).
    """
    from balms import metrics

    by = by or [k for k in CELL_KEYS if k in df.columns]
    rows = []
    for key, g in df.groupby(by, dropna=False, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        row = dict(zip(by, key, strict=True))
        kw = {}
        if cfg is not None and "dataset" in row:
            co = cohort(row["dataset"], cfg)
            kw = {"mean_prediction": co.train_mean,
                  "scale": (co.tables.target.scale_min, co.tables.target.scale_max)}
        row.update(metrics.summarize_run(g, n_boot=n_boot, seed=seed, **kw))
        row["mean_latency_s"] = round(float(g["latency_s"].mean()), 1)  # 0.1 s: re-runs from the cache agree
        row["mean_prompt_tokens"] = float(g["prompt_tokens"].mean())
        row["mean_completion_tokens"] = float(g["completion_tokens"].mean())
        row["source"] = ";".join(sorted(set(g["source"])))
        rows.append(row)
    return pd.DataFrame(rows)


PAPER_SYSTEM_NAMES = {"healthllm": "Health-LLM", "rag": "RAG", "raptor": "Raptor", "phia": "PHIA"}


def table3_paper_vs_ours(summary: pd.DataFrame, mean_pred: pd.DataFrame, *, cot: bool) -> pd.DataFrame:
    """Table 3 layout: one row per (dataset, system); the paper's MAE for each of its backbones, then ours.

    Where our model IS a paper backbone (paper profile), `diff` is ours minus the paper's same cell.
    """
    from balms.report import paper_table

    paper = paper_table("table3_zero_shot_mae")
    rows = []
    for (d, s), g in summary[summary["cot"] == cot].groupby(["dataset", "system"], sort=False):
        col = f"{d}_{'cot_' if cot else ''}mae"
        pr = paper[paper["system"] == PAPER_SYSTEM_NAMES.get(s, s)]
        row = {"dataset": d, "system": PAPER_SYSTEM_NAMES.get(s, s)}
        for b, v in zip(pr["backbone"], pr[col], strict=True):
            row[f"paper {b}"] = v
        mp = paper.loc[paper["system"] == "Mean Predictor", f"{d}_mae"]
        row["paper mean predictor"] = float(mp.iloc[0]) if len(mp) else np.nan
        for r in g.itertuples():
            row[f"ours {r.model}"] = r.mae
            row[f"ours {r.model} CI"] = f"[{r.mae_ci_low:.2f}, {r.mae_ci_high:.2f}]"
            row[f"ours {r.model} parse fail"] = r.parse_failure_rate
            if f"paper {r.model}" in row:
                row[f"diff {r.model}"] = r.mae - row[f"paper {r.model}"]
        m = mean_pred[mean_pred["dataset"] == d]
        row["ours mean predictor"] = float(m["mae_raw_mean"].iloc[0]) if len(m) else np.nan
        row["n"] = int(g["n"].max())
        row["source"] = ";".join(sorted(set(g["source"])))
        rows.append(row)
    return pd.DataFrame(rows)


# ------------------------------------------------------------------ rationale judging (notebook 07)


def _window_for_record(cfg: ExperimentConfig, rec: PredictionRecord):
    """Exactly the window the agent saw (same sample, the agents' own channel and context resolution)."""
    from balms.judges.llm_judge import window_for_record

    return window_for_record({rec.dataset: cohort(rec.dataset, cfg).tables}, rec)


def judge_grid(cfg: ExperimentConfig, *, systems=None, judge_model: str | None = None, datasets=None,
               models=None) -> pd.DataFrame:
    """Judge the CoT rationale of every prediction of the grid; verdicts are written beside each run as
    `<run>.judge.jsonl` (resumable, one line per sample) and returned one row per rationale."""
    from balms.data.render import render_window
    from balms.judges.llm_judge import JudgeResult, judge_rationale
    from balms.models.registry import get_backend

    judge_model = judge_model or cfg.judge_model
    systems = systems or cfg.judge_systems
    judge = get_backend(judge_model, cache_mode=cfg.cache_mode)
    rows = []
    for d in datasets or cfg.datasets:
        for m in models or cfg.backbones:
            for s in systems or cfg.systems:
                recs = run_cell(cfg, d, s, m, cot=True)
                if not recs:
                    continue
                run_path = _cell_path(cfg, d, s, m, True, recs[0].lookback, agent_options(cfg, s, True))
                jpath = run_path.with_name(run_path.stem + ".judge.jsonl")
                done = {}
                if jpath.exists():
                    for line in jpath.read_text().splitlines():
                        try:
                            v = json.loads(line)
                        except json.JSONDecodeError:
                            continue  # torn line from a crash: judged again below
                        if v.get("judge_model") == judge_model and v.get("justify", True) == cfg.judge_justify:
                            done[v["sample_id"]] = v
                with jpath.open("a") as fh:
                    for r in recs:
                        if r.sample_id not in done:
                            win = _window_for_record(cfg, r)
                            res = judge_rationale(judge, window_text=render_window(win), gold=r.label,
                                                  max_tokens=cfg.judge_max_tokens, justify=cfg.judge_justify,
                                                  predicted=r.prediction, rationale=r.rationale,
                                                  scale=(win.target.scale_min, win.target.scale_max),
                                                  target=win.target.label,
                                                  meta={"sample_id": r.sample_id, "dataset": d, "system": s,
                                                        "model": m, "user": r.user})
                            done[r.sample_id] = {"sample_id": r.sample_id, "judge_model": judge_model,
                                                 **res.model_dump()}
                            fh.write(json.dumps(done[r.sample_id], default=str) + "\n")
                            fh.flush()
                        v = done[r.sample_id]
                        rows.append({"dataset": d, "system": s, "model": m, "sample_id": r.sample_id,
                                     "user": r.user, "lookback": r.lookback, "label": r.label,
                                     "prediction": r.prediction, "rationale": r.rationale, "source": r.source,
                                     "options": r.options, "judge_model": judge_model,
                                     "judge_status": v["status"], "judge_unscored_reason": v.get("unscored_reason"),
                                     **{k: val for k, val in v["tier1"].items()},
                                     **{k: val for k, val in v["tier2"].items()},
                                     "judge_result": JudgeResult.model_validate(
                                         {k: val for k, val in v.items() if k not in ("sample_id", "judge_model")})})
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


@dataclass
class GridResult:
    """What a results notebook needs from a grid: records, per-cell summary, data source and model caption."""

    records: pd.DataFrame
    summary: pd.DataFrame
    source: str  # "real" | "synthetic" | "mixed"
    caption: str  # model names, CPU models labelled as such


def grid_result(cfg: ExperimentConfig, *, by: list[str] | None = None, **grid_kw) -> GridResult:
    """`run_grid` + `summarize` + the labels every table and figure carries."""
    from balms.report import model_caption, source_label

    recs = run_grid(cfg, **grid_kw)
    summ = summarize(recs, by=by, cfg=cfg)
    return GridResult(recs, summ, source_label(recs["source"]), model_caption(grid_kw.get("models") or cfg.backbones))
