"""`balms runs status|gc --profile NAME`: which run files are current for a profile (balms.experiments.runfiles);
remove the superseded ones (a dry run unless `--yes`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from balms.experiments.config import ConfigError, ExperimentConfig, load, parse_cli_overrides
from balms.experiments.runfiles import gc, status


def _cfg(args) -> ExperimentConfig:
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
