"""Append-only JSONL stores (run files, judge verdicts): read back line by line, and repaired on resume.

A process killed mid-write leaves a last line without its newline (or garbled); appending after it would glue the
next line onto the fragment and make both unreadable. So a writer that resumes a store first truncates such a tail
and says so (a `TornTailWarning` naming the file and the bytes dropped); a reader only skips it. A bad line
anywhere else is not a crash artefact: it is a clear error naming the file and the line.
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


def scan_jsonl(path: Path, parse: Callable[[bytes], T], what: str = "JSON line") -> tuple[list[T], int, bool]:
    """Parse every line of `path`: (items, byte length of the intact prefix, whether the tail is torn)."""
    data = Path(path).read_bytes()
    items: list[T] = []
    good_end = pos = line_no = 0
    while pos < len(data):
        nl = data.find(b"\n", pos)
        line_no += 1
        if nl == -1:  # no newline: the process died mid-write
            return items, good_end, True
        line = data[pos:nl]
        if line.strip():
            try:
                items.append(parse(line))
            except ValueError as exc:
                if not data[nl + 1:].strip():
                    return items, good_end, True  # a garbled final line: treat as torn
                raise DataError(path, f"not a valid {what}: {str(exc)[:300]}", row=line_no) from exc
        pos = nl + 1
        good_end = pos
    return items, good_end, False


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
