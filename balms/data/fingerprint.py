"""Content fingerprints of loaded tables: a changed dataset must give a new cell spec."""

from __future__ import annotations

import hashlib

import pandas as pd

from balms.data.schema import DatasetTables


def _frame_digest(df: pd.DataFrame | None) -> bytes:
    if df is None or df.empty:
        return b"empty"
    flat = df.reset_index()
    flat = flat[sorted(flat.columns, key=str)]
    h = hashlib.sha256(",".join(map(str, flat.columns)).encode())
    h.update(pd.util.hash_pandas_object(flat, index=False).values.tobytes())
    return h.digest()


def tables_fingerprint(tables: DatasetTables) -> str:
    """16 hex digits over every table the windows and prompts read (values, channels, target, profiles)."""
    cached = getattr(tables, "_fingerprint", None)
    if cached:
        return cached
    h = hashlib.sha256()
    h.update(repr((tables.name, tables.source, tables.target)).encode())
    h.update(repr([(c.name, c.unit, c.device) for c in [*tables.channels, *tables.context_channels,
                                                         *tables.subday_channels]]).encode())
    for df in (tables.daily, tables.labels, tables.profiles, tables.context, tables.subday):
        h.update(_frame_digest(df))
    fp = h.hexdigest()[:16]
    try:
        object.__setattr__(tables, "_fingerprint", fp)
    except (AttributeError, TypeError):
        pass
    return fp
