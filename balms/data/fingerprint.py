"""A content hash of a dataset's tables, so results can be keyed by the data they were computed from.

Raw file names, sizes or mtimes are not enough (a loader change alters the tables without touching the
files; a copy elsewhere has other mtimes but the same data), so the hash reads the tables themselves:
every frame a prompt or the sample builder reads, the channel and target catalogue that decide how
values are rendered, and the loader's filter counts. Row order, column order and the raw folder's
location do not count; `notes` (free text) does not either.

Kept free of imports from `balms.data.schema` so `DatasetTables.fingerprint()` can call it lazily.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

import numpy as np
import pandas as pd

# Bump when what is hashed changes, so old and new fingerprints never compare equal by accident.
FINGERPRINT_VERSION = 1
FRAMES = ("daily", "subday", "labels", "context", "profiles", "catalogue")
CATALOGUES = ("target", "channels", "context_channels", "subday_channels")


def _column_hashes(col: pd.Series) -> np.ndarray:
    try:
        return pd.util.hash_pandas_object(col, index=False).to_numpy()
    except TypeError:  # unhashable cells (lists, dicts): hash their text
        return pd.util.hash_pandas_object(col.map(repr), index=False).to_numpy()


def frame_digest(df: pd.DataFrame | None) -> str:
    """sha256 of a frame's content, independent of row and column order.

    Named index levels (user, date) are data and are hashed as columns; an unnamed index (a row
    number) is not. Columns are hashed with their names and dtypes; rows are sorted by their hashes.
    """
    if df is None:
        return "none"
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"frame_digest expects a pandas DataFrame or None, got {type(df).__name__}")
    if any(n is not None for n in df.index.names):
        df = df.reset_index()
    names = [str(c) for c in df.columns]
    if len(set(names)) != len(names):
        raise ValueError(f"frame_digest: duplicate column names in {names}")
    order = sorted(range(len(names)), key=names.__getitem__)
    h = hashlib.sha256()
    h.update(json.dumps([[names[i], str(df.dtypes.iloc[i])] for i in order]).encode())
    h.update(f"|{len(df)}|".encode())
    if len(df) and order:
        cells = np.column_stack([_column_hashes(df.iloc[:, i]) for i in order])
        rows = cells[np.lexsort(cells.T[::-1])]
        h.update(np.ascontiguousarray(rows).tobytes())
    return h.hexdigest()


def tables_fingerprint(tables) -> str:
    """16 hex digits (sha256) over a `DatasetTables`' content: its frames (`FRAMES`), channel/target
    catalogue, sub-day unit, name, source and loader filter counts. Cached on the object (`_fingerprint`):
    tables are not modified after loading, and `dataclasses.replace` starts with an empty cache."""
    cached = getattr(tables, "_fingerprint", None)
    if cached:
        return cached
    parts = {
        "version": FINGERPRINT_VERSION,
        "name": tables.name,
        "source": tables.source,
        "subday_unit": tables.subday_unit,
        "dropped": {str(k): int(v) for k, v in sorted(tables.dropped.items())},
        "target": dataclasses.asdict(tables.target),
        **{k: [dataclasses.asdict(c) for c in getattr(tables, k)] for k in CATALOGUES if k != "target"},
        "frames": {k: frame_digest(getattr(tables, k)) for k in FRAMES},
    }
    fp = hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]
    try:
        tables._fingerprint = fp
    except AttributeError:  # a frozen or slotted stand-in: no cache
        pass
    return fp
