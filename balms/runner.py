"""Resumable concurrent runner: agent x backend x samples -> one JSONL record per sample + a run manifest.

Crash safety: each record is appended, flushed and fsynced as its sample completes (records that complete
together share one fsync) (model calls are already
committed to the response cache as they arrive). On restart the file is read back, a torn last line (a kill
mid-write) is truncated, finished samples are skipped and cached model calls are served from the cache: zero
lost, zero duplicated, nothing recomputed. A sample that fails with a non-transient error (or a transient one
that outlived its retries) gets a record with status "error" and `error` set: not a result, so the next run
retries it (`retry_errors=False` keeps it), and once it succeeds it counts like any other sample.

Every model call goes through `RetryingBackend` (per-call timeout; exponential backoff with jitter, honouring
retry-after, for transient errors), so a multi-step agent never redoes finished steps. When the backend has its
own retry layer (get_backend adds one for remote models) the runner keeps that one and `retries` is not
applied twice. Record order is completion order (identical across re-runs at concurrency 1).

With a `CellSpec`, the spec is written into the manifest and (compact) into every record, and a run file whose
records were made under another spec is refused. One process at a time works on a run file: an exclusive
`fcntl` lock beside it makes a second writer (`make -j2 paper`, two notebooks sharing a cell) wait, then resume.
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
import threading
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable, Sequence

from balms.data.schema import DataError
from balms.jsonl_store import recover_jsonl, rewrite_jsonl, scan_jsonl
from balms.models.base import BackendError
from balms.models.pricing import estimate_cost
from balms.models.retrying import RetryingBackend, retry_layer
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

    def to_dict(self) -> dict:
        d = asdict(self)
        d["out_path"], d["manifest_path"] = str(self.out_path), str(self.manifest_path)
        return d


# ------------------------------------------------------------------------------------------ records file --
def _parse(line: bytes) -> PredictionRecord:
    return PredictionRecord.model_validate_json(line)


def _scan(path: Path) -> tuple[list[PredictionRecord], int, bool]:
    """Parse the JSONL; return (records, byte length of the intact prefix, torn_tail)."""
    return scan_jsonl(path, _parse, "PredictionRecord")


def _check_unique(path: Path, records: Iterable[PredictionRecord]) -> None:
    seen: set[str] = set()
    for i, r in enumerate(records, 1):
        if r.key() in seen:
            raise DataError(path, f"duplicate record for sample {r.key()!r}", row=i)
        seen.add(r.key())


def load_records(path: str | Path) -> list[PredictionRecord]:
    """All records of a run file, in file order. A torn last line (run still going, or killed) is ignored."""
    path = Path(path)
    if not path.exists():
        raise DataError(path, "run file does not exist")
    records, _, _ = _scan(path)
    _check_unique(path, records)
    return records


def _recover(path: Path) -> list[PredictionRecord]:
    """Read existing records for a resume, truncating (and reporting) a torn tail in place."""
    records = recover_jsonl(path, _parse, "PredictionRecord")
    _check_unique(path, records)
    return records


def _rewrite(path: Path, records: Sequence[PredictionRecord]) -> None:
    rewrite_jsonl(path, [r.model_dump_json() for r in records])


class _Appender:
    """Append one JSON line per record; flush + fsync each, so a finished sample survives any kill."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(path, "ab")
        self._lock = threading.Lock()

    def write(self, records: Sequence[PredictionRecord]) -> None:
        """Append records that completed together, then one flush + fsync (group commit)."""
        data = b"".join((r.model_dump_json() + "\n").encode("utf-8") for r in records)
        with self._lock:
            self._fh.write(data)
            self._fh.flush()
            os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()


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
    """llama.cpp's CPU feature line (e.g. "AVX512 = 1"): the build flavour changes speed, never outputs' keys."""
    if "llama_cpp" not in sys.modules:  # only when a llama.cpp backend is in use; never import it for that
        return None
    try:
        return sys.modules["llama_cpp"].llama_print_system_info().decode(errors="replace").strip()
    except (AttributeError, OSError):
        return None


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


def _data_sources(samples: Sequence, tables) -> dict:
    return {
        "sources": sorted({getattr(s, "source", "?") for s in samples}),
        "datasets": sorted({getattr(s, "dataset", "?") for s in samples}),
        "tables": None if tables is None else {
            "name": getattr(tables, "name", None), "source": getattr(tables, "source", None),
            "raw_dir": getattr(tables, "raw_dir", None)},
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


class NotStarted(BaseException):
    """Raised by an agent (or a wrapper: the spending cap, balms.experiments.budget) in place of a sample that must
    leave no record: it stays to do, and a later run does it. A BaseException so no `except Exception` eats it."""


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


def run_samples(agent, backend, samples: Sequence, tables, out_path: str | Path, *, concurrency: int = 1,
                timeout_s: float | None = 600.0, retries: int = 4, progress: bool = True,
                manifest_extra: dict | None = None, retry_errors: bool = True, spec=None,
                executor: ThreadPoolExecutor | None = None) -> RunResult:
    """Run `agent.predict(sample, tables, backend)` for every sample without a result in `out_path`; see module doc.

    `retry_errors`: records with status "error" are not results and are run again (False: kept as they are).
    `spec` (a balms.cellspec.CellSpec) is stored in the manifest and in every record written. `executor`: run the
    samples on this pool (the scheduler's, shared by every cell) instead of one of `concurrency` threads."""
    out_path = Path(out_path)
    with cell_lock(out_path, progress=progress):
        return _run_locked(agent, backend, samples, tables, out_path, concurrency=concurrency, timeout_s=timeout_s,
                           retries=retries, progress=progress, manifest_extra=manifest_extra,
                           retry_errors=retry_errors, spec=spec, executor=executor)


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


def _run_locked(agent, backend, samples, tables, out_path: Path, *, concurrency, timeout_s, retries, progress,
                manifest_extra, retry_errors, spec, executor=None) -> RunResult:
    from tqdm.std import tqdm  # a text bar on stderr, also in a kernel: papermill passes it on to the terminal

    mpath = manifest_path_for(out_path)
    samples = list(samples)
    ids = [s.sample_id for s in samples]
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})[:5]
        raise ValueError(f"duplicate sample ids in the run: {dup}")
    wanted = set(ids)

    existing = _recover(out_path)
    _check_spec(out_path, existing, spec)
    n_retried = 0
    if retry_errors and any(r.status == "error" and r.key() in wanted for r in existing):
        kept = [r for r in existing if not (r.status == "error" and r.key() in wanted)]
        n_retried = len(existing) - len(kept)
        existing = kept
        _rewrite(out_path, existing)
    done = {r.key() for r in existing}
    todo = [s for s in samples if s.sample_id not in done]
    n_before = len(samples) - len(todo)

    old = {}
    if mpath.exists():
        try:
            old = json.loads(mpath.read_text(encoding="utf-8"))
        except ValueError:
            old = {}
    started = _now()
    stats0 = _stats(backend)
    inner = retry_layer(backend)  # if the backend retries itself, don't multiply the attempts
    inner0 = (inner.attempts, inner.retried) if inner else (0, 0)
    wrapped = RetryingBackend(backend, retries=0 if inner else retries, timeout_s=timeout_s)
    session: dict[str, Any] = {"started_at": started, "n_todo": len(todo), "n_errors_retried": n_retried,
                               "n_new": 0, "n_errors_new": 0}
    base = type(inspect.unwrap(agent))  # the agent's own class, not the scheduler's gate around it
    manifest: dict[str, Any] = {
        "run_file": str(out_path),
        "status": "running",
        "cell": None if spec is None else spec.model_dump(mode="json") | {"key": spec.key()},
        "agent": {"name": getattr(agent, "name", type(agent).__name__), "cot": getattr(agent, "cot", None),
                  "class": f"{base.__module__}.{base.__qualname__}",
                  "options": _agent_options(agent)},
        "model": {"name": getattr(backend, "name", None), "model_id": backend.model_id,
                  "backend": type(getattr(backend, "backend", backend)).__name__,
                  "cache_mode": getattr(backend, "mode", None)},
        "parameters": {"concurrency": concurrency, "timeout_s": timeout_s, "retries": retries,
                       "n_samples": len(samples), **(manifest_extra or {})},
        "data": _data_sources(samples, tables),
        "git": _git(),
        "packages": _versions(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "llama_cpp_build": _llama_cpp_build(),
        "started_at": old.get("started_at", started),
        "sessions": list(old.get("sessions", [])) + [session],
    }
    _write_json_atomic(mpath, manifest)

    cell = None if spec is None else spec.compact()
    appender = _Appender(out_path)
    t0 = time.perf_counter()
    # off a terminal (a notebook run by papermill) every refresh becomes a line: refresh at most every 10 s
    tty = bool(getattr(sys.stderr, "isatty", lambda: False)())
    bar = tqdm(total=len(samples), initial=n_before, unit="sample", disable=not progress, smoothing=0.05,
               desc=f"{manifest['agent']['name']}/{manifest['model']['name']}", dynamic_ncols=True,
               file=sys.stderr, mininterval=0.1 if tty else 10.0)
    status = "incomplete"
    try:
        own = executor is None
        pool = ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="balms-run") if own else executor
        with pool if own else contextlib.nullcontext():
            # at most `concurrency` samples in the pool at once, also in a shared one (the scheduler's): a cell
            # never holds more of its threads, so no cell's samples queue behind another cell's
            queue = iter(enumerate(todo))
            futures, order, pending = [], {}, set()

            def submit_next() -> None:
                for i, s in queue:
                    f = pool.submit(_predict, agent, wrapped, s, tables)
                    futures.append(f)
                    order[f] = i
                    pending.add(f)
                    return

            for _ in range(max(1, concurrency)):
                submit_next()
            try:
                while pending:
                    finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for _ in finished:
                        submit_next()
                    recs = [f.result() for f in sorted(finished, key=order.__getitem__)]
                    recs = [r for r in recs if r is not None]  # NotStarted: no record, still to do
                    for r in recs:
                        r.cell = cell
                    appender.write(recs)
                    session["n_new"] += len(recs)
                    n_err = sum(r.status == "error" for r in recs)
                    if n_err:
                        session["n_errors_new"] += n_err
                        bar.set_postfix(errors=session["n_errors_new"], refresh=False)
                    bar.update(len(recs))
            except BaseException:
                for f in futures:
                    f.cancel()
                raise
        status = "complete"
    finally:
        bar.close()
        appender.close()
        wrapped.close()
        wall = time.perf_counter() - t0
        stats1 = _stats(backend)
        session.update({
            "ended_at": _now(), "wall_s": round(wall, 3), "status": status,
            "model_attempts": (inner.attempts - inner0[0]) if inner else wrapped.attempts,
            "retries": wrapped.retried + ((inner.retried - inner0[1]) if inner else 0),
            **{f"cache_{k}": stats1.get(k, 0) - stats0.get(k, 0) for k in ("hits", "misses") if k in stats1},
        })
        records = [r for r in _scan(out_path)[0] if r.key() in wanted]
        usage = _usage(records)
        usage["wall_s"] = round(sum(s.get("wall_s", 0) for s in manifest["sessions"]), 3)
        manifest.update({
            "status": status if len(records) == len(samples) else "incomplete",
            "ended_at": session["ended_at"],
            "model_ids": sorted({r.model_id for r in records}),
            "usage": usage,
            "counts": {"n_samples": len(samples), "n_records": len(records),
                       "n_other_records_in_file": len(done - wanted)},
        })
        _write_json_atomic(mpath, manifest)
    return RunResult(out_path, mpath, len(samples), n_before, session["n_new"], usage["n_errors"],
                     wall, usage, session)
