"""The benchmark grid: each (dataset, system, model, CoT, look-back, options) cell as a `CellSpec`, run through
`balms.runner` into `runs/<profile>/<dataset>/<spec run name>.jsonl`, cached and resumable.

A cell's spec carries the data and code fingerprints, so a library change re-runs the affected cells into new
run files (their unchanged model calls come from the response cache), never reusing records computed by
other code.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from balms.cellspec import CellSpec, code_fingerprint, run_name
from balms.data.schema import Sample
from balms.experiments.cohorts import cohort, with_lookback
from balms.experiments.config import ExperimentConfig
from balms.records import PredictionRecord

PROMPT_SYSTEMS = ("healthllm", "rag", "raptor")  # the systems whose prompt template has a style


def agent_options(cfg: ExperimentConfig, system: str, cot: bool, extra: dict | None = None,
                  model: str | None = None) -> dict:
    """The options a system gets from the configuration (then `extra`, e.g. an ablation's channels). Token
    budgets follow the model: reasoning models get their own (balms.models.budgets.budget_for)."""
    from balms.agents.registry import agent_options as accepted
    from balms.models.budgets import budget_for

    def budget(role: str) -> int:
        return budget_for(model, role, cfg) if model else int(getattr(cfg, {
            "zs": "zs_max_tokens", "cot": "cot_max_tokens", "phia_step": "phia_step_tokens",
            "raptor_summary": "raptor_summary_tokens"}[role]))

    opts: dict = {"max_tokens": budget("cot" if cot else "zs"), "seed": cfg.seed}
    if system == "phia":
        opts.update(max_iters=cfg.phia_max_iters, max_tokens=budget("phia_step"), executor="faithful",
                    primer=cfg.phia_primer, fence_stop=cfg.phia_fence_stop, frame_span=cfg.phia_frame_span,
                    sleep_recipe=cfg.phia_sleep_recipe)
        if cfg.phia_force_answer:
            opts["force_answer"] = True
    if system == "raptor":
        opts.update(memory=cfg.raptor_memory, summary_max_tokens=budget("raptor_summary"))
    if system in PROMPT_SYSTEMS and "style" in accepted(system):
        opts["style"] = cfg.prompt_style
    if system in PROMPT_SYSTEMS and cot and cfg.prompt_style == "paper" and "cot_format" in accepted(system):
        opts["cot_format"] = cfg.cot_format
    if system in PROMPT_SYSTEMS and cot and cfg.cot_force_answer:
        opts["force_answer"] = True
        if cfg.cot_force_missing:
            opts["force_missing"] = True
    opts.update(extra or {})
    return opts


def eval_samples(cfg: ExperimentConfig, dataset: str, lookback: int | None = None, *, system: str | None = None,
                 cot: bool = False) -> list[Sample]:
    """A cell's seeded evaluation samples (`cfg.n_for`) of `dataset`, at `lookback` days, else `cfg.lookback`, else
    the dataset's own look-back."""
    samples = cohort(dataset, cfg).eval_samples(cfg.n_for(dataset, system, cot), cfg.seed, cfg.n_samples)
    lookback = lookback if lookback is not None else cfg.lookback
    return [with_lookback(s, lookback) for s in samples] if lookback is not None else samples


@dataclass
class Cell:
    """A cell ready to run: its spec, its samples and the agent built from the configuration."""

    spec: CellSpec
    samples: list[Sample]
    agent: object


def make_cell(cfg: ExperimentConfig, dataset: str, system: str, model: str, *, cot: bool = False,
              lookback: int | None = None, options: dict | None = None,
              samples: list[Sample] | None = None) -> Cell:
    """The spec of one cell, its samples (the config's seeded evaluation samples unless given) and agent."""
    from balms.agents.registry import make_agent
    from balms.models.registry import get_backend

    if samples is None:
        samples = eval_samples(cfg, dataset, lookback, system=system, cot=cot)
    elif lookback is not None:  # given samples keep their own look-back unless one is asked for
        samples = [with_lookback(s, lookback) for s in samples]
    lb = samples[0].lookback if samples else int(lookback or 0)
    agent = make_agent(system, cot=cot, **agent_options(cfg, system, cot, options, model=model))
    backend = get_backend(model, cache_mode=cfg.cache_mode, servers=cfg.servers)
    opts = agent.options()
    spec = CellSpec(dataset=dataset, system=system, model=model, model_id=backend.model_id, cot=cot, lookback=lb,
                    options=opts, prompt_style=opts.get("style"), sample_ids=tuple(s.sample_id for s in samples),
                    data_fingerprint=cohort(dataset, cfg).fingerprint, code_fingerprint=code_fingerprint())
    return Cell(spec, samples, agent)


def run_cell_spec(cfg: ExperimentConfig, cell: Cell, *, progress: bool = True) -> list[PredictionRecord]:
    """Run (or resume) one cell; returns its records in sample order."""
    from balms.models.registry import get_backend
    from balms.runner import load_records, run_samples

    spec = cell.spec
    from balms.experiments.batching import prefetch_cell

    prefetch_cell(cfg, cell)  # Claude via the Message Batches API when cfg.anthropic_batch (single-call cells)
    backend = get_backend(spec.model, cache_mode=cfg.cache_mode, servers=cfg.servers)
    path = spec.run_path(cfg.runs_root())
    co = cohort(spec.dataset, cfg)
    run_samples(cell.agent, backend, cell.samples, co.tables, path, concurrency=cfg.concurrency,
                progress=progress, spec=spec, manifest_extra={"profile": cfg.profile, "source": co.source})
    by_id = {r.sample_id: r for r in load_records(path)}
    return [by_id[s.sample_id] for s in cell.samples if s.sample_id in by_id]


def run_cell(cfg: ExperimentConfig, dataset: str, system: str, model: str, *, cot: bool = False,
             lookback: int | None = None, options: dict | None = None,
             samples: list[Sample] | None = None, progress: bool = True) -> list[PredictionRecord]:
    """Build the cell and run it; cached and resumable."""
    cell = make_cell(cfg, dataset, system, model, cot=cot, lookback=lookback, options=options, samples=samples)
    return run_cell_spec(cfg, cell, progress=progress)


def describe_cell(spec: CellSpec, options: dict | None = None) -> str:
    """One line naming a cell, for progress output: "pmdata rag qwen2.5-coder-0.5b zs L14 [channels=...]"."""
    extra = " ".join(f"{k}={v}" for k, v in (options or {}).items())
    if len(extra) > 60:
        extra = extra[:57] + "..."
    return " ".join(x for x in (spec.dataset, spec.system, spec.model, "cot" if spec.cot else "zs",
                                f"L{spec.lookback}", extra) if x)


def run_grid(cfg: ExperimentConfig, *, datasets=None, systems=None, models=None, cots=(False,),
             lookbacks=(None,), options: dict | None = None, samples_for=None,
             keep_transcript: bool = False, progress: bool = True) -> pd.DataFrame:
    """Run every cell of the grid; one row per prediction record (transcripts only when asked: they are big).

    With `progress`, each cell is announced on stderr ("[<notebook>] cell 3/12: pmdata rag <model> zs L14",
    the notebook from BALMS_NOTEBOOK, which the Makefile sets) before the runner's bar, so a long `make paper`
    shows where it is; papermill passes the kernel's stderr on to the terminal."""
    from balms.models.routing import check_models

    # a system with its own backbone (cfg.system_backbones) runs on that one instead of each of `models`; CoT
    # cells only for cfg.cot_systems (None: every system), in whichever notebook asks (02, 04, 06)
    combos = list(dict.fromkeys((d, L, m2, s, c) for d in (datasets or cfg.datasets) for L in lookbacks
                                for m in (models or cfg.backbones) for s in (systems or cfg.systems)
                                for m2 in cfg.models_for(s, [m]) for c in cots if cfg.runs_cot(s) or not c))
    # before the first call: every model known and served somewhere (one message naming each that is not)
    check_models(list(dict.fromkeys(m for _, _, m, _, _ in combos)), cfg.servers, cache_mode=cfg.cache_mode)
    from balms.models.cache import process_calls

    where = os.environ.get("BALMS_NOTEBOOK")
    calls0 = process_calls()
    samples_of: dict = {}
    rows = []
    for k, (d, L, m, s, c) in enumerate(combos, 1):
        if (d, L) not in samples_of:
            samples_of[(d, L)] = samples_for(d) if samples_for else None
        cell = make_cell(cfg, d, s, m, cot=c, lookback=L, options=options, samples=samples_of[(d, L)])
        if progress:
            print(f"{f'[{where}] ' if where else ''}cell {k}/{len(combos)}: {describe_cell(cell.spec, options)}",
                  file=sys.stderr, flush=True)
        recs = run_cell_spec(cfg, cell, progress=progress)
        drop = set() if keep_transcript else {"transcript"}
        rows.extend(r.model_dump(exclude=drop) | {
            "n_transcript": len(r.transcript), "cell_key": (r.cell or {}).get("key"),
            "forced": any(st.kind in ("forced_answer", "forced_finish") for st in r.transcript)}
            for r in recs)
    if progress:
        calls = {k: v - calls0[k] for k, v in process_calls().items()}
        print(f"{f'[{where}] ' if where else ''}grid of {len(combos)} cells, {len(rows)} records: "
              f"{calls['made']} model calls made, {calls['from_cache']} answered from the response cache "
              f"(cache mode {cfg.cache_mode}; records already on disk need neither)", file=sys.stderr, flush=True)
    return pd.DataFrame(rows)


def horizon_grid(cfg: ExperimentConfig, *, progress: bool = True) -> pd.DataFrame:
    """Notebook 03's look-back sweep: the same target days (those with `max(lookbacks)` days of history) at every
    look-back, for `horizon_systems` with the horizon backbone on `horizon_datasets`."""
    max_lb = max(cfg.lookbacks)
    return run_grid(cfg, datasets=cfg.horizon_datasets, models=[cfg.horizon_model], lookbacks=cfg.lookbacks,
                    systems=cfg.horizon_systems or cfg.systems, progress=progress,
                    samples_for=lambda d: cohort(d, cfg, lookback=max_lb).eval_samples(cfg.n_for(d), cfg.seed,
                                                                                     cfg.n_samples))


def phia_executor_grid(cfg: ExperimentConfig, *, keep_transcript: bool = True, progress: bool = True) -> pd.DataFrame:
    """Notebook 05's PHIA cells, once per executor contract, with an `executor` column."""
    return pd.concat([run_grid(cfg, systems=["phia"], options={"executor": e}, keep_transcript=keep_transcript,
                               progress=progress).assign(executor=e) for e in cfg.executors], ignore_index=True)


@dataclass
class GridResult:
    """What a results notebook needs from a grid: records, per-cell summary, data source and model caption."""

    records: pd.DataFrame
    summary: pd.DataFrame
    source: str  # "real" | "synthetic" | "mixed"
    caption: str  # model names, CPU models labelled as such


def grid_result(cfg: ExperimentConfig, *, by: list[str] | None = None, **grid_kw) -> GridResult:
    """`run_grid` + `summarize` + the labels every table and figure carries."""
    from balms.experiments.summaries import summarize
    from balms.report import model_caption, source_label

    recs = run_grid(cfg, **grid_kw)
    summ = summarize(recs, by=by, cfg=cfg)
    return GridResult(recs, summ, source_label(recs["source"]), model_caption(models_run(recs)))


def models_run(records: pd.DataFrame) -> list[str]:
    """The models that actually produced the records, in first-seen order (titles name these, not the config)."""
    return list(dict.fromkeys(records["model"])) if "model" in records and len(records) else []


def run_path_of(cfg: ExperimentConfig, rec: PredictionRecord) -> Path:
    """The run file a record came from (its cell key names it)."""
    name = run_name(rec.system, rec.model, rec.cot, rec.lookback, (rec.cell or {}).get("key"))
    return cfg.runs_root() / rec.dataset / f"{name}.jsonl"
