"""`balms bundle export|import|verify|export-responses|import-responses|rekey-responses|compare`: carry a
profile's model responses to another machine and check its tables there (balms.bundle)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from balms.bundle import (
    PREFER,
    compare_tables,
    export_bundle,
    export_responses,
    import_bundle,
    import_responses,
    rekey_responses,
    verify_bundle,
)
from balms.data.schema import DataError


def register(sub) -> None:
    """`balms bundle export|import|verify|export-responses|import-responses|rekey-responses|compare`."""
    p = sub.add_parser("bundle", help="carry a profile's model responses to another machine and check tables")
    s = p.add_subparsers(dest="cmd", required=True)
    e = s.add_parser("export-responses", help="the responses a profile's records name -> one .jsonl.gz")
    e.add_argument("--profile", required=True)
    e.add_argument("--out", required=True)
    e.add_argument("--set", default="", help="overrides as '-p name value ...' (make's P): which cells are current")
    e.add_argument("--all", action="store_true", help="every run file, superseded cells too (the declared ones must "
                   "all be there either way)")
    prefer_help = ("which side wins where the local caches answer a key differently (default: refuse, write "
                   "nothing and exit 2)")
    i = s.add_parser("import-responses", help="load an exported responses file into the local caches")
    i.add_argument("file")
    i.add_argument("--prefer", choices=PREFER, default=None, help=prefer_help)
    r = s.add_parser("rekey-responses", help="a responses file (or a bundle's responses) written under an earlier "
                     "response-key rule -> the same responses under the current one (no model call)")
    r.add_argument("src", help="a .jsonl.gz responses file or a .bundle.tar.gz")
    r.add_argument("out", help="the re-keyed .jsonl.gz (may be the same path as src)")
    b = s.add_parser("export", help="one archive with a profile's runs, the responses they used and checksums")
    b.add_argument("--profile", required=True)
    b.add_argument("--out", default=None, help="default: results/<profile>/<profile>.bundle.tar.gz")
    b.add_argument("--set", default="", help="overrides as '-p name value ...' (make's P): which cells are current")
    b.add_argument("--all", action="store_true", help="every run file, superseded cells too (the declared ones must "
                   "all be there either way)")
    bi = s.add_parser("import", help="verify a bundle's checksums and data, then install its runs and responses")
    bi.add_argument("file")
    bi.add_argument("--no-data-check", action="store_true", help="install even if the local data differ")
    bi.add_argument("--prefer", choices=PREFER, default=None, help=prefer_help)
    v = s.add_parser("verify", help="check a bundle's checksums without installing it")
    v.add_argument("file")
    c = s.add_parser("compare", help="regenerated tables vs committed ones (latency columns aside)")
    c.add_argument("--ours", required=True)
    c.add_argument("--committed", default=None, help="default: the profile's own tables folder")
    c.add_argument("--profile", default="demo")

    def run(a) -> int:
        from balms.experiments.config import ConfigError
        from balms.models.cache import CacheIntegrityError

        try:
            return _dispatch(a)
        except (DataError, CacheIntegrityError, ConfigError) as exc:
            print(f"balms bundle: {exc}", file=sys.stderr)
            return 2

    def _dispatch(a) -> int:
        if a.cmd in ("export", "export-responses"):  # every cell the notebooks declare, with the run's P
            from balms.experiments.config import load, parse_cli_overrides

            cfg = load(a.profile, **parse_cli_overrides(a.set))
        if a.cmd == "export":
            got = export_bundle(cfg.profile, Path(a.out) if a.out else None, cfg=cfg, every=a.all)
            print(json.dumps(got))
            _packed(got)
        elif a.cmd == "import":
            print(json.dumps(import_bundle(Path(a.file), check_local_data=not a.no_data_check, prefer=a.prefer)))
        elif a.cmd == "verify":
            meta, _ = verify_bundle(Path(a.file))
            print(json.dumps({"profile": meta["profile"], "files": len(meta["files"]), **meta["counts"]}))
        elif a.cmd == "export-responses":
            got = export_responses(cfg.profile, Path(a.out), cfg=cfg, every=a.all)
            print(json.dumps(got))
            _packed(got)
        elif a.cmd == "rekey-responses":
            print(json.dumps(rekey_responses(Path(a.src), Path(a.out))))
        elif a.cmd == "import-responses":
            got = import_responses(Path(a.file), prefer=a.prefer)
            print(json.dumps(got))
            if got["conflicts"]:
                print(f"balms bundle: {got['conflicts']} entr(y/ies) differed from the local caches; "
                      f"--prefer {a.prefer}: {'the file' if a.prefer == 'bundle' else 'yours'} won",
                      file=sys.stderr)
        else:
            from balms.paths import output_dirs

            probs = compare_tables(Path(a.ours), Path(a.committed) if a.committed else output_dirs(a.profile)[0])
            for x in probs:
                print(x)
            print(f"{len(probs)} table(s) differ" if probs else "every committed table reproduced")
            return 1 if probs else 0
        return 0

    def _packed(got: dict) -> None:
        left = got.get("run_files_left_out")
        note = f"; {left} run file(s) of cells not declared now left out (--all packs them)" if left else ""
        print(f"balms bundle: packed {got['responses']} response(s) named by {got['records']} record(s) of "
              f"{got['cells']} cell(s) and {got['verdicts']} judge verdict(s), {got['raptor_summaries']} RAPTOR "
              f"summaries{note}", file=sys.stderr)

    p.set_defaults(func=run)
