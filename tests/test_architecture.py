"""The package's imports follow the data flow and never form a cycle.

raw -> tables -> samples -> agents -> records -> metrics -> tables/figures: a module may import its own
layer or a lower one, never a higher one, so e.g. the judges rebuild an agent's window from the data
layer instead of importing agents. Imports are read statically (balms.codegraph: module level, inside
functions, and under `if TYPE_CHECKING:`), so a lazy import cannot hide a dependency.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path

import pytest

from balms.codegraph import Edge, imports_of, modules_of

# Layer of every module, lowest first. A key is a module or package name (it covers the package's modules)
# or an fnmatch pattern (with "*"); a pattern beats a name, and among several matching patterns the highest
# layer wins. `balms` (the package root) covers only itself.
LAYERS: dict[str, int] = {
    "balms": 0,
    "balms.paths": 0,
    "balms.records": 0,
    "balms.cellspec": 0,
    "balms.codegraph": 0,
    "balms.paper": 0,
    "balms.stores": 0,
    "balms.threads": 0,
    "balms.fidelity": 0,
    "balms.plugins": 0,
    "balms.data": 1,
    "balms.jsonl_store": 1,
    "balms.models": 2,
    "balms.sandbox": 3,
    "balms.agents": 4,
    "balms.runner": 5,
    "balms.runfile": 5,
    "balms.judges": 6,
    "balms.metrics": 6,
    "balms.scoring": 6,
    "balms.failures": 6,
    "balms.experiments": 7,
    "balms.experiments.config": 7,
    "balms.bundle": 7,
    "balms.report*": 7,
    "balms.figures_style": 7,
    # the command line (one module per command) may import anything
    "balms.cli": 8,
}
# Lower-layer imports that still go against the data flow: whatever consumes records (judges, metrics,
# failures) learns what an agent did from its PredictionRecord and rebuilds windows from balms.data, never
# from the agents, their sandbox or the runner.
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "balms.judges": ("balms.sandbox", "balms.agents", "balms.runner"),
    "balms.metrics": ("balms.sandbox", "balms.agents", "balms.runner"),
    "balms.failures": ("balms.sandbox", "balms.agents", "balms.runner"),
}
# modules outside balms.cli with a `__main__` block, and why it is not a command
MAIN_BLOCKS = {"balms.sandbox.worker": "the sandbox's child process, started by the executor, not by a user"}
ROOT = "balms"
PACKAGE_DIR = Path(__file__).resolve().parent.parent / ROOT


def layer_of(module: str) -> tuple[str, int] | None:
    """(matching key, layer) of a module, None when LAYERS does not place it."""
    patterns = [(k, v) for k, v in LAYERS.items() if "*" in k and fnmatch.fnmatchcase(module, k)]
    if patterns:
        return max(patterns, key=lambda kv: kv[1])
    names = [(k, v) for k, v in LAYERS.items() if "*" not in k and
             (module == k or (k != ROOT and module.startswith(k + ".")))]
    return max(names, key=lambda kv: len(kv[0])) if names else None


def all_edges(pkg_dir: Path = PACKAGE_DIR, root: str = ROOT) -> tuple[dict[str, Path], list[Edge]]:
    modules = modules_of(pkg_dir, root)
    return modules, [e for m, p in modules.items()
                     for e in imports_of(m, p, modules, p.relative_to(pkg_dir.parent).as_posix(), root)]


def _within(module: str, key: str) -> bool:
    return module == key or module.startswith(key + ".")


def layer_violations(edges: list[Edge]) -> list[str]:
    """Imports of a higher layer, and the FORBIDDEN lower ones, one line each."""
    out = []
    for e in edges:
        src, dst = layer_of(e.importer), layer_of(e.imported)
        if src and dst and dst[1] > src[1]:
            out.append(f"{e}  ({src[0]} is layer {src[1]}, {dst[0]} is layer {dst[1]})")
        for consumer, banned in FORBIDDEN.items():
            hit = next((b for b in banned if _within(e.imported, b)), None)
            if _within(e.importer, consumer) and hit:
                out.append(f"{e}  ({consumer} may not import {hit})")
    return out


def cycles(edges: list[Edge]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each as the edges inside it."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        graph.setdefault(e.importer, set()).add(e.imported)
        graph.setdefault(e.imported, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    comps: list[set[str]] = []

    def visit(v: str) -> None:  # recursion depth is bounded by the module count (~100)
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [sorted(str(e) for e in edges if e.importer in c and e.imported in c) for c in comps]


def command_line_code(modules: dict[str, Path]) -> list[str]:
    """Command-line code outside balms.cli: an argparse import, or a `__main__` block not in MAIN_BLOCKS."""
    import ast

    out = []
    for m, path in sorted(modules.items()):
        if _within(m, f"{ROOT}.cli"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if "argparse" in names:
                out.append(f"{m}:{node.lineno}: imports argparse")
            if (isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and m not in MAIN_BLOCKS
                    and "__main__" in ast.unparse(node.test)):
                out.append(f"{m}:{node.lineno}: a __main__ block")
    return out


# ------------------------------------------------------------------------------------------- tests
def test_every_module_has_a_layer():
    modules, _ = all_edges()
    assert len(modules) > 20, f"no package found at {PACKAGE_DIR}"
    missing = [m for m in modules if layer_of(m) is None]
    assert not missing, f"modules without a layer (add them to LAYERS in {__file__}): {missing}"


def test_imports_follow_the_data_flow():
    _, edges = all_edges()
    bad = layer_violations(edges)
    assert not bad, f"{len(bad)} import(s) against the data flow:\n" + "\n".join(bad)


def test_no_import_cycles():
    _, edges = all_edges()
    found = cycles(edges)
    assert not found, f"{len(found)} import cycle(s):\n" + "\n\n".join("\n".join(c) for c in found)


def test_the_command_line_lives_in_one_package():
    """`balms` and `python -m balms.cli` are the only command lines: each command is one module of balms.cli."""
    modules, _ = all_edges()
    assert MAIN_BLOCKS.keys() <= modules.keys(), "MAIN_BLOCKS names a module that no longer exists"
    found = command_line_code(modules)
    assert not found, "command-line code outside balms/cli (move it to a command module):\n" + "\n".join(found)


def test_the_checker_finds_planted_violations_and_cycles(tmp_path):
    """The checks above can fail: a planted upward (relative) import, a forbidden function-level import
    and the cycle they close."""
    pkg = tmp_path / ROOT
    files = {
        "__init__.py": "",
        "paths.py": "",
        "data/__init__.py": "",
        "data/render.py": "from balms.paths import x\n",
        "cli/__init__.py": "import argparse\n",  # the command line: may import anything, and argparse
        "cli/data.py": "from balms.experiments import run\n",
        "data/summary.py": "import argparse\nif __name__ == '__main__':\n    pass\n",  # a command outside
        "judges/__init__.py": "",
        "judges/grade.py": "def f():\n    from balms.agents.common import get_window\n",  # lower, but FORBIDDEN
        "agents/__init__.py": "",
        "agents/common.py": "from ..runner import go\n",  # agents (4) -> runner (5): upward
        "runner.py": "import balms.agents.common\n",  # closes a cycle with agents.common
        "experiments.py": "from balms.data import render\n",
    }
    for rel, text in files.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    modules, edges = all_edges(pkg)
    assert "balms.data.render" in {e.imported for e in edges if e.importer == "balms.experiments"}
    assert layer_of("balms.cli.data") == ("balms.cli", 8) and layer_of("balms.report_html") == ("balms.report*", 7)
    assert command_line_code(modules) == ["balms.data.summary:1: imports argparse",
                                          "balms.data.summary:2: a __main__ block"]
    assert layer_of("balms") == ("balms", 0) and layer_of("balms.unplaced") is None
    bad = layer_violations(edges)
    assert bad == [("balms/agents/common.py:1: balms.agents.common imports balms.runner  "
                    "(balms.agents is layer 4, balms.runner is layer 5)"),
                   ("balms/judges/grade.py:2: balms.judges.grade imports balms.agents.common  "
                    "(balms.judges may not import balms.agents)")]
    assert cycles(edges) == [["balms/agents/common.py:1: balms.agents.common imports balms.runner",
                              "balms/runner.py:1: balms.runner imports balms.agents.common"]]


if __name__ == "__main__":  # print the report without pytest's truncation
    _, es = all_edges()
    print("\n".join(layer_violations(es)) or "no layer violations")
    print("\n\n".join("\n".join(c) for c in cycles(es)) or "no cycles")
    pytest.main([__file__, "-q"])
