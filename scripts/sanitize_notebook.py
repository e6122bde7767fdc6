"""Strip the absolute paths of the machine that ran a notebook from its executed copy (`make paper` runs this on
every notebook papermill writes): the checkout becomes `.`, the home folder `~`, so a committed notebook names no
machine's folders (tests/test_book.py checks every committed one).

    python scripts/sanitize_notebook.py NOTEBOOK.ipynb [...]
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def machine_paths(root: Path = ROOT) -> list[tuple[str, str]]:
    """(absolute prefix, replacement), longest first: the checkout (as given and resolved), then the home folder."""
    home = os.path.expanduser("~")
    pairs = {str(root): ".", str(root.resolve()): "."}
    if home not in ("", "/"):
        pairs[home] = "~"
    return sorted(pairs.items(), key=lambda kv: -len(kv[0]))


def sanitize(value, pairs):
    """`value` (a notebook's JSON) with every string's machine paths replaced."""
    if isinstance(value, str):
        for prefix, repl in pairs:
            value = value.replace(prefix, repl)
        return value
    if isinstance(value, list):
        return [sanitize(v, pairs) for v in value]
    if isinstance(value, dict):  # images are base64, never a path
        return {k: v if k.startswith("image/") else sanitize(v, pairs) for k, v in value.items()}
    return value


def sanitize_file(path: Path, root: Path = ROOT) -> bool:
    """Rewrite `path` in place when it names a machine path; returns whether it did."""
    text = path.read_text(encoding="utf-8")
    nb = json.loads(text)
    clean = sanitize(nb, machine_paths(root))
    if clean == nb:
        return False
    path.write_text(json.dumps(clean, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return True


if __name__ == "__main__":
    changed = [p for p in sys.argv[1:] if sanitize_file(Path(p))]
    if changed:
        print(f"sanitized machine paths in {len(changed)} notebook(s)")
