"""Every path constant in one place, so notebooks, CLI and tests agree on where things live."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DATASETS = ("diversityone", "pmdata", "globem")


def raw_dir() -> Path:
    """Root of the raw datasets, one subfolder per dataset in its original layout.

    `BALMS_RAW_DIR` wins; otherwise `data/raw` in the project.
    """
    env = os.environ.get("BALMS_RAW_DIR")
    return Path(env).expanduser().resolve() if env else PROJECT_ROOT / "data" / "raw"


def shared_data_dir() -> Path | None:
    """The read-only real data beside the project (`../shared/data`), used by tests and CI."""
    p = PROJECT_ROOT.parent / "shared" / "data"
    return p if p.is_dir() else None


def dataset_raw_dir(dataset: str, root: Path | None = None) -> Path:
    return (root or raw_dir()) / dataset


def cache_dir() -> Path:
    """Response cache, assembled GGUF models, embeddings. `BALMS_CACHE_DIR` overrides."""
    env = os.environ.get("BALMS_CACHE_DIR")
    p = Path(env).expanduser() if env else PROJECT_ROOT / ".cache"
    p.mkdir(parents=True, exist_ok=True)
    return p


def synthetic_dir() -> Path:
    """Where generated synthetic cohorts are written (in their raw layouts)."""
    return PROJECT_ROOT / "data" / "synthetic"


def processed_dir() -> Path:
    return PROJECT_ROOT / "data" / "processed"


def runs_dir() -> Path:
    env = os.environ.get("BALMS_RUNS_DIR")
    return Path(env).expanduser() if env else PROJECT_ROOT / "runs"


TABLES_DIR = PROJECT_ROOT / "tables"
FIGURES_DIR = PROJECT_ROOT / "figures"
PAPER_TABLES_DIR = Path(__file__).resolve().parent / "resources" / "paper_tables"
CASE_STUDY_D1 = Path(__file__).resolve().parent / "resources" / "case_study_d1.json"
