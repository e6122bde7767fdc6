"""Which run files are current: those whose cell key a notebook of the profile declares now.

After a change (a prompt, a parser, the data) the cells get new keys and new run files; the old files stay on
disk (their model calls are in the response cache either way). The report, the bundle and `balms runs` read only
the current ones; `balms runs status` lists every file with its state and `balms runs gc` removes the superseded
ones (a dry run unless `--yes`).

    balms runs status --profile demo [--set "-p n_samples 3"] [--strict]
    balms runs gc --profile demo [--yes]
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from balms.cellspec import RUN_COMPANIONS as _COMPANIONS
from balms.cellspec import key_of_run_file as key_of
from balms.experiments.config import ExperimentConfig


def profile_keys(profile: str, overrides: str = "") -> set[str]:
    """The declared cell keys of a profile with make's P overrides (what `balms report` and `bundle export` read)."""
    from balms.experiments.config import load, parse_cli_overrides

    return set(declared_keys(load(profile, **parse_cli_overrides(overrides))))


def run_files(runs_root: Path) -> list[Path]:
    """Every run file (records) under a profile's runs folder."""
    root = Path(runs_root)
    return sorted(p for p in root.rglob("*.jsonl") if not p.name.endswith(".judge.jsonl")) if root.is_dir() else []


def declared_keys(cfg: ExperimentConfig) -> dict[str, str]:
    """cell key -> "notebook: cell" for every agent cell the profile's notebooks declare (first notebook kept)."""
    from balms.cellspec import describe_cell
    from balms.experiments.grid import unique_cells

    return {cell.spec.key(): f"{decl.notebook}: {describe_cell(cell.spec, decl.extra)}"
            for decl, cell in unique_cells(cfg)}


def current_run_files(cfg: ExperimentConfig, runs_root: Path | None = None) -> list[Path]:
    """The run files of the cells the profile declares now (what the report and the bundle read)."""
    keys = declared_keys(cfg)
    return [p for p in run_files(runs_root or cfg.runs_root()) if key_of(p) in keys]


@dataclass
class Status:
    current: list[Path]
    superseded: list[Path]
    missing: dict[str, str]  # declared cell key -> what it is, with no run file yet

    def to_dict(self) -> dict:
        return {"current": [str(p) for p in self.current], "superseded": [str(p) for p in self.superseded],
                "missing": self.missing}


def status(cfg: ExperimentConfig, runs_root: Path | None = None) -> Status:
    keys = declared_keys(cfg)
    files = run_files(runs_root or cfg.runs_root())
    have = {key_of(p) for p in files}
    return Status([p for p in files if key_of(p) in keys], [p for p in files if key_of(p) not in keys],
                  {k: v for k, v in keys.items() if k not in have})


def companions(run_file: Path) -> list[Path]:
    """A run file and the files that belong to it."""
    stem = run_file.name.removesuffix(".jsonl")
    return [run_file] + [run_file.with_name(stem + suffix) for suffix in _COMPANIONS
                         if run_file.with_name(stem + suffix).exists()]


def gc(cfg: ExperimentConfig, runs_root: Path | None = None, *, dry_run: bool = True) -> list[Path]:
    """The superseded run files and their companions; removed unless `dry_run`."""
    victims = [f for p in status(cfg, runs_root).superseded for f in companions(p)]
    if not dry_run:
        for f in victims:
            f.unlink()
    return victims
