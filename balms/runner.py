"""Resumable runner: agent x backend x samples -> one JSONL record per sample + a run manifest (balms.runfile).

Crash safety: each record is appended, flushed and fsynced as its sample completes (its model calls are already
in the response cache). On restart a torn last line (a kill mid-write) is truncated, finished samples are skipped
and cached calls are answered from the cache: zero lost, zero duplicated, nothing recomputed. A sample that fails
(a permanent error, or a transient one past its retries) gets a record with status "error": not a result, so the
next run retries it (`retry_errors=False` keeps it); once it succeeds it counts like any other sample.

Every call goes through `RetryingBackend` (a wall-clock deadline per call; backoff honouring retry-after) unless
the backend has its own retry layer (get_backend adds one for remote models): attempts are never multiplied.
Records are in completion order (identical across re-runs at concurrency 1). With a `CellSpec`, the spec goes
into the manifest and (compact) into every record, and a run file made under another spec is refused.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from balms import runfile
from balms.models.base import BackendError
from balms.models.pricing import estimate_cost
from balms.models.retrying import RetryingBackend, call_deadline, retry_layer
from balms.models.slots import NotStarted, drive
from balms.records import PredictionRecord, sample_fields
from balms.runfile import cell_lock, load_records, manifest_path_for  # noqa: F401 - callers import them here


@dataclass
class RunResult:
    out_path: Path
    manifest_path: Path
    n_samples: int  # samples asked for
    n_done_before: int  # already in the file when this session started
    n_new: int  # records written by this session
    n_errors: int  # records (all sessions, these samples) with `error` set
    wall_s: float
    usage: dict = field(default_factory=dict)
    session: dict = field(default_factory=dict)


def _error_record(agent, backend, sample, message: str) -> PredictionRecord:
    return PredictionRecord(
        **sample_fields(sample), system=getattr(agent, "name", type(agent).__name__),
        cot=bool(getattr(agent, "cot", False)),
        model=getattr(backend, "name", backend.model_id), model_id=backend.model_id,
        options=runfile._agent_options(agent), error=message, n_steps=0,
    )


def _predict(agent, backend, sample, tables) -> PredictionRecord | None:
    t0 = time.perf_counter()
    try:
        rec = agent.predict(sample, tables, backend)
    except NotStarted:
        return None
    except BackendError as exc:
        kind = "transient, retries exhausted" if exc.transient else "permanent"
        return _error_record(agent, backend, sample, f"BackendError ({kind}): {exc}")
    except Exception as exc:  # an agent bug must not kill the run; the record says what happened
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-3:])
        return _error_record(agent, backend, sample, f"{type(exc).__name__}: {exc}\n{tb}")
    if not isinstance(rec, PredictionRecord):
        return _error_record(agent, backend, sample, f"agent returned {type(rec).__name__}, not PredictionRecord")
    if rec.sample_id != sample.sample_id:
        return _error_record(agent, backend, sample,
                             f"agent returned a record for {rec.sample_id!r} instead of {sample.sample_id!r}")
    if rec.wall_s is None:
        rec.wall_s = time.perf_counter() - t0
    if not rec.latency_s:
        rec.latency_s = rec.wall_s
    if not rec.cost_usd and (rec.prompt_tokens or rec.completion_tokens):
        rec.cost_usd = estimate_cost(rec.model_id or backend.model_id, rec.prompt_tokens, rec.completion_tokens)
    return rec


def _stats(backend) -> dict:
    fn = getattr(backend, "stats", None)
    return dict(fn()) if callable(fn) else {}


class CellRun:
    """One run file's session: what is still to do, its manifest; `write` each finished record, `close` at the end
    (the manifest says how far it got). The caller holds `cell_lock(out_path)`."""

    def __init__(self, agent, backend, samples: Sequence, tables, out_path: Path, *, concurrency: int = 1,
                 timeout_s: float | None = None, retries: int = 4, manifest_extra: dict | None = None,
                 retry_errors: bool = True, spec=None):
        self.agent, self.backend, self.tables, self.out_path = agent, backend, tables, Path(out_path)
        self.samples = list(samples)
        ids = [s.sample_id for s in self.samples]
        if len(set(ids)) != len(ids):
            dup = sorted({i for i in ids if ids.count(i) > 1})[:5]
            raise ValueError(f"duplicate sample ids in the run: {dup}")
        self.wanted = set(ids)
        self.mpath = manifest_path_for(self.out_path)
        self.done, n_retried = runfile.open_records(self.out_path, self.wanted, spec, retry_errors)
        self.todo = [s for s in self.samples if s.sample_id not in self.done]
        self.n_before = len(self.samples) - len(self.todo)
        self._stats0 = _stats(backend)
        self._inner = retry_layer(backend)  # if the backend retries itself, don't multiply the attempts
        self._inner0 = (self._inner.attempts, self._inner.retried) if self._inner else (0, 0)
        self.wrapped = RetryingBackend(backend, retries=0 if self._inner else retries,
                                       timeout_s=call_deadline if timeout_s is None else timeout_s)
        self.session: dict[str, Any] = {"started_at": runfile._now(), "n_todo": len(self.todo),
                                        "n_errors_retried": n_retried, "n_new": 0, "n_errors_new": 0}
        self.manifest = runfile.start_manifest(self.out_path, agent, backend, self.samples, tables, spec, {
            "concurrency": concurrency, "timeout_s": timeout_s, "retries": retries, "n_samples": len(self.samples),
            **(manifest_extra or {})}, self.session)
        self.cell = None if spec is None else spec.compact()
        self.out_path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.out_path, "ab")
        self._t0 = time.perf_counter()

    def predict(self, sample) -> PredictionRecord | None:
        """One sample through the agent (None: it must leave no record)."""
        return _predict(self.agent, self.wrapped, sample, self.tables)

    def write(self, rec: PredictionRecord) -> None:
        """Append the record, flush and fsync: a finished sample survives any kill (one writer: slots.drive)."""
        rec.cell = self.cell
        self._fh.write((rec.model_dump_json() + "\n").encode("utf-8"))
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self.session["n_new"] += 1
        self.session["n_errors_new"] += rec.status == "error"

    def close(self, status: str) -> RunResult:
        self._fh.close()
        self.wrapped.close()
        wall = time.perf_counter() - self._t0
        stats1, inner, s = _stats(self.backend), self._inner, self.session
        s.update({
            "ended_at": runfile._now(), "wall_s": round(wall, 3), "status": status,
            "model_attempts": (inner.attempts - self._inner0[0]) if inner else self.wrapped.attempts,
            "retries": self.wrapped.retried + ((inner.retried - self._inner0[1]) if inner else 0),
            **{f"cache_{k}": stats1.get(k, 0) - self._stats0.get(k, 0) for k in ("hits", "misses") if k in stats1},
        })
        records = [r for r in runfile.read_records(self.out_path) if r.key() in self.wanted]
        usage = runfile.finish_manifest(self.out_path, self.manifest, records, status, len(self.samples),
                                len(self.done - self.wanted))
        return RunResult(self.out_path, self.mpath, len(self.samples), self.n_before, s["n_new"], usage["n_errors"],
                         wall, usage, s)


def progress_bar(total: int, initial: int, desc: str, progress: bool):
    """The samples' progress bar on stderr (rarely redrawn when stderr is not a terminal, e.g. a notebook's log)."""
    from tqdm.std import tqdm

    tty = bool(getattr(sys.stderr, "isatty", lambda: False)())
    return tqdm(total=total, initial=initial, unit="sample", disable=not progress, desc=desc, dynamic_ncols=True,
                file=sys.stderr, mininterval=0.1 if tty else 10.0, smoothing=0.05)


def run_samples(agent, backend, samples: Sequence, tables, out_path: str | Path, *, concurrency: int = 1,
                timeout_s: float | None = None, retries: int = 4, progress: bool = True,
                manifest_extra: dict | None = None, retry_errors: bool = True, spec=None) -> RunResult:
    """Run `agent.predict(sample, tables, backend)` for every sample without a result in `out_path`, `concurrency`
    at once; see the module doc. `spec` (a balms.cellspec.CellSpec) goes into the manifest and every record;
    `timeout_s`: each call's wall-clock deadline (None: from its max_tokens, balms.models.retrying.call_deadline)."""
    from balms.threads import Pool

    out_path = Path(out_path)
    with cell_lock(out_path, progress=progress):
        run = CellRun(agent, backend, samples, tables, out_path, concurrency=concurrency, timeout_s=timeout_s,
                      retries=retries, manifest_extra=manifest_extra, retry_errors=retry_errors, spec=spec)
        status, pool = "incomplete", Pool(max(1, min(concurrency, len(run.todo))), "balms-run")
        with progress_bar(len(run.samples), run.n_before, f"{run.manifest['agent']['name']}/"
                          f"{run.manifest['model']['name']}", progress) as bar:
            try:
                drive(((pool, k, run.predict, s) for k, s in enumerate(run.todo)),
                      lambda rec: (run.write(rec), bar.update(1)))
                status = "complete"
            finally:
                pool.close()
                result = run.close(status)
    return result
