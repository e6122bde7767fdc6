"""One run file: its records (JSONL, one PredictionRecord per sample), its manifest (what made it: the cell spec,
agent, model, data, code version, packages, every session) and its lock. Storage and provenance; the runner
(balms.runner) decides what runs and writes through `CellRun`.

A torn last line (a kill mid-write) is ignored by readers and truncated on resume; any other bad line is an error
naming the file and line. Records made under another cell spec are refused: the run file name and its records
must agree. One process at a time works on a run file (`cell_lock`): a second writer waits, then resumes.
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
from importlib import metadata
from pathlib import Path
from typing import Any, Sequence

from balms.data.schema import DataError
from balms.jsonl_store import recover_jsonl, rewrite_jsonl, scan_jsonl
from balms.paths import PROJECT_ROOT
from balms.records import PredictionRecord

PACKAGES = ("balms", "numpy", "pandas", "pydantic", "tenacity", "httpx", "openai", "anthropic",
            "llama_cpp_python", "vllm", "sentence-transformers", "torch", "scikit-learn")


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



# What a record says about the run that made it rather than about the prediction: timings, whether a call was
# answered from a cache (the first of several concurrent identical calls computes, the others hit) and how many
# RAPTOR day summaries this sample happened to write first. Everything else is the same whatever the interleaving.
RUN_FIELDS = ("latency_s", "wall_s")
RUN_STEP_META = ("latency_s", "cached", "finish_reason", "usage_unknown", "summaries_generated")


def record_content(rec: PredictionRecord) -> dict:
    """A record without its run provenance (RUN_FIELDS, RUN_STEP_META): equal across schedules and resumes."""
    d = rec.model_dump(exclude=set(RUN_FIELDS))
    for st in d["transcript"]:
        st["meta"] = {k: v for k, v in st["meta"].items() if k not in RUN_STEP_META}
    return d


def cell_records(path, cell) -> list[PredictionRecord]:
    """The cell's records on disk, in its sample order (a sample without a record is left out)."""
    by_id = {r.sample_id: r for r in load_records(path)} if path.exists() else {}
    return [by_id[s.sample_id] for s in cell.samples if s.sample_id in by_id]


def read_records(path: Path) -> list[PredictionRecord]:
    """The records of a run file as they are now (a torn tail ignored), without the duplicate check."""
    return scan_jsonl(path, _parse, "PredictionRecord")[0]


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



def open_records(path: Path, wanted: set[str], spec, retry_errors: bool) -> tuple[set[str], int]:
    """Resume a run file: truncate a torn tail, refuse another spec's records, drop the error records of the
    `wanted` samples when `retry_errors` (they are run again). Returns (keys of the records kept, errors dropped)."""
    existing = _unique(path, recover_jsonl(path, _parse, "PredictionRecord"))
    _check_spec(path, existing, spec)
    kept = [r for r in existing if not (retry_errors and r.status == "error" and r.key() in wanted)]
    if len(kept) < len(existing):
        rewrite_jsonl(path, [r.model_dump_json() for r in kept])
    return {r.key() for r in kept}, len(existing) - len(kept)


def _agent_options(agent) -> dict:
    """The agent's options as data (agents expose them as a method; a plain dict attribute also works)."""
    opts = getattr(agent, "options", None)
    opts = opts() if callable(opts) else opts
    return dict(opts or {})



def _from_project(path) -> str | None:
    """`path` relative to the project root: a bundle names no folder of the machine that made it."""
    return None if path is None else os.path.relpath(path, PROJECT_ROOT)


def start_manifest(out_path: Path, agent, backend, samples: Sequence, tables, spec, parameters: dict,
                   session: dict) -> dict[str, Any]:
    """Write the manifest of a session starting (the earlier sessions kept) and return it."""
    mpath, old = manifest_path_for(out_path), {}
    if mpath.exists():
        with contextlib.suppress(ValueError):
            old = json.loads(mpath.read_text(encoding="utf-8"))
    base = type(inspect.unwrap(agent))
    manifest: dict[str, Any] = {
        "run_file": Path(out_path).name,  # beside its manifest; a bundle names no path of this machine
        "status": "running",
        "cell": None if spec is None else spec.model_dump(mode="json") | {"key": spec.key()},
        "agent": {"name": getattr(agent, "name", type(agent).__name__), "cot": getattr(agent, "cot", None),
                  "class": f"{base.__module__}.{base.__qualname__}", "options": _agent_options(agent)},
        "model": {"name": getattr(backend, "name", None), "model_id": backend.model_id,
                  "backend": type(getattr(backend, "backend", backend)).__name__,
                  "cache_mode": getattr(backend, "mode", None)},
        "parameters": parameters,
        "data": {"sources": sorted({getattr(x, "source", "?") for x in samples}),
                 "datasets": sorted({getattr(x, "dataset", "?") for x in samples}),
                 "tables": None if tables is None else {
                     "name": getattr(tables, "name", None), "source": getattr(tables, "source", None),
                     "raw_dir": _from_project(getattr(tables, "raw_dir", None))}},
        "git": _git(), "packages": _versions(), "python": sys.version.split()[0], "platform": platform.platform(),
        "llama_cpp_build": _llama_cpp_build(),
        "started_at": old.get("started_at", session["started_at"]),
        "sessions": list(old.get("sessions", [])) + [session],
    }
    _write_json_atomic(mpath, manifest)
    return manifest


def finish_manifest(out_path: Path, manifest: dict, records: Sequence[PredictionRecord], status: str,
                    n_samples: int, n_other: int) -> dict:
    """Write the manifest of a session ended (`records`: this run's samples' records in the file); its usage."""
    usage = _usage(records)
    usage["wall_s"] = round(sum(x.get("wall_s", 0) for x in manifest["sessions"]), 3)
    manifest.update({
        "status": status if len(records) == n_samples else "incomplete",
        "ended_at": manifest["sessions"][-1]["ended_at"], "model_ids": sorted({r.model_id for r in records}),
        "usage": usage, "counts": {"n_samples": n_samples, "n_records": len(records),
                                   "n_other_records_in_file": n_other},
    })
    _write_json_atomic(manifest_path_for(out_path), manifest)
    return usage


@contextlib.contextmanager
def cell_lock(out_path: Path, *, progress: bool = True, wait: bool = True):
    """Exclusive lock on a run file for the whole run; a second writer waits and is told who holds it. With
    `wait=False` it does not wait: it yields False (nothing held) when another process holds the lock, else True."""
    lock_path = out_path.with_name(out_path.name + ".lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not wait:
                yield False
                return
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
            yield True
        finally:
            fh.seek(0)
            fh.truncate()
            fcntl.flock(fh, fcntl.LOCK_UN)

