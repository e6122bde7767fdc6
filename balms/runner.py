"""Resumable runner: agent x backend x samples -> one JSONL record per sample + a run manifest.

Crash safety: each record is appended, flushed and fsynced as its sample completes (its model calls are already
in the response cache). On restart a torn last line (a kill mid-write) is truncated, finished samples are skipped
and cached calls are answered from the cache: zero lost, zero duplicated, nothing recomputed. A sample that fails
(a permanent error, or a transient one past its retries) gets a record with status "error": not a result, so the
next run retries it (`retry_errors=False` keeps it); once it succeeds it counts like any other sample.

Every call goes through `RetryingBackend` (a wall-clock deadline per call; backoff honouring retry-after) unless
the backend has its own retry layer (get_backend adds one for remote models): attempts are never multiplied.
Records are in completion order (identical across re-runs at concurrency 1). With a `CellSpec`, the spec goes
into the manifest and (compact) into every record, and a run file made under another spec is refused. One process
at a time works on a run file: an exclusive `fcntl` lock beside it makes a second writer wait, then resume.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import inspect
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Sequence

from balms.data.schema import DataError
from balms.jsonl_store import recover_jsonl, rewrite_jsonl, scan_jsonl
from balms.models.base import BackendError
from balms.models.pricing import estimate_cost
from balms.models.retrying import RetryingBackend, call_deadline, retry_layer
from balms.models.slots import NotStarted, drive
from balms.paths import PROJECT_ROOT
from balms.records import PredictionRecord, sample_fields

PACKAGES = ("balms", "numpy", "pandas", "pydantic", "tenacity", "httpx", "openai", "anthropic",
            "llama_cpp_python", "vllm", "sentence-transformers", "torch", "scikit-learn")


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


# ------------------------------------------------------------------------------------------ records file --
def _parse(line: bytes) -> PredictionRecord:
    return PredictionRecord.model_validate_json(line)


def _unique(path: Path, records: list[PredictionRecord]) -> list[PredictionRecord]:
    seen: set[str] = set()
    for i, r in enumerate(records, 1):
        if r.key() in seen:
            raise DataError(path, f"duplicate record for sample {r.key()!r}", row=i)
        seen.add(r.key())
    return records


def load_records(path: str | Path) -> list[PredictionRecord]:
    """All records of a run file, in file order. A torn last line (run still going, or killed) is ignored."""
    path = Path(path)
    if not path.exists():
        raise DataError(path, "run file does not exist")
    return _unique(path, scan_jsonl(path, _parse, "PredictionRecord")[0])


# ------------------------------------------------------------------------------------------ manifest -----
def manifest_path_for(out_path: Path) -> Path:
    return out_path.with_name(out_path.name.removesuffix(".jsonl") + ".manifest.json")


def _versions() -> dict[str, str | None]:
    out = {}
    for p in PACKAGES:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            out[p] = None
    return out


def _llama_cpp_build() -> str | None:
    """llama.cpp's version, CPU feature line (e.g. "AVX512 = 1") and thread count: what a cold run on another
    machine must match to compute the same floats (bench/reproducibility.json); never part of a key."""
    if "llama_cpp" not in sys.modules:  # only when a llama.cpp backend is in use; never import it for that
        return None
    try:
        llama = sys.modules["llama_cpp"]
        info = llama.llama_print_system_info().decode(errors="replace").strip()
    except (AttributeError, OSError):
        return None
    from balms.models.llamacpp import _threads

    return f"llama-cpp-python {getattr(llama, '__version__', '?')}; threads {_threads(None)}; {info}"


def _git() -> dict:
    def run(*args):
        return subprocess.run(["git", *args], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=10)

    try:
        head = run("rev-parse", "HEAD")
        if head.returncode != 0:
            return {"commit": None}
        dirty = run("status", "--porcelain", "--untracked-files=no")
        return {"commit": head.stdout.strip(), "dirty": bool(dirty.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None}


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _write_json_atomic(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False, default=str), encoding="utf-8")
    os.replace(tmp, path)


def _usage(records: Sequence[PredictionRecord]) -> dict:
    return {
        "n_records": len(records),
        "n_errors": sum(r.status == "error" for r in records),
        "n_parse_failures": sum(r.status == "parse_failure" for r in records),
        "prompt_tokens": sum(r.prompt_tokens for r in records),
        "completion_tokens": sum(r.completion_tokens for r in records),
        "reasoning_tokens": sum(r.reasoning_tokens for r in records),
        "model_calls": sum(r.n_steps for r in records),
        "agent_latency_s": round(sum(r.latency_s for r in records), 3),
        "estimated_cost_usd": round(sum(r.cost_usd for r in records), 6),
    }


# ------------------------------------------------------------------------------------------ running ------
def _agent_options(agent) -> dict:
    """The agent's options as data (agents expose them as a method; a plain dict attribute also works)."""
    opts = getattr(agent, "options", None)
    opts = opts() if callable(opts) else opts
    return dict(opts or {})


@contextlib.contextmanager
def cell_lock(out_path: Path, *, progress: bool = True):
    """Exclusive lock on a run file for the whole run; a second writer waits and is told who holds it."""
    lock_path = out_path.with_name(out_path.name + ".lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "another process"
            if progress:
                print(f"waiting for {out_path.name}: locked by {holder}", file=sys.stderr, flush=True)
            fcntl.flock(fh, fcntl.LOCK_EX)
        fh.seek(0)
        fh.truncate()
        fh.write(f"pid {os.getpid()} since {_now()}")
        fh.flush()
        try:
            yield
        finally:
            fh.seek(0)
            fh.truncate()
            fcntl.flock(fh, fcntl.LOCK_UN)


def _error_record(agent, backend, sample, message: str) -> PredictionRecord:
    return PredictionRecord(
        **sample_fields(sample), system=getattr(agent, "name", type(agent).__name__),
        cot=bool(getattr(agent, "cot", False)),
        model=getattr(backend, "name", backend.model_id), model_id=backend.model_id,
        options=_agent_options(agent), error=message, n_steps=0,
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


def _check_spec(path: Path, records: Sequence[PredictionRecord], spec) -> None:
    """Records made under another cell spec must never be mixed into this one."""
    if spec is None:
        return
    key = spec.key()
    for i, r in enumerate(records, 1):
        other = (r.cell or {}).get("key")
        if other != key:
            raise DataError(path, f"record {r.sample_id!r} was made under cell spec {other!r}, this run is "
                            f"{key!r}: the run file name and its records disagree", row=i)


class CellRun:
    """One run file's session: what is still to do, the manifest, the appender; `write` each finished record,
    `close` at the end (the manifest says how far it got). The caller holds `cell_lock(out_path)`."""

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
        existing = _unique(self.out_path, recover_jsonl(self.out_path, _parse, "PredictionRecord"))
        _check_spec(self.out_path, existing, spec)
        n_retried = 0
        if retry_errors and any(r.status == "error" and r.key() in self.wanted for r in existing):
            kept = [r for r in existing if not (r.status == "error" and r.key() in self.wanted)]
            n_retried = len(existing) - len(kept)
            existing = kept
            rewrite_jsonl(self.out_path, [r.model_dump_json() for r in existing])
        self.done = {r.key() for r in existing}
        self.todo = [s for s in self.samples if s.sample_id not in self.done]
        self.n_before = len(self.samples) - len(self.todo)
        old = {}
        if self.mpath.exists():
            try:
                old = json.loads(self.mpath.read_text(encoding="utf-8"))
            except ValueError:
                old = {}
        self._stats0 = _stats(backend)
        self._inner = retry_layer(backend)  # if the backend retries itself, don't multiply the attempts
        self._inner0 = (self._inner.attempts, self._inner.retried) if self._inner else (0, 0)
        self.wrapped = RetryingBackend(backend, retries=0 if self._inner else retries,
                                       timeout_s=call_deadline if timeout_s is None else timeout_s)
        self.session: dict[str, Any] = {"started_at": _now(), "n_todo": len(self.todo), "n_errors_retried": n_retried,
                                        "n_new": 0, "n_errors_new": 0}
        base = type(inspect.unwrap(agent))
        self.manifest: dict[str, Any] = {
            "run_file": str(self.out_path),
            "status": "running",
            "cell": None if spec is None else spec.model_dump(mode="json") | {"key": spec.key()},
            "agent": {"name": getattr(agent, "name", type(agent).__name__), "cot": getattr(agent, "cot", None),
                      "class": f"{base.__module__}.{base.__qualname__}", "options": _agent_options(agent)},
            "model": {"name": getattr(backend, "name", None), "model_id": backend.model_id,
                      "backend": type(getattr(backend, "backend", backend)).__name__,
                      "cache_mode": getattr(backend, "mode", None)},
            "parameters": {"concurrency": concurrency, "timeout_s": timeout_s, "retries": retries,
                           "n_samples": len(self.samples), **(manifest_extra or {})},
            "data": {"sources": sorted({getattr(x, "source", "?") for x in self.samples}),
                     "datasets": sorted({getattr(x, "dataset", "?") for x in self.samples}),
                     "tables": None if tables is None else {k: getattr(tables, k, None)
                                                             for k in ("name", "source", "raw_dir")}},
            "git": _git(),
            "packages": _versions(),
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "llama_cpp_build": _llama_cpp_build(),
            "started_at": old.get("started_at", self.session["started_at"]),
            "sessions": list(old.get("sessions", [])) + [self.session],
        }
        _write_json_atomic(self.mpath, self.manifest)
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
            "ended_at": _now(), "wall_s": round(wall, 3), "status": status,
            "model_attempts": (inner.attempts - self._inner0[0]) if inner else self.wrapped.attempts,
            "retries": self.wrapped.retried + ((inner.retried - self._inner0[1]) if inner else 0),
            **{f"cache_{k}": stats1.get(k, 0) - self._stats0.get(k, 0) for k in ("hits", "misses") if k in stats1},
        })
        records = [r for r in scan_jsonl(self.out_path, _parse, "PredictionRecord")[0] if r.key() in self.wanted]
        usage = _usage(records)
        usage["wall_s"] = round(sum(x.get("wall_s", 0) for x in self.manifest["sessions"]), 3)
        self.manifest.update({
            "status": status if len(records) == len(self.samples) else "incomplete",
            "ended_at": s["ended_at"], "model_ids": sorted({r.model_id for r in records}), "usage": usage,
            "counts": {"n_samples": len(self.samples), "n_records": len(records),
                       "n_other_records_in_file": len(self.done - self.wanted)},
        })
        _write_json_atomic(self.mpath, self.manifest)
        return RunResult(self.out_path, self.mpath, len(self.samples), self.n_before, s["n_new"], usage["n_errors"],
                         wall, usage, s)


def progress_bar(total: int, initial: int, desc: str, progress: bool):
    """The samples' progress bar on stderr (every 10 s when stderr is not a terminal, e.g. a notebook's log)."""
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
