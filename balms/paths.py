"""Every path constant in one place, so notebooks, CLI and tests agree on where things live."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent


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


SMOKE_PROFILES = {"smoke"}
MAIN_PROFILES = {"demo", "paper"}  # the committed tables/ and figures/ at the project root


def output_dirs(profile: str) -> tuple[Path, Path]:
    """(tables, figures) folders of a profile, created if needed. demo/paper write the committed `tables/` and
    `figures/`; the smoke profile (CI) writes to build/; any other profile to results/<profile>/.
    `BALMS_OUTPUT_DIR` redirects everything (tests use it)."""
    if os.environ.get("BALMS_OUTPUT_DIR"):
        root = Path(os.environ["BALMS_OUTPUT_DIR"]) / profile
        t, f = root / "tables", root / "figures"
    elif profile in SMOKE_PROFILES:
        root = PROJECT_ROOT / "build" / profile
        t, f = root / "tables", root / "figures"
    elif profile in MAIN_PROFILES:
        t, f = TABLES_DIR, FIGURES_DIR
    else:  # a study of its own (e.g. cpu-study): its artefacts beside its results bundle
        root = RESULTS_DIR / profile
        t, f = root / "tables", root / "figures"
    t.mkdir(parents=True, exist_ok=True)
    f.mkdir(parents=True, exist_ok=True)
    return t, f


def index_path(profile: str) -> Path:
    """The artefact index of a profile (`tables/index.csv` of its output folder)."""
    return output_dirs(profile)[0] / "index.csv"


TABLES_DIR = PROJECT_ROOT / "tables"
RESULTS_DIR = PROJECT_ROOT / "results"  # committed results: exported responses and study bundles, per profile
FIGURES_DIR = PROJECT_ROOT / "figures"
PAPER_TABLES_DIR = Path(__file__).resolve().parent / "resources" / "paper_tables"
CASE_STUDY_D1 = Path(__file__).resolve().parent / "resources" / "case_study_d1.json"
