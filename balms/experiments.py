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
    phia_max_iters: int = 10
    zs_max_tokens: int = 32
    cot_max_tokens: int = 384
    memory_days: int = 0  # RAG/RAPTOR history limit in days before the window end (0 = all)
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
        opts["executor"] = "faithful"
    if system in ("rag", "raptor") and cfg.memory_days:
        opts["memory_days"] = cfg.memory_days
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
    agent = make_agent(system, cot=cot, **opts)
    backend = get_backend(model, cache_mode=cfg.cache_mode)
    run_samples(agent, backend, samples, co.tables, path, concurrency=cfg.concurrency, progress=progress,
                manifest_extra={"profile": cfg.profile, "dataset": dataset, "system": system, "model": model,
                                "cot": cot, "lookback": lb, "options": opts, "source": co.source})
    wanted = {s.sample_id for s in samples}
    return [r for r in load_records(path) if r.sample_id in wanted]


def run_grid(cfg: ExperimentConfig, *, datasets=None, systems=None, models=None, cots=(False,),
             lookbacks=(None,), options: dict | None = None, samples_for=None) -> pd.DataFrame:
    """Run every cell of the grid; returns one row per prediction record (see records_frame)."""
    rows = []
    for d in datasets or cfg.datasets:
        for L in lookbacks:
            samples = samples_for(d) if samples_for else None
            for m in models or cfg.backbones:
                for s in systems or cfg.systems:
                    for c in cots:
                        recs = run_cell(cfg, d, s, m, cot=c, lookback=L, options=options, samples=samples)
                        rows.extend(r.model_dump(exclude={"transcript"}) | {"n_transcript": len(r.transcript)}
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


def sources(cfg: ExperimentConfig, datasets=None) -> dict[str, str]:
    return {d: cohort(d, cfg).source for d in datasets or cfg.datasets}
