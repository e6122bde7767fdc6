"""One entry point for every dataset: real raw files when present, else the synthetic cohort.

Synthetic cohorts are written in the dataset's raw layout by `balms.data.synthetic.ensure_synthetic`
and read by the very same loader, so the code path is identical; only `source` differs.

Parsing the raw CSV/JSON files takes seconds a dataset on 2 cores (bench/bench_data.py), and every notebook
loads its cohorts, so a
loaded dataset is kept in `<cache>/tables/` (a pickle) under a key made of the raw folder's location and its
files' bytes (every file under it, with its relative path), the loader code (every module of `balms.data`), the
loader options and the pandas version: any change to any of them loads from the raw files again. A cache
file that cannot be read is reloaded and rewritten, never trusted. `BALMS_TABLES_CACHE=0` turns it off.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import threading
from pathlib import Path
from typing import Iterable

from balms import paths
from balms.data.schema import DatasetTables


def _loader(name: str):
    from balms.data.registry import get_dataset

    return get_dataset(name).load_function()


def resolve_raw(name: str, raw_root: Path | None = None, *, synthetic_ok: bool = True) -> tuple[Path, str]:
    """(raw folder, source) for `name`: `<raw_root or BALMS_RAW_DIR>/<name>` if it exists, else the
    synthetic cohort (when allowed)."""
    _loader(name)  # validates the name
    raw = paths.dataset_raw_dir(name, Path(raw_root) if raw_root else None)
    if raw.is_dir():
        return raw, "real"
    if not synthetic_ok:
        raise FileNotFoundError(f"{name}: raw folder {raw} not found (set BALMS_RAW_DIR or pass --raw)")
    from balms.data.synthetic import ensure_synthetic
    return Path(ensure_synthetic(name)), "synthetic"


def source_label(sources: Iterable[str]) -> str:
    """'real', 'synthetic' or 'mixed' for a set of per-dataset sources."""
    s = {x for x in sources if x}
    if not s:
        raise ValueError("no data source given")
    return s.pop() if len(s) == 1 else "mixed"


def tables_cache_key(name: str, raw: Path, source: str, opts: dict) -> str:
    """What a loaded dataset depends on: the raw bytes, the loader code, the options, pandas' version."""
    import pandas as pd

    from balms.cellspec import code_fingerprint

    # the folder too: the tables record where they were read from (`raw_dir`)
    h = hashlib.sha256(repr((name, str(Path(raw).resolve()), source, sorted(opts.items()), pd.__version__,
                             code_fingerprint(("data",)))).encode())
    for f in sorted(p for p in Path(raw).rglob("*") if p.is_file()):
        h.update(str(f.relative_to(raw)).encode() + b"\0")
        h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()[:32]


_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_LOCK = threading.Lock()


def _cached(name: str, raw: Path, source: str, opts: dict) -> DatasetTables:
    if os.environ.get("BALMS_TABLES_CACHE", "1") == "0":
        return _loader(name)(raw, source=source, **opts)
    path = paths.cache_dir() / "tables" / f"{name}-{source}-{tables_cache_key(name, raw, source, opts)}.pkl"
    with _path_lock(path):  # threads of one process load a dataset once; processes each write a whole file
        return _load_or_build(name, raw, source, opts, path)


def _path_lock(path: Path) -> threading.Lock:
    with _LOCKS_LOCK:
        return _LOCKS.setdefault(str(path), threading.Lock())


def _load_or_build(name: str, raw: Path, source: str, opts: dict, path: Path) -> DatasetTables:
    if path.exists():
        try:
            with open(path, "rb") as fh:
                tables = pickle.load(fh)
            if isinstance(tables, DatasetTables):
                return tables
        except Exception:  # a truncated or foreign file: load from the raw files and rewrite it
            pass
    tables = _loader(name)(raw, source=source, **opts)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}-{threading.get_ident()}.tmp")
    with open(tmp, "wb") as fh:
        pickle.dump(tables, fh, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, path)  # atomic: a concurrent reader sees the old state or the whole file
    return tables


def load_dataset(name: str, raw_root: Path | None = None, *, synthetic_ok: bool = True, **opts) -> DatasetTables:
    """Load `name` ("pmdata", "globem", "diversityone"); `opts` go to the dataset's loader. Cached (module doc)."""
    raw, source = resolve_raw(name, raw_root, synthetic_ok=synthetic_ok)
    return _cached(name, raw, source, opts)


def load_from_dir(name: str, raw_dir: Path, *, source: str = "real", **opts) -> DatasetTables:
    """Load `name` from an explicit raw folder (the CLI's --raw)."""
    return _loader(name)(Path(raw_dir), source=source, **opts)
