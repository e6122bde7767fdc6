"""The benchmark grid: each (dataset, system, model, CoT, look-back, options) cell as a `CellSpec`, run through
`balms.runner` into `runs/<profile>/<dataset>/<spec run name>.jsonl`, cached and resumable.

A cell's spec carries the data and code fingerprints, so a library change re-runs the affected cells into new
run files (their unchanged model calls come from the response cache), never reusing records computed by
other code.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from balms.cellspec import CellSpec, cell_code_fingerprint, describe_cell, run_name
from balms.data.schema import Sample
from balms.experiments.cohorts import cohort, with_lookback
from balms.experiments.config import ExperimentConfig
from balms.experiments.errors import check_grid, grid_line
from balms.records import PredictionRecord


def agent_options(cfg: ExperimentConfig, system: str, cot: bool, extra: dict | None = None,
                  model: str | None = None) -> dict:
    """The options a system gets from the configuration (then `extra`): the systems registry's rule."""
    from balms.agents.registry import config_options

    return config_options(system, cfg, cot, model, extra)


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

    @classmethod
    def from_spec(cls, spec: CellSpec, cfg: ExperimentConfig | None = None) -> "Cell":
        """Rebuild a cell from its spec alone (a run manifest's `cell`): the agent from the recorded options, the
        samples from the recorded ids. `cfg` gives only where the data is (raw_root) and the cache mode. The data
        must be the data the spec was made on; code changed since gives a new spec (a warning says so)."""
        return cell_from_spec(spec, cfg)


def make_cell(cfg: ExperimentConfig, dataset: str, system: str, model: str, *, cot: bool = False,
              lookback: int | None = None, options: dict | None = None,
              samples: list[Sample] | None = None, key_only: bool = False) -> Cell:
    """The spec of one cell, its samples (the config's seeded evaluation samples unless given) and agent.
    `key_only`: no backend is built (the spec is wanted, not a run)."""
    from balms.agents.registry import build_agent
    from balms.models.registry import backend_module, canonical_name, get_backend

    if samples is None:
        samples = eval_samples(cfg, dataset, lookback, system=system, cot=cot)
    elif lookback is not None:  # given samples keep their own look-back unless one is asked for
        samples = [with_lookback(s, lookback) for s in samples]
    lb = samples[0].lookback if samples else int(lookback or 0)
    agent = build_agent(system, cfg, cot=cot, model=model, extra=options)
    # the plan computes keys without a server: the replay stand-in reports the registry's exact id
    backend = get_backend(model, cache_mode="replay" if key_only else cfg.cache_mode, servers=cfg.servers)
    opts = agent.options()
    spec = CellSpec(dataset=dataset, system=system, model=canonical_name(model), model_id=backend.model_id,
                    request_additions=getattr(backend, "request_additions", {}), cot=cot, lookback=lb,
                    options=opts, prompt_style=opts.get("style"), sample_ids=tuple(s.sample_id for s in samples),
                    data_fingerprint=cohort(dataset, cfg).fingerprint,
                    code_fingerprint=cell_code_fingerprint(agent, backend_module(model)))
    return Cell(spec, samples, agent)


def cell_from_spec(spec: CellSpec, cfg: ExperimentConfig | None = None) -> Cell:
    """See `Cell.from_spec`."""
    import warnings

    from balms.agents.registry import get_system, make_agent
    from balms.data.schema import DataError
    from balms.models.registry import backend_module

    cfg = cfg or ExperimentConfig()
    co = cohort(spec.dataset, cfg)
    if spec.data_fingerprint and co.fingerprint != spec.data_fingerprint:
        raise DataError(co.tables.raw_dir or spec.dataset, f"the spec {spec.key()} was made on data with fingerprint "
                        f"{spec.data_fingerprint}, the data here has {co.fingerprint}: not the same data")
    by_day = {(s.user, s.target_date.isoformat()): s for s in co.sampleset.samples}
    samples, missing = [], []
    for sid in spec.sample_ids:
        _, user, day, _ = sid.split("/")
        s = by_day.get((user, day))
        if s is None:
            missing.append(sid)
        else:
            samples.append(with_lookback(s, spec.lookback) if s.lookback != spec.lookback else s)
    if missing:
        raise DataError(co.tables.raw_dir or spec.dataset, f"spec {spec.key()}: {len(missing)} sample(s) not in the "
                        f"data, e.g. {missing[:3]}")
    accepted = set(get_system(spec.system).accepted_options())
    opts = {k: v for k, v in spec.options.items() if k in accepted}
    if isinstance(opts.get("limits"), dict):
        from balms.sandbox import SandboxLimits

        opts["limits"] = SandboxLimits(**opts["limits"])
    agent = make_agent(spec.system, cot=spec.cot, **opts)
    rebuilt = spec.model_copy(update={"code_fingerprint": cell_code_fingerprint(agent, backend_module(spec.model))})
    differs = sorted(k for k in set(spec.options) | set(agent.options())
                     if json.dumps(spec.options.get(k), sort_keys=True, default=str)
                     != json.dumps(agent.options().get(k), sort_keys=True, default=str))
    if differs:
        raise ValueError(f"spec {spec.key()}: the agent rebuilt from its options records {differs} differently; "
                         "the spec was made by other agent code")
    if rebuilt.key() != spec.key():
        warnings.warn(f"cell {spec.key()} rebuilt under the current code is {rebuilt.key()} (code fingerprint "
                      f"{spec.code_fingerprint} -> {rebuilt.code_fingerprint}): it runs into a new run file",
                      stacklevel=2)
    return Cell(rebuilt, samples, agent)


def records_of(cfg: ExperimentConfig, cells: list[Cell], *, progress: bool = True) -> list[list[PredictionRecord]]:
    """Run (or resume) built cells through the scheduler (its stops, spending cap and deadlines): each cell's records
    in sample order, what `run` tabulates and the judge reads. A cell whose every sample failed raises its first
    error; a spending cap reached raises SpendingCapReached saying how far it got."""
    from balms.experiments.budget import SpendingCapReached
    from balms.experiments.scheduler import schedule_cells

    report = schedule_cells(cfg, cells, progress=progress)
    if report.stopped:
        raise SpendingCapReached(report.stopped)
    return report.records


def build_cell(cfg: ExperimentConfig, decl, samples_of: dict | None = None, *, key_only: bool = False) -> Cell:
    """A declared cell (balms.experiments.cells.CellDecl) made runnable: its samples, agent and spec.
    `samples_of` shares the sample draw between the cells of one grid (keyed by dataset and draw look-back)."""
    samples = None
    if decl.sample_lookback is not None:
        key = (decl.dataset, decl.sample_lookback)
        if samples_of is None or key not in samples_of:
            drawn = cohort(decl.dataset, cfg, lookback=decl.sample_lookback).eval_samples(
                cfg.n_for(decl.dataset), cfg.seed, cfg.n_samples)
            if samples_of is None:
                samples_of = {}
            samples_of[key] = drawn
        samples = samples_of[key]
    elif decl.n_samples is not None:  # a subset of the cell's usual draw: the first n of the same nested order
        samples = cohort(decl.dataset, cfg).eval_samples(decl.n_samples, cfg.seed, cfg.n_samples)
    return make_cell(cfg, decl.dataset, decl.system, decl.model, cot=decl.cot, lookback=decl.lookback,
                     options=decl.extra or None, samples=samples, key_only=key_only)


def run(cfg: ExperimentConfig, what, part: str | None = None, *, models=None, keep_transcript: bool = False,
        progress: bool = True) -> pd.DataFrame:
    """The one way to run cells (the notebooks, `balms run --notebooks`, the tests). `what`: a notebook's name (its
    cells as balms.experiments.cells declares them, or one `part` of them), several notebooks' names (their cells in
    one scheduler: `balms run --notebooks 01_prediction,02_cot`), or cells: declarations (`CellDecl`, e.g.
    `adhoc_cells(...)` for a question of one's own) or built `Cell`s (`make_cell`, `Cell.from_spec`). `models`: only
    the cells on these models (a node serving some of them at a time: `balms deploy local`).

    All in flight (balms.experiments.scheduler: every server busy, each cell resumable, its records the same as
    run alone); a cell declared twice runs once and is re-read. One row per prediction record, with the
    declarations' labels as columns (transcripts only when asked: they are big).

    With `progress`, the cells are announced on stderr ("[<notebook>] cell 3/12: pmdata rag <model> zs L14", the
    notebook from BALMS_NOTEBOOK, which the Makefile sets) and the scheduler says each one done, so a long
    `make paper` shows where it is; papermill passes the kernel's stderr on to the terminal. A cell whose every
    sample failed stops the grid with its first error; a spending cap reached stops it saying how far it got."""
    from balms.models.cache import process_calls
    from balms.models.routing import check_models

    decls = _declarations(cfg, what, part)
    if models is not None:
        decls = _on_models(decls, models)
    # before the first call: every model known and served somewhere (one message naming each that is not)
    check_models(list(dict.fromkeys(_model_of(c) for c in decls)), cfg.servers,
                 cache_mode=cfg.cache_mode)
    where = os.environ.get("BALMS_NOTEBOOK")
    calls0 = process_calls()
    samples_of: dict = {}
    cells = [decl if isinstance(decl, Cell) else build_cell(cfg, decl, samples_of) for decl in decls]
    if progress:
        for k, (decl, cell) in enumerate(zip(decls, cells, strict=True), 1):
            extra = None if isinstance(decl, Cell) else decl.extra
            print(f"{f'[{where}] ' if where else ''}cell {k}/{len(decls)}: {describe_cell(cell.spec, extra)}",
                  file=sys.stderr, flush=True)
    rows = []
    drop = set() if keep_transcript else {"transcript"}
    for decl, recs in zip(decls, records_of(cfg, cells, progress=progress), strict=True):
        labels = {} if isinstance(decl, Cell) else decl.label_values
        rows.extend(r.model_dump(exclude=drop) | labels | {
            "n_transcript": len(r.transcript), "cell_key": (r.cell or {}).get("key"),
            "forced": any(st.kind in ("forced_answer", "forced_finish") for st in r.transcript)}
            for r in recs)
    if progress:
        calls = {k: v - calls0[k] for k, v in process_calls().items()}
        n_err = sum(r["status"] == "error" for r in rows)
        print(f"{f'[{where}] ' if where else ''}"
              + grid_line(len(decls), len(rows), n_err, calls["made"], calls["from_cache"], cfg.cache_mode),
              file=sys.stderr, flush=True)
    check_grid(cfg.allow_errors, rows)  # any error record: stop once the whole grid ran (allow_errors: go on)
    return pd.DataFrame(rows)


def _declarations(cfg: ExperimentConfig, what, part: str | None) -> list:
    """`run`'s cells: a notebook's declared cells (or one part), several notebooks' cells, or the cells given."""
    from balms.experiments.cells import NOTEBOOKS, cells_for

    names = [what] if isinstance(what, str) else list(what)
    if not all(isinstance(n, str) for n in names):  # cells given
        if part is not None:
            raise ValueError("run: `part` selects among a notebook's declared cells, not among cells given")
        return names
    unknown = [nb for nb in names if nb not in NOTEBOOKS]
    if unknown:
        raise ValueError(f"unknown notebook(s) {unknown}; known: {list(NOTEBOOKS)}")
    declared = [c for nb in names for c in cells_for(nb, cfg)]
    if part is not None and part not in {c.part for c in declared}:
        parts = sorted({c.part for c in declared})
        raise ValueError(f"{', '.join(names)} declares no part {part!r}; its parts: {parts}")
    return [c for c in declared if part is None or c.part == part]


def _model_of(c) -> str:
    """The model of a declaration or a built cell."""
    return c.spec.model if isinstance(c, Cell) else c.model


def _on_models(decls: list, models) -> list:
    """The cells among `decls` on `models` (registry spellings accepted); a model none of them runs is an error."""
    from balms.models.registry import canonical_name

    want = [canonical_name(m) for m in models]
    have = list(dict.fromkeys(_model_of(c) for c in decls))
    idle = [m for m in want if m not in have]
    if idle:
        raise ValueError(f"no cell runs on {', '.join(idle)}; the cells' models: {', '.join(have)}")
    return [c for c in decls if _model_of(c) in want]


def declared_builds(cfg: ExperimentConfig) -> Iterator[tuple]:
    """(declaration, runnable cell, first) for every cell declaration of the profile's notebooks, in order, built
    without a backend; `first` is False when an earlier declaration has the same spec key (one cell: it counts
    under the first notebook that runs it). The one dedup loop: `unique_cells` and the plan read it."""
    from balms.experiments.cells import declared_cells

    seen, samples_of = set(), {}
    for decl in declared_cells(cfg):
        cell = build_cell(cfg, decl, samples_of, key_only=True)
        key = cell.spec.key()
        yield decl, cell, key not in seen
        seen.add(key)


def unique_cells(cfg: ExperimentConfig) -> list[tuple]:
    """(declaration, runnable cell) for every cell the profile's notebooks declare, each once (the first notebook
    that runs it; equal spec keys are one cell): what the plan prices and which run files are current."""
    return [(decl, cell) for decl, cell, first in declared_builds(cfg) if first]


@dataclass
class GridResult:
    """What a results notebook needs from a grid: records, per-cell summary, data source and model caption."""

    records: pd.DataFrame
    summary: pd.DataFrame
    source: str  # "real" | "synthetic" | "mixed"
    caption: str  # model names, CPU models labelled as such


def grid_result(cfg: ExperimentConfig, notebook: str | None = None, *, by: list[str] | None = None,
                **grid_kw) -> GridResult:
    """The notebook's declared cells (else an ad-hoc grid: `adhoc_cells`'s arguments) run, `summarize`d, with the
    labels every table and figure carries."""
    from balms.data.loading import source_label
    from balms.experiments.cells import adhoc_cells
    from balms.experiments.summaries import summarize
    from balms.models.registry import model_caption

    run_kw = {k: grid_kw.pop(k) for k in ("keep_transcript", "progress") if k in grid_kw}
    recs = run(cfg, notebook if notebook else adhoc_cells(cfg, **grid_kw), **run_kw)
    summ = summarize(recs, by=by, cfg=cfg)
    return GridResult(recs, summ, source_label(recs["source"]), model_caption(models_run(recs)))


def models_run(records: pd.DataFrame) -> list[str]:
    """The models that actually produced the records, in first-seen order (titles name these, not the config)."""
    return list(dict.fromkeys(records["model"])) if "model" in records and len(records) else []


def run_path_of(cfg: ExperimentConfig, rec: PredictionRecord) -> Path:
    """The run file a record came from (its cell key names it)."""
    name = run_name(rec.system, rec.model, rec.cot, rec.lookback, (rec.cell or {}).get("key"))
    return cfg.runs_root() / rec.dataset / f"{name}.jsonl"
