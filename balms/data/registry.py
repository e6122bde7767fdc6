"""The datasets of the benchmark, each declared once, in one `DatasetSpec`: its loader, its synthetic writer, its
label scale and default look-back, how the paper's prompt and the judge name its target, and the paper's figures.

Configuration validation, the CLI's choices, the loaders' dispatch, the synthetic cohorts, the sample builder's
defaults, the prompts, the judge, the metrics' scales and Table 5 read this table; nothing else lists datasets.
Another package adds a dataset through the entry-point group `balms.datasets` (each entry point loads a
`DatasetSpec`, or a callable returning one), the way `balms.systems` adds a system: see examples/balms-tiny-cohort.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

ENTRY_POINT_GROUP = "balms.datasets"


@dataclass(frozen=True)
class PromptTarget:
    """The target as the paper's template names it: purpose line, task instruction, question; the range printed
    (None = the dataset's native scale)."""

    purpose: str
    name: str
    question: str
    printed_range: tuple[int, int] | None = None


def _resolve(ref: str) -> Callable:
    mod, fn = ref.split(":")
    return getattr(importlib.import_module(mod), fn)


@dataclass(frozen=True)
class DatasetSpec:
    """One dataset: where its loader and synthetic writer live and the facts every layer needs about its label."""

    name: str
    display_name: str  # as the paper's tables name it
    loader: str  # "module:function" taking (raw_dir, source=..., **opts) -> DatasetTables
    scale: tuple[int, int]  # native label scale (METHOD.md)
    default_lookback: int  # days; the paper's per-dataset window
    # how the paper's prompt template names the target (None: from the loaded Target's label)
    prompt: PromptTarget | None = None
    judge_target: str = ""  # the judge's description of the label where a record's window is plain text
    # "module:function" (out_dir, rng, n_users, n_days) writing a synthetic cohort in the raw layout the loader
    # reads; its module's PLANTED text describes the relation planted in it. None: no synthetic stand-in.
    synthetic: str | None = None
    synthetic_size: tuple[int, int] = (8, 60)  # (users, days) of the synthetic cohort
    # the synthetic cohort's random stream (with the seed): declared, so adding a dataset never changes another's
    synthetic_stream: int | None = None
    paper_n_samples: int | None = None  # Table 5's evaluation-set size
    paper_mean_predictor_mae: float | None = None  # Section 4.1 / Table 3's mean predictor
    source: str = "balms"  # the package that declared it (a plugin's distribution name)

    def load_function(self) -> Callable:
        return _resolve(self.loader)

    def synthetic_writer(self) -> Callable:
        if not self.synthetic:
            raise ValueError(f"dataset {self.name!r} declares no synthetic writer: its raw data must be present")
        return _resolve(self.synthetic)

    def planted(self) -> str:
        """The planted behaviour-label relation of the synthetic cohort, in words (its writer module's PLANTED)."""
        return getattr(importlib.import_module(self.synthetic_writer().__module__), "PLANTED", "")

    def stream(self) -> int:
        """The synthetic cohort's random stream: declared, else a stable number from the name."""
        if self.synthetic_stream is not None:
            return self.synthetic_stream
        import zlib

        return zlib.crc32(self.name.encode())


_BUILTIN = (
    DatasetSpec("diversityone", "DiversityOne", "balms.data.diversityone:load_diversityone", (1, 5), 7,
                prompt=PromptTarget("mood", "Mood", "mood"),
                judge_target="evening mood (1 = very bad, 5 = very good)",  # the reader's recoded scale
                synthetic="balms.data.synthetic_diversityone:write_diversityone", synthetic_size=(12, 28),
                synthetic_stream=2, paper_n_samples=1355, paper_mean_predictor_mae=0.58),
    DatasetSpec("pmdata", "PMData", "balms.data.pmdata:load_pmdata", (1, 5), 14,
                prompt=PromptTarget("stress level", "Stress", "stress", (0, 5)),
                judge_target="daily stress level",
                synthetic="balms.data.synthetic_pmdata:write_pmdata", synthetic_size=(8, 120), synthetic_stream=0,
                paper_n_samples=1448, paper_mean_predictor_mae=0.48),
    DatasetSpec("globem", "GLOBEM", "balms.data.globem:load_globem", (0, 3), 14,
                prompt=PromptTarget("anxiety level", "PHQ-4 Anxiety", "PHQ-4 anxiety"),
                judge_target="PHQ-4 anxiety subscale item (feel_anxious)",
                synthetic="balms.data.synthetic_globem:write_globem", synthetic_size=(10, 90), synthetic_stream=1,
                paper_n_samples=1640, paper_mean_predictor_mae=0.80),
)
_DATASETS: dict[str, DatasetSpec] = {d.name: d for d in _BUILTIN}
DATASETS: tuple[str, ...] = tuple(_DATASETS)  # the built-in ones (plugins: dataset_names())
_PLUGINS_LOADED = False


def register_dataset(spec: DatasetSpec, *, replace: bool = False) -> DatasetSpec:
    """Add a dataset (an entry point does this for an installed plugin); a clash is an error unless `replace`."""
    if not isinstance(spec, DatasetSpec):
        raise TypeError(f"register_dataset expects a DatasetSpec, got {type(spec).__name__}")
    if not spec.name.isidentifier() or spec.name != spec.name.lower():
        raise ValueError(f"dataset name {spec.name!r}: expected a lower-case identifier (it names folders and files)")
    lo, hi = spec.scale
    if not (isinstance(lo, int) and isinstance(hi, int) and lo < hi):
        raise ValueError(f"dataset {spec.name!r}: scale {spec.scale!r} must be two integers, low < high")
    if spec.default_lookback < 1:
        raise ValueError(f"dataset {spec.name!r}: default_lookback {spec.default_lookback} must be >= 1 day")
    if spec.name in _DATASETS and not replace and _DATASETS[spec.name] is not spec:
        raise ValueError(f"dataset {spec.name!r} is already registered (by {_DATASETS[spec.name].source})")
    taken = {d.stream(): d.name for d in _DATASETS.values() if d.name != spec.name and d.synthetic}
    if spec.synthetic and spec.stream() in taken:
        raise ValueError(f"dataset {spec.name!r}: synthetic_stream {spec.stream()} is {taken[spec.stream()]!r}'s")
    _DATASETS[spec.name] = spec
    return spec


def load_plugins() -> None:
    """Register every `balms.datasets` entry point once; a broken plugin is named on stderr and skipped."""
    global _PLUGINS_LOADED
    if _PLUGINS_LOADED:
        return
    _PLUGINS_LOADED = True
    from balms.plugins import register_entry_points

    register_entry_points(ENTRY_POINT_GROUP, DatasetSpec, register_dataset, "dataset")


def dataset_names() -> list[str]:
    """Every registered dataset: the built-in ones, then plugins'."""
    load_plugins()
    return list(_DATASETS)


def get_dataset(name: str) -> DatasetSpec:
    """The dataset's spec; an unknown name is an error listing the known ones."""
    load_plugins()
    try:
        return _DATASETS[name]
    except KeyError:
        raise ValueError(f"unknown dataset {name!r}; known datasets: {', '.join(_DATASETS)}") from None
