"""The fidelity table (balms/resources/fidelity.yaml): load, check and render it as the book page
docs/fidelity.md, so the table a reader sees is the one the tests check.

    balms docs fidelity --write     # regenerate docs/fidelity.md
    balms docs fidelity --check     # exit 1 when docs/fidelity.md differs from the file
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from balms import paths

FIDELITY_FILE = Path(__file__).resolve().parent / "resources" / "fidelity.yaml"
DOC_FILE = paths.PROJECT_ROOT / "docs" / "fidelity.md"
STATUS = re.compile(r"^(exact|option|differs: \S.*|paper inconsistent: \S.*)$", re.DOTALL)
NEEDS_TEST = ("exact", "option")
FIELDS = ("id", "detail", "paper", "code", "status", "note", "tests", "owner", "passages", "compares")
# the paper's text, transcribed once by hand (tests compare the code's output with it, never with the code's own
# strings); a row's `passages` name the ids its wording rests on
PASSAGES_FILE = paths.PROJECT_ROOT / "tests" / "fixtures" / "paper" / "passages.yaml"
REQUIRED = ("id", "detail", "paper", "code", "status", "tests")


@dataclass(frozen=True)
class Row:
    id: str
    detail: str
    paper: str
    code: list[str]
    status: str
    tests: list[str] = field(default_factory=list)
    note: str = ""
    owner: str = ""
    passages: list[str] = field(default_factory=list)  # ids in PASSAGES_FILE the row's paper text is
    compares: str = ""  # exact rows: what their tests compare the code's output with

    @property
    def kind(self) -> str:
        """exact, option, differs or paper inconsistent."""
        return self.status.split(":", 1)[0]


class FidelityError(ValueError):
    """A malformed row, named by its id and field."""


def paper_passages(path: Path = PASSAGES_FILE) -> dict[str, dict]:
    """id -> {section, text}: the paper's text as transcribed (tests/fixtures/paper/passages.yaml)."""
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    out: dict[str, dict] = {}
    for i, p in enumerate(data.get("passages") or []):
        if not {"id", "section", "text"} <= set(p) or p["id"] in out:
            raise FidelityError(f"{path}: passage {i + 1} ({p.get('id', '?')}): needs a unique id, section and text")
        out[p["id"]] = {"section": p["section"], "text": p["text"]}
    return out


def paper_passage(pid: str) -> str:
    """One passage's text; an unknown id names the known ones."""
    got = paper_passages()
    if pid not in got:
        raise KeyError(f"no passage {pid!r} in {PASSAGES_FILE}; known: {sorted(got)}")
    return got[pid]["text"]


def load(path: Path = FIDELITY_FILE) -> list[Row]:
    """Every row, validated: known fields, required ones present, a known status, tests where the status needs
    them, unique ids."""
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    rows, seen = [], set()
    for i, r in enumerate(data.get("rows") or []):
        where = f"{path}: row {i + 1} ({r.get('id', '?')})"
        unknown = sorted(set(r) - set(FIELDS))
        missing = [k for k in REQUIRED if k not in r]
        if unknown or missing:
            raise FidelityError(f"{where}: unknown field(s) {unknown}, missing {missing}; fields: {list(FIELDS)}")
        if r["id"] in seen:
            raise FidelityError(f"{where}: duplicate id")
        seen.add(r["id"])
        if not isinstance(r["status"], str) or not STATUS.match(r["status"]):
            raise FidelityError(f"{where}: status {r['status']!r}: expected exact, option, 'differs: <why>' or "
                                "'paper inconsistent: <what we chose>'")
        if not isinstance(r["code"], list) or not r["code"] or not isinstance(r["tests"], list):
            raise FidelityError(f"{where}: code must be a non-empty list and tests a list")
        row = Row(**r)
        if row.kind in NEEDS_TEST and not row.tests:
            raise FidelityError(f"{where}: status {row.kind!r} needs a test that checks it")
        if row.kind == "exact" and not row.compares:
            raise FidelityError(f"{where}: an exact row says what its tests compare the code with (compares)")
        rows.append(row)
    if not rows:
        raise FidelityError(f"{path}: no rows")
    return rows


def _git_tracked(root: Path) -> set[str] | None:
    """Paths git tracks under `root` (None outside a git checkout, e.g. an installed wheel)."""
    if not (root / ".git").exists():
        return None
    out = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, text=True, check=True)
    return {f for f in out.stdout.split("\0") if f}


def _is_tracked(p: Path, root: Path, tracked: set[str]) -> bool:
    """A tracked file, or a folder holding one; through symlinks (profiles/ is a link to balms/profiles/)."""
    rel = p.resolve().relative_to(root.resolve()).as_posix()
    return rel in tracked or any(f.startswith(rel + "/") for f in tracked)


def unresolved_code(rows: list[Row], root: Path = paths.PROJECT_ROOT) -> list[str]:
    """Code references that no longer resolve: a missing path, one git does not track (a clean clone would lack
    it), or a `path:text` whose text is not in the file."""
    tracked = _git_tracked(root)
    bad = []
    for r in rows:
        for ref in r.code:
            rel, _, text = ref.partition(":")
            p = root / rel
            if not p.exists():
                bad.append(f"{r.id}: {rel} does not exist")
            elif tracked is not None and not _is_tracked(p, root, tracked):
                bad.append(f"{r.id}: {rel} is not tracked by git (ignored or never added)")
            elif text and (p.is_dir() or text not in p.read_text(encoding="utf-8")):
                bad.append(f"{r.id}: {text!r} not found in {rel}")
    return bad


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _code(ref: str) -> str:
    rel, _, text = ref.partition(":")
    return f"`{rel}`" + (f" (`{text}`)" if text else "")


def render(rows: list[Row]) -> str:
    """docs/fidelity.md: the legend, then one table row per detail."""
    counts = {k: sum(r.kind == k for r in rows) for k in ("exact", "option", "differs", "paper inconsistent")}
    lines = [
        "# Fidelity: every method detail of the paper, where it lives, how close",
        "",
        "<!-- generated from balms/resources/fidelity.yaml by `balms docs fidelity --write`; do not edit -->",
        "",
        "`exact` = as the paper states it; `option` = the paper's choice is a named option (the note says which "
        "profile uses it); `differs` = not the paper's, and why; `paper inconsistent` = the paper contradicts "
        "itself, and what we chose. Every `exact` and `option` row names the tests that check it "
        "(`tests/test_fidelity.py` fails when one is missing or does not exist). Sources: the paper's full text "
        "(Sections 2-4, Appendices A-D).",
        "",
        f"{len(rows)} details: " + ", ".join(f"{n} {k}" for k, n in counts.items()) + ".",
        "",
        "| paper detail | paper | where in the code | status | checked by |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        status = r.status if r.kind in NEEDS_TEST else f"**{r.kind}**:{r.status.split(':', 1)[1]}"
        if r.note:
            status = f"{status}; {r.note}"
        tests = "<br>".join(f"`{t.removeprefix('tests/')}`" for t in r.tests) or "-"
        lines.append(f"| {_cell(r.detail)} | {_cell(r.paper)} | {'<br>'.join(_code(c) for c in r.code)} | "
                     f"{_cell(status)} | {tests} |")
    lines += ["", "## What each exact row's test compares with", "",
              "The paper's text is transcribed once, by hand, in `tests/fixtures/paper/passages.yaml` (each passage "
              "with its section); a row whose wording rests on printed text names its passages, and its tests read "
              "them (`tests/test_fidelity.py` checks that the passages exist and that a named test reads each).", "",
              "| row | compares with | passages |", "|---|---|---|"]
    for r in rows:
        if r.kind == "exact":
            lines.append(f"| `{r.id}` | {_cell(r.compares)} | {', '.join(f'`{p}`' for p in r.passages) or '-'} |")
    lines += ["", "## What two of the paper's choices do to our numbers", "",
              "Measured on the CPU study's real days (small CPU models), written by `make docs` from bench/:", "",
              "```{include} _generated/fidelity_effects.md", "```"]
    return "\n".join(lines) + "\n"
