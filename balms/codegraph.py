"""The package's import graph, read statically from the source with `ast` (no module is imported).

Imports at module level, inside functions and under `if TYPE_CHECKING:` all count, so a lazy import cannot hide
a dependency. tests/test_architecture.py checks the graph's layers and cycles; `balms.cellspec` fingerprints the
import closure of the code that computes a cell's records. For the fingerprint, `references=True` also counts
code that is loaded by name rather than imported: a string literal naming a module ("balms.x.y", or an entry
point's "balms.x.y:func") or a sibling file run as a script ("worker.py", as the sandbox launches its worker in
a separate process).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = "balms"


@dataclass(frozen=True)
class Edge:
    importer: str
    imported: str
    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.importer} imports {self.imported}"


def modules_of(pkg_dir: Path, root: str = ROOT) -> dict[str, Path]:
    """Dotted module name -> source file, for every .py under the package (a single-file module: just it)."""
    pkg_dir = Path(pkg_dir)
    if pkg_dir.is_file():
        return {root: pkg_dir}
    out = {}
    for f in sorted(pkg_dir.rglob("*.py")):
        if "__pycache__" in f.parts:
            continue
        parts = list(f.relative_to(pkg_dir).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join([root, *parts])] = f
    return out


def _in(target: str, roots: tuple[str, ...]) -> bool:
    return any(target == r or target.startswith(r + ".") for r in roots)


def imports_of(name: str, path: Path, modules: dict[str, Path], rel: str, root: str | tuple[str, ...] = ROOT, *,
               references: bool = False) -> list[Edge]:
    """Every import of a package module in `path` (shown as `rel`), resolved to the module it loads; with
    `references`, also the modules its string literals name (see the module docstring)."""
    roots = (root,) if isinstance(root, str) else tuple(root)
    here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    by_file = {p: m for m, p in modules.items()} if references else {}
    edges = []

    def add(target: str, node: ast.AST) -> None:
        edge = Edge(name, target, rel, node.lineno)
        if _in(target, roots) and target != name and edge not in edges:
            edges.append(edge)

    for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
        if isinstance(node, ast.Import):
            for a in node.names:
                add(a.name, node)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(here[: len(here) - node.level + 1] + ([base] if base else []))
            for a in node.names:
                sub = f"{base}.{a.name}"
                add(sub if sub in modules else base, node)  # `from balms.data import render` loads render
        elif references and isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value.split(":", 1)[0] if node.value.count(":") == 1 else node.value
            if text in modules:
                add(text, node)
            elif text.endswith(".py") and "/" not in text and (path.parent / text) in by_file:
                add(by_file[path.parent / text], node)
    return edges


def parents(module: str) -> list[str]:
    """The packages Python runs (their __init__) before `module`: "a.b.c" -> ["a", "a.b"]."""
    parts = module.split(".")
    return [".".join(parts[:k]) for k in range(1, len(parts))]
