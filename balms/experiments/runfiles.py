"""Which run files are current: those whose cell key a notebook of the profile declares now.

After a change (a prompt, a parser, the data) the cells get new keys and new run files; the old files stay on
disk (their model calls are in the response cache either way). The report, the bundle and `balms runs` read only
the current ones; `balms runs status` lists every file with its state and `balms runs gc` removes the superseded
ones (a dry run unless `--yes`).

    balms runs status --profile demo [--set "-p n_samples 3"] [--strict]
    balms runs gc --profile demo [--yes]
"""

from __future__ import annotations

import json
import sys
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


# --------------------------------------------------------------------------------------------------- CLI ---
def _cfg(args) -> ExperimentConfig:
    from balms.experiments.config import ConfigError, load, parse_cli_overrides

    try:
        return load(args.profile, **parse_cli_overrides(args.set))
    except ConfigError as exc:
        raise SystemExit(f"balms runs: {exc}") from None


def _status_cmd(args) -> int:
    cfg = _cfg(args)
    root = Path(args.runs) / cfg.profile if args.runs else cfg.runs_root()
    st = status(cfg, root)
    if args.json:
        print(json.dumps(st.to_dict(), indent=2))
    else:
        print(f"profile {cfg.profile}: {len(st.current)} current run files, {len(st.superseded)} superseded, "
              f"{len(st.missing)} declared cells not run yet ({root})")
        for p in st.superseded:
            print(f"  superseded: {p.relative_to(root)}")
        for k, what in st.missing.items():
            print(f"  not run: {k} ({what})")
    if args.strict and (st.superseded or st.missing):
        print(f"balms runs status --strict: the run files differ from the declared cells ({len(st.superseded)} not "
              f"declared, {len(st.missing)} declared but not run)", file=sys.stderr)
        return 1
    return 0


def _gc_cmd(args) -> int:
    cfg = _cfg(args)
    root = Path(args.runs) / cfg.profile if args.runs else cfg.runs_root()
    victims = gc(cfg, root, dry_run=not args.yes)
    verb = "removed" if args.yes else "would remove (dry run; --yes removes)"
    print(f"{verb} {len(victims)} files of superseded cells under {root}")
    for f in victims:
        print(f"  {f.relative_to(root)}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("runs", help="which run files are current for a profile; remove superseded ones")
    s = p.add_subparsers(dest="runs_command", required=True)
    for name, fn, helptext in (("status", _status_cmd, "current, superseded and not-yet-run cells"),
                               ("gc", _gc_cmd, "remove superseded run files (dry run by default)")):
        q = s.add_parser(name, help=helptext)
        q.add_argument("--profile", default="demo")
        q.add_argument("--set", default="", help="overrides as '-p name value ...' (make's P)")
        q.add_argument("--runs", default=None, help="runs root (default BALMS_RUNS_DIR or runs/)")
        if name == "status":
            q.add_argument("--json", action="store_true")
            q.add_argument("--strict", action="store_true",
                           help="exit 1 unless the run files are exactly the declared cells")
        else:
            q.add_argument("--yes", action="store_true", help="remove (default: list only)")
        q.set_defaults(func=fn)
