"""Append-only JSONL stores (run files, judge verdicts): read back line by line, and repaired on resume.

Every line is written whole with its newline in one write, so a process killed mid-write leaves exactly one kind of
damage: a last line without its newline. Appending after it would glue the next line onto the fragment, so a writer
that resumes a store first truncates that tail and says so (a `TornTailWarning` naming the file and the bytes
dropped); a reader only skips it. Any other bad line (a garbled line anywhere, or a complete line that fails
validation, even the last) is not a crash artefact but damage: an error naming the file, the line and the field.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from balms.data.schema import DataError

T = TypeVar("T")


class TornTailWarning(UserWarning):
    """A store's torn last line was truncated before appending to it."""


def _problem(exc: ValueError) -> tuple[str | None, str]:
    """(field, what is wrong) of a parse failure: pydantic names the field, json only the position."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        first = errors()[0]
        loc = ".".join(map(str, first.get("loc", ()))) or None
        more = f" (and {len(errors()) - 1} more)" if len(errors()) > 1 else ""
        return loc, f"{first.get('msg')}{more}"
    return None, str(exc)[:300]


def scan_jsonl(path: Path, parse: Callable[[bytes], T], what: str = "JSON line") -> tuple[list[T], int, bool]:
    """Parse every line of `path`: (items, byte length of the intact prefix, whether the last line is torn).
    Only an unterminated last line is torn; any other line that does not parse is a DataError naming it."""
    data = Path(path).read_bytes()
    items: list[T] = []
    pos = line_no = 0
    while pos < len(data):
        nl = data.find(b"\n", pos)
        line_no += 1
        if nl == -1:  # no newline: the process died mid-write
            return items, pos, True
        line = data[pos:nl]
        if line.strip():
            try:
                items.append(parse(line))
            except ValueError as exc:
                field, problem = _problem(exc)
                raise DataError(path, f"not a valid {what}: {problem}. Not a torn write (the line is complete): "
                                f"the file is damaged; restore it, or remove the line to re-run its sample",
                                row=line_no, field=field) from exc
        pos = nl + 1
    return items, pos, False


def recover_jsonl(path: Path, parse: Callable[[bytes], T], what: str = "JSON line") -> list[T]:
    """The items of a store about to be appended to; a torn tail is truncated in place and reported."""
    path = Path(path)
    if not path.exists():
        return []
    items, good_end, torn = scan_jsonl(path, parse, what)
    if torn:
        size = path.stat().st_size
        with open(path, "r+b") as fh:
            fh.truncate(good_end)
            fh.flush()
            os.fsync(fh.fileno())
        warnings.warn(f"{path}: torn last line ({size - good_end} bytes, a write cut short) truncated; "
                      f"{len(items)} complete line(s) kept", TornTailWarning, stacklevel=2)
    return items


def rewrite_jsonl(path: Path, lines: list[str]) -> None:
    """Replace a store's content atomically (a kill leaves the old file or the new one, never half of one)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        for line in lines:
            fh.write(line + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
