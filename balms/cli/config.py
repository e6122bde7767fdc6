"""`balms config show|notebooks|executed-dir|params`: a profile's resolved configuration, its notebooks, and a
notebook's own parameters (what make passes papermill)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

from balms import paths
from balms.experiments.config import ConfigError, load, parse_cli_overrides, profile_notebooks, resolve_for_notebook


def _cmd(args) -> int:
    try:
        if args.cmd == "show":
            cfg = load(args.profile, **parse_cli_overrides(args.set))
            print(json.dumps(cfg.model_dump(), indent=2))
            return 0
        if args.cmd == "executed-dir":  # make's EXEC_DIR
            print(paths._rel_root(paths.executed_dir(args.profile)))
            return 0
        if args.cmd == "notebooks":
            print(" ".join(str(p.relative_to(paths.PROJECT_ROOT)) for p in profile_notebooks(args.profile)))
            return 0
        vals = resolve_for_notebook(args.profile, args.notebook, args.set)
    except ConfigError as exc:
        print(f"balms config: {exc}", file=sys.stderr)
        return 2
    text = yaml.safe_dump(vals, sort_keys=False, default_flow_style=None)
    if args.out == "-":
        sys.stdout.write(text)
    else:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text, encoding="utf-8")
    return 0


def register(sub) -> None:
    """`balms config show|notebooks|executed-dir|params`."""
    p = sub.add_parser("config", help="a profile's resolved configuration; a notebook's own parameters")
    s = p.add_subparsers(dest="cmd", required=True)
    show = s.add_parser("show", help="the resolved configuration of a profile, as JSON")
    show.add_argument("--profile", default="demo")
    show.add_argument("--set", default="", help="overrides as '-p name value ...'")
    nb = s.add_parser("notebooks", help="the notebooks `make paper` executes for a profile (paths, in order)")
    nb.add_argument("--profile", default="demo")
    ex = s.add_parser("executed-dir", help="where make writes a profile's executed notebooks (balms.paths)")
    ex.add_argument("profile")
    par = s.add_parser("params", help="a notebook's own parameters, resolved, as YAML for papermill -f")
    par.add_argument("--profile", default="demo")
    par.add_argument("--notebook", required=True, help="notebooks/NN_name.py")
    par.add_argument("--set", default="", help="overrides as '-p name value ...' (make's P)")
    par.add_argument("--out", default="-")
    p.set_defaults(func=_cmd)
