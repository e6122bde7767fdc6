"""Synthetic cohorts that WRITE each dataset's original raw layout, so the real loaders read them unchanged.

Why: the project must run end to end without licensed data (DiversityOne) or before a user downloads
anything, and the tests need small cohorts with a KNOWN behaviour-label relation. Writing raw files
(instead of building tables directly) proves that synthetic and real data go through the same loader code.

Each generator is deterministic by seed (numpy Generator), has realistic ranges, missing days and runs of
missing days, a weekly rhythm, between-person differences and one documented planted relation
(`planted_relation(name)`). Everything made from these files is marked source="synthetic".

A generated cohort is keyed by `generator_fingerprint` (generator source + parameters + seed), kept in its
marker file: editing a generator regenerates the cohort instead of silently reusing stale files.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from balms.data.registry import dataset_names, get_dataset
from balms.paths import synthetic_dir

MARKER = ".balms_synthetic.json"


def _sizes() -> dict[str, tuple[int, int]]:
    """(users, days) of each dataset's synthetic cohort, from its spec (tests may change an entry)."""
    return {d: get_dataset(d).synthetic_size for d in dataset_names() if get_dataset(d).synthetic}


DEFAULT_SIZES = _sizes()


def _check(dataset: str) -> None:
    get_dataset(dataset)  # an unknown name: an error listing the known ones
    if dataset not in DEFAULT_SIZES:
        DEFAULT_SIZES.update(_sizes())  # a dataset registered after import (a plugin, a test)
    get_dataset(dataset).synthetic_writer()  # no writer declared: an error naming the dataset


def planted_relation(dataset: str) -> str:
    """Plain-language description of the behaviour-label relation planted in the synthetic cohort."""
    _check(dataset)
    return get_dataset(dataset).planted()


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
    rng = np.random.default_rng([seed, get_dataset(dataset).stream()])
    get_dataset(dataset).synthetic_writer()(out_dir, rng, users, days)
    (out_dir / MARKER).write_text(json.dumps(_marker(dataset, seed, users, days), indent=1))
    return out_dir


# ------------------------------------------------------------------------------------ fingerprint
def _module_file(name: str) -> Path:
    mod = importlib.import_module(name)
    if not getattr(mod, "__file__", None):
        raise RuntimeError(f"synthetic fingerprint: module {name} has no source file")
    return Path(mod.__file__)


def _balms_imports(path: Path) -> set[str]:
    """The balms modules a source file imports (module level or inside functions)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("balms."))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("balms"):
            for a in node.names:  # `from balms.data import diversityone` names a module
                sub = f"{node.module}.{a.name}"
                found.add(sub if _is_module(sub) else node.module)
    return found


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # `from balms.data.schema import Channel`: Channel is no module
        return False


def generator_sources(dataset: str) -> dict[str, bytes]:
    """Source of every module that decides what a cohort contains: this module (seeding, sizes), the
    dataset's writer, and the balms modules the writer imports, transitively (the DiversityOne writer
    takes its file and column names from the reader's constants)."""
    _check(dataset)
    writer = get_dataset(dataset).synthetic_writer().__module__
    out = {__name__: _module_file(__name__).read_bytes()}
    todo = [writer]
    while todo:
        name = todo.pop()
        if name in out:
            continue
        path = _module_file(name)
        out[name] = path.read_bytes()
        todo.extend(sorted(_balms_imports(path) - set(out)))
    return dict(sorted(out.items()))


def generator_fingerprint(dataset: str, *, seed: int = 0, n_users: int | None = None,
                          n_days: int | None = None) -> str:
    """sha256 of the generator's source (`generator_sources`), its parameters, the seed and numpy's
    version (the random streams). A cohort on disk is reused only when its marker holds this value, so
    an edited generator or a changed size never serves stale files."""
    return _fingerprint(dataset, seed, n_users, n_days, generator_sources(dataset))


def _fingerprint(dataset: str, seed: int, n_users: int | None, n_days: int | None,
                 sources: dict[str, bytes]) -> str:
    users, days = DEFAULT_SIZES[dataset]
    params = {"dataset": dataset, "seed": int(seed), "n_users": int(n_users or users), "n_days": int(n_days or days),
              "numpy": np.__version__}
    h = hashlib.sha256(json.dumps(params, sort_keys=True).encode())
    for name, src in sources.items():
        h.update(f"\0{name}\0{len(src)}\0".encode())
        h.update(src)
    return h.hexdigest()


def _marker(dataset: str, seed: int, n_users: int | None = None, n_days: int | None = None) -> dict:
    users, days = DEFAULT_SIZES[dataset]
    sources = generator_sources(dataset)
    return {"dataset": dataset, "seed": seed, "n_users": n_users or users, "n_days": n_days or days,
            "source": "synthetic", "generator_modules": list(sources),
            "fingerprint": _fingerprint(dataset, seed, n_users, n_days, sources)}


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

    The marker file records the generator fingerprint; when it differs (edited generator, other seed or
    sizes, a marker from an older version) the cohort is written to a temporary folder beside the target,
    which then replaces it by rename, so a reader never sees a half-written cohort.
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
            shutil.rmtree(old, ignore_errors=True)  # left by a crashed run of a process with this pid
            os.replace(target, old)
        try:
            os.replace(tmp, target)
        except OSError:
            if not _marker_matches(target, want):
                raise
            shutil.rmtree(tmp, ignore_errors=True)  # another process put the same cohort there first
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target
