"""Synthetic cohorts that WRITE each dataset's original raw layout, so the real loaders read them unchanged.

Why: the project must run end to end without licensed data (DiversityOne) or before a user downloads
anything, and the tests need small cohorts with a KNOWN behaviour-label relation. Writing raw files
(instead of building tables directly) proves that synthetic and real data go through the same loader code.

Each generator is deterministic by seed (numpy Generator), has realistic ranges, missing days and runs of
missing days, a weekly rhythm, between-person differences and one documented planted relation
(`planted_relation(name)`). Everything made from these files is marked source="synthetic".
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from balms.data import synthetic_diversityone, synthetic_globem, synthetic_pmdata
from balms.paths import synthetic_dir

GENERATOR_VERSION = "1"
MARKER = ".balms_synthetic.json"
DEFAULT_SIZES = {"pmdata": (8, 120), "globem": (10, 90), "diversityone": (12, 28)}  # (users, days)
_WRITERS = {
    "pmdata": synthetic_pmdata.write_pmdata,
    "globem": synthetic_globem.write_globem,
    "diversityone": synthetic_diversityone.write_diversityone,
}
_PLANTED = {
    "pmdata": synthetic_pmdata.PLANTED,
    "globem": synthetic_globem.PLANTED,
    "diversityone": synthetic_diversityone.PLANTED,
}


def _check(dataset: str) -> None:
    if dataset not in _WRITERS:
        raise ValueError(f"unknown dataset {dataset!r}; expected one of {sorted(_WRITERS)}")


def planted_relation(dataset: str) -> str:
    """Plain-language description of the behaviour-label relation planted in the synthetic cohort."""
    _check(dataset)
    return _PLANTED[dataset]


def write_synthetic(dataset: str, out_dir: Path, *, seed: int = 0, n_users: int | None = None,
                    n_days: int | None = None) -> Path:
    """Write a synthetic cohort of `dataset` in its original raw layout into `out_dir`; return `out_dir`.

    For GLOBEM `out_dir` receives one cohort folder (INS-W-synth_1); for DiversityOne one site folder
    (Site_Ulaanbaatar_MN); for PMData the pNN folders and participant-overview.xlsx.
    """
    _check(dataset)
    users, days = DEFAULT_SIZES[dataset]
    users, days = n_users or users, n_days or days
    if users < 1 or days < 21:
        raise ValueError(f"need at least 1 user and 21 days, got {users} users x {days} days")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng([seed, list(_WRITERS).index(dataset)])
    _WRITERS[dataset](out_dir, rng, users, days)
    (out_dir / MARKER).write_text(json.dumps(_marker(dataset, seed, users, days), indent=1))
    return out_dir


def _marker(dataset: str, seed: int, n_users: int | None = None, n_days: int | None = None) -> dict:
    users, days = DEFAULT_SIZES[dataset]
    return {"dataset": dataset, "seed": seed, "generator_version": GENERATOR_VERSION, "n_users": n_users or users,
            "n_days": n_days or days, "source": "synthetic"}


def is_synthetic(raw_dir: Path) -> bool:
    """True when `raw_dir` (a dataset folder, or a cohort/site folder inside one) was written here.

    Loaders or callers can use it so that output made from synthetic files always says "synthetic".
    """
    p = Path(raw_dir).resolve()
    return any((q / MARKER).is_file() for q in (p, p.parent))


def _marker_matches(target: Path, want: dict) -> bool:
    try:
        return json.loads((target / MARKER).read_text()) == want
    except (OSError, ValueError):  # absent or unreadable marker: (re)generate
        return False


def ensure_synthetic(dataset: str, *, seed: int = 0) -> Path:
    """The synthetic raw folder `synthetic_dir()/<dataset>`, generated once (atomically) and reused.

    A marker file records seed and generator version; when they differ the folder is regenerated.
    """
    _check(dataset)
    target = synthetic_dir() / dataset
    want = _marker(dataset, seed)
    if _marker_matches(target, want):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dataset}-", dir=target.parent))
    try:
        write_synthetic(dataset, tmp, seed=seed)  # writes the marker last
        if _marker_matches(target, want):  # another process finished first: keep its copy
            shutil.rmtree(tmp, ignore_errors=True)
            return target
        old = None
        if target.exists():
            old = target.parent / f".{dataset}-old-{os.getpid()}"
            os.replace(target, old)
        os.replace(tmp, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target
