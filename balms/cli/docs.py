"""`balms docs fidelity --write|--check`, `balms docs scoring [--write]`: the book pages generated from the
package's own tables (balms.fidelity: docs/fidelity.md from balms/resources/fidelity.yaml; balms.scoring: the
fill-rule table of docs/scoring.md from the paper's tables)."""

from __future__ import annotations

import sys


def _fidelity(a) -> int:
    from balms import fidelity

    text = fidelity.render(fidelity.load())
    if a.write:
        fidelity.DOC_FILE.parent.mkdir(parents=True, exist_ok=True)
        fidelity.DOC_FILE.write_text(text, encoding="utf-8")
        return 0
    same = fidelity.DOC_FILE.exists() and fidelity.DOC_FILE.read_text(encoding="utf-8") == text
    if not same:
        print(f"{fidelity.DOC_FILE} differs from {fidelity.FIDELITY_FILE}: run balms docs fidelity --write",
              file=sys.stderr)
    return 0 if same else 1


def _scoring(a) -> int:
    from balms import paths, scoring

    doc = paths.PROJECT_ROOT / "docs" / scoring.DOC_FILE_NAME
    text = doc.read_text(encoding="utf-8")
    new = scoring.with_table(text)
    if a.write:
        doc.write_text(new, encoding="utf-8")
        return 0
    print(scoring.render_table())
    return 0 if new == text else 1


def register(subparsers) -> None:
    p = subparsers.add_parser("docs", help="book pages generated from the package's tables: write or check them")
    s = p.add_subparsers(dest="docs_command", required=True)
    f = s.add_parser("fidelity", help="docs/fidelity.md from balms/resources/fidelity.yaml")
    g = f.add_mutually_exclusive_group(required=True)
    g.add_argument("--write", action="store_true", help="write the page")
    g.add_argument("--check", action="store_true", help="exit 1 if the page differs from the file")
    f.set_defaults(func=_fidelity)
    sc = s.add_parser("scoring", help="docs/scoring.md's fill-rule table; without --write: print it, exit 1 if stale")
    sc.add_argument("--write", action="store_true", help="rewrite the page's generated table")
    sc.set_defaults(func=_scoring)
