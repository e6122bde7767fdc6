"""One entry point for every dataset: real raw files when present, else the synthetic cohort.

Synthetic cohorts are written in the dataset's raw layout by `balms.data.synthetic.ensure_synthetic`
and read by the very same loader, so the code path is identical; only `source` differs.
"""

from __future__ import annotations

from pathlib import Path

from balms import paths
from balms.data.schema import DatasetTables


def _loader(name: str):
    if name == "pmdata":
        from balms.data.pmdata import load_pmdata
        return load_pmdata
    if name == "globem":
        from balms.data.globem import load_globem
        return load_globem
    if name == "diversityone":
        from balms.data.diversityone import load_diversityone
        return load_diversityone
    raise ValueError(f"unknown dataset {name!r}; expected one of {paths.DATASETS}")


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


def load_dataset(name: str, raw_root: Path | None = None, *, synthetic_ok: bool = True, **opts) -> DatasetTables:
    """Load `name` ("pmdata", "globem", "diversityone"); `opts` go to the dataset's loader."""
    raw, source = resolve_raw(name, raw_root, synthetic_ok=synthetic_ok)
    return _loader(name)(raw, source=source, **opts)


def load_from_dir(name: str, raw_dir: Path, *, source: str = "real", **opts) -> DatasetTables:
    """Load `name` from an explicit raw folder (the CLI's --raw)."""
    return _loader(name)(Path(raw_dir), source=source, **opts)
