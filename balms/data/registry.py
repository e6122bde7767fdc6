"""The datasets of the benchmark, declared once: loader, label scale, default look-back, paper figures.

Configuration validation, the CLI's choices, the loaders' dispatch, the sample builder's defaults, the metrics'
scales and Table 5 read this table; nothing else lists datasets. A dataset's own prompt phrasing lives with the
prompts (balms.agents.paper_prompts, balms.judges.llm_judge) and is tested against this list.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class DatasetSpec:
    """One dataset: where its loader lives and the facts every layer needs about its label."""

    name: str
    display_name: str  # as the paper's tables name it
    loader: str  # "module:function" taking (raw_dir, source=..., **opts) -> DatasetTables
    scale: tuple[int, int]  # native label scale (METHOD.md)
    default_lookback: int  # days; the paper's per-dataset window
    paper_n_samples: int | None = None  # Table 5's evaluation-set size
    paper_mean_predictor_mae: float | None = None  # Section 4.1 / Table 3's mean predictor

    def load_function(self) -> Callable:
        mod, fn = self.loader.split(":")
        return getattr(importlib.import_module(mod), fn)


_DATASETS: dict[str, DatasetSpec] = {d.name: d for d in (
    DatasetSpec("diversityone", "DiversityOne", "balms.data.diversityone:load_diversityone", (1, 5), 7, 1355, 0.58),
    DatasetSpec("pmdata", "PMData", "balms.data.pmdata:load_pmdata", (1, 5), 14, 1448, 0.48),
    DatasetSpec("globem", "GLOBEM", "balms.data.globem:load_globem", (0, 3), 14, 1640, 0.80),
)}
DATASETS: tuple[str, ...] = tuple(_DATASETS)


def dataset_names() -> list[str]:
    return list(_DATASETS)


def get_dataset(name: str) -> DatasetSpec:
    """The dataset's spec; an unknown name is an error listing the known ones."""
    try:
        return _DATASETS[name]
    except KeyError:
        raise ValueError(f"unknown dataset {name!r}; known datasets: {', '.join(_DATASETS)}") from None
