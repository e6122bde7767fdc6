"""Every path constant in one place, so notebooks, CLI and tests agree on where things live."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def raw_dir() -> Path:
    """Root of the raw datasets, one subfolder per dataset in its original layout. The one resolution the CLI,
    the notebooks and make share, first match wins: `BALMS_RAW_DIR`; `../shared/data` beside the project;
    `data/raw` in the project. A dataset without a folder there runs on its synthetic cohort, announced by
    `announce_data` on stderr."""
    env = os.environ.get("BALMS_RAW_DIR")
    if env:
        return Path(env).expanduser().resolve()
    return shared_data_dir() or PROJECT_ROOT / "data" / "raw"


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


def data_sources(datasets: list[str]) -> dict[str, str]:
    """{dataset: "real" | "synthetic"} as `raw_dir()` resolves them now."""
    return {d: "real" if dataset_raw_dir(d).is_dir() else "synthetic" for d in datasets}


# the committed record of which datasets the committed artefacts were made from (notebook 00 writes it)
DATA_SUMMARY_CSV = "data_summary.csv"


def committed_real() -> set[str]:
    """Datasets the committed artefacts were made from real data (`tables/data_summary.csv`'s source column)."""
    import csv

    p = TABLES_DIR / DATA_SUMMARY_CSV
    if not p.exists():
        return set()
    with open(p, newline="") as fh:
        return {r["dataset"] for r in csv.DictReader(fh) if r.get("source") == "real"}


def synthetic_fallbacks() -> list[str]:
    """Datasets committed as real that resolve to synthetic now: a run on them must not overwrite the committed
    artefacts (output_dirs sends it to build/synthetic/ unless allowed)."""
    return sorted(d for d, s in data_sources(sorted(committed_real())).items() if s == "synthetic")


def synthetic_allowed() -> bool:
    """`-p allow_synthetic true` (announce_data sets the variable) or BALMS_ALLOW_SYNTHETIC=1."""
    return os.environ.get("BALMS_ALLOW_SYNTHETIC", "") in ("1", "true", "True")


def announce_data(datasets: list[str], *, allow_synthetic: bool = False, file=None) -> dict:
    """Say on stderr, before anything runs, which of `datasets` run on synthetic cohorts and where the artefacts
    go. Returns `data_sources(datasets)`."""
    import sys

    file = file or sys.stderr
    if allow_synthetic:
        os.environ["BALMS_ALLOW_SYNTHETIC"] = "1"
    src = data_sources(datasets)
    synth = [d for d, s in src.items() if s == "synthetic"]
    if synth:
        print(f"balms: no real data for {', '.join(synth)} (no folder under {raw_dir()}): "
              f"{'it runs' if len(synth) == 1 else 'they run'} on SYNTHETIC cohorts. Real data: set BALMS_RAW_DIR "
              "(else ../shared/data beside the project, else data/raw).", file=file)
    lost = synthetic_fallbacks()
    if lost and not synthetic_allowed():
        print(f"balms: the committed artefacts use real {', '.join(lost)}; this run's artefacts go to "
              f"{_rel_root(SYNTHETIC_OUTPUT)}/<profile>/ and leave them unchanged "
              "(-p allow_synthetic true overwrites them).", file=file)
    elif lost:
        print(f"balms: allow_synthetic: this run OVERWRITES committed real-data artefacts with synthetic "
              f"{', '.join(lost)}.", file=file)
    file.flush()
    return src


def _rel_root(p: Path) -> str:
    return str(p.relative_to(PROJECT_ROOT))


def writes_committed(profile: str) -> bool:
    """Whether a profile's artefacts land in committed folders (tables/, figures/, results/<profile>/)."""
    return not os.environ.get("BALMS_OUTPUT_DIR") and profile not in SMOKE_PROFILES


def output_dirs(profile: str) -> tuple[Path, Path]:
    """(tables, figures) folders of a profile, created if needed. demo/paper write the committed `tables/` and
    `figures/`; the smoke profile (CI) writes to build/; any other profile to results/<profile>/.
    `BALMS_OUTPUT_DIR` redirects everything (tests use it). A run where a dataset the committed artefacts made from
    real data resolves to synthetic writes to build/synthetic/<profile>/ instead, unless `synthetic_allowed()`."""
    t, f = committed_dirs(profile)
    if writes_committed(profile) and not synthetic_allowed() and synthetic_fallbacks():
        root = SYNTHETIC_OUTPUT / profile
        t, f = root / "tables", root / "figures"
    t.mkdir(parents=True, exist_ok=True)
    f.mkdir(parents=True, exist_ok=True)
    return t, f


def committed_dirs(profile: str) -> tuple[Path, Path]:
    """(tables, figures) where a profile's artefacts belong (output_dirs without the synthetic redirect)."""
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
    return t, f


def data_summary_path() -> Path:
    """Where `make data` writes the data summary: the committed `tables/`, or build/synthetic/ when a dataset
    committed as real falls back to synthetic (unless allowed)."""
    keep = synthetic_fallbacks() and not synthetic_allowed()
    d = SYNTHETIC_OUTPUT if keep else TABLES_DIR
    d.mkdir(parents=True, exist_ok=True)
    return d / DATA_SUMMARY_CSV


def index_path(profile: str) -> Path:
    """The artefact index of a profile (`tables/index.csv` of its output folder)."""
    return output_dirs(profile)[0] / "index.csv"


TABLES_DIR = PROJECT_ROOT / "tables"
RESULTS_DIR = PROJECT_ROOT / "results"  # committed results: exported responses and study bundles, per profile
FIGURES_DIR = PROJECT_ROOT / "figures"
SYNTHETIC_OUTPUT = PROJECT_ROOT / "build" / "synthetic"  # artefacts of a run that fell back to synthetic data
PAPER_TABLES_DIR = Path(__file__).resolve().parent / "resources" / "paper_tables"
CASE_STUDY_D1 = Path(__file__).resolve().parent / "resources" / "case_study_d1.json"


def executed_dir(profile: str) -> Path:
    """Where make writes a profile's executed notebooks: the committed notebooks/executed/<profile>/, or
    build/synthetic/<profile>/executed when output_dirs redirects (a synthetic fallback)."""
    if writes_committed(profile) and not synthetic_allowed() and synthetic_fallbacks():
        return SYNTHETIC_OUTPUT / profile / "executed"
    return PROJECT_ROOT / "notebooks" / "executed" / profile

