"""`balms cache verify [--cache-dir DIR] [--delete-bad]`: check every stored response against its digest
(balms.models.cache), naming each entry that fails; exits 1 when one does."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from balms.models.cache import ResponseCache


def register(sub) -> None:
    """`balms cache verify [--cache-dir DIR] [--delete-bad]`: check every stored response against its digest."""
    p = sub.add_parser("cache", help="the response cache: check it")
    s = p.add_subparsers(dest="cmd", required=True)
    v = s.add_parser("verify", help="check every response's digest; exits 1 naming each bad entry")
    v.add_argument("--cache-dir", default=None, help="default: BALMS_CACHE_DIR (the project's cache)")
    v.add_argument("--delete-bad", action="store_true",
                   help="remove the entries that fail (a run in mode 'rw' recomputes them)")

    def run(a) -> int:
        from balms import paths
        from balms.models.registry import additions_for_model_id

        path = Path(a.cache_dir or paths.cache_dir()) / "responses.sqlite"
        if not path.exists():
            print(f"balms cache: no response cache at {path}", file=sys.stderr)
            return 2
        cache = ResponseCache(path, additions_of=additions_for_model_id)
        try:
            got = cache.verify()
            bad = [b["key"] for b in got["bad"]]
            deleted = cache.delete(bad) if a.delete_bad and bad else 0
        finally:
            cache.close()
        print(json.dumps({"cache": str(path), "checked": got["checked"], "bad": len(bad), "deleted": deleted,
                          "digested_old_rows": cache.digested}))
        for b in got["bad"]:
            print(f"balms cache: BAD {b['key']} (model {b['model_id']}): {b['problem']}", file=sys.stderr)
        return 1 if bad and not a.delete_bad else 0

    p.set_defaults(func=run)
