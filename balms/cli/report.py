"""`balms report index|html|snapshot|written`: a profile's artefact index, its static HTML report, and what a
notebook's re-run wrote against the committed artefacts (balms.report, balms.report_html)."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def register(subparsers) -> None:
    ap = subparsers.add_parser("report", help="a profile's artefacts: the index, the HTML report, a notebook's "
                               "artefacts before and after a re-run")
    sub = ap.add_subparsers(dest="cmd", required=True)
    i = sub.add_parser("index", help="check and print the artefact index")
    i.add_argument("--profile", default="demo")
    i.add_argument("--json", action="store_true")
    h = sub.add_parser("html", help="build the static HTML report")
    h.add_argument("--profile", default="demo")
    h.add_argument("--out", default="report")
    h.add_argument("--set", default="", help="overrides as '-p name value ...' (make's P): which cells are current")
    h.add_argument("--all", action="store_true", help="every run file, superseded cells too")
    for name, helptext in (("snapshot", "copy a notebook's committed artefacts aside before a re-run"),
                           ("written", "each artefact a notebook wrote: equal or differs from the snapshot")):
        w = sub.add_parser(name, help=helptext)
        w.add_argument("--profile", default="demo")
        w.add_argument("--notebook", required=True)
        w.add_argument("--dir", required=True, help="the snapshot folder")
    ap.set_defaults(func=_run)


def _run(a) -> int:
    from balms.report import WHY_DIFFERS, check_index, index_path, snapshot, written  # matplotlib: only when asked

    if a.cmd == "snapshot":
        snapshot(a.profile, a.notebook, Path(a.dir))
        return 0
    if a.cmd == "written":
        rows = written(a.profile, a.notebook, Path(a.dir))
        for p, status, what in rows:
            print(f"  {status:8s} {p}" + (f"  ({what})" if what else ""))
        k = {x: sum(s == x for _, s, _ in rows) for x in ("equal", "differs", "new")}
        for suffix in sorted({Path(p).suffix for p, s, _ in rows if s == "differs"}):
            print(f"  why a {suffix} differs: {WHY_DIFFERS[suffix]}")
        print(f"[{a.notebook}] {len(rows)} artefacts written: {k['equal']} equal to the committed ones, "
              f"{k['differs']} differ, {k['new']} new (tables: numbers compared, latency columns apart; "
              f"figures: bytes; committed copies in {a.dir})")
        return 0
    if a.cmd == "index":
        idx = check_index(a.profile)
        if a.json:
            print(json.dumps(idx.to_dict(orient="records"), default=str))
        else:
            print(idx[["artefact", "path", "notebook", "source"]].to_string(index=False))
            print(f"{len(idx)} artefacts, all present ({index_path(a.profile)})")
        return 0
    from balms.experiments.runfiles import profile_keys
    from balms.report_html import ReportDirError, build_report

    try:
        out = build_report(a.profile, Path(a.out), keys=None if a.all else profile_keys(a.profile, a.set))
    except ReportDirError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"report written to {out}")
    return 0


