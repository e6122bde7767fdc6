"""A cell's code fingerprint is the import closure of the code that computes its records, so no module can be
missed: editing any module of a cell's closure changes that cell's key, editing any other module does not."""

from __future__ import annotations

import fnmatch
import shutil
import sys

import pytest

from balms import cellspec
from balms.agents.registry import PAPER_SYSTEMS, get_system
from balms.cellspec import NOT_CELL_CODE, CellSpec, cell_code_fingerprint, cell_roots, import_closure
from balms.codegraph import imports_of, modules_of
from balms.data.registry import dataset_names, get_dataset
from balms.paths import PROJECT_ROOT

PKG = PROJECT_ROOT / "balms"
AGENTS = {s: get_system(s).agent for s in PAPER_SYSTEMS}


def closure_of(system: str, root: str | None = None) -> set[str]:
    return {m for m, _ in import_closure(cell_roots(AGENTS[system]), root)}


CLOSURES = {s: closure_of(s) for s in AGENTS}
JUDGE_CLOSURE = {m for m, _ in import_closure(cellspec.JUDGE_ROOTS)}
ALL_MODULES = sorted(modules_of(PKG))


def _key(system: str, root: str) -> str:
    """The key of one cell of `system` whose code is read from the package copy `root`."""
    return CellSpec(dataset="pmdata", system=system, model="m", model_id="m@1", cot=False, lookback=7,
                    options={"seed": 0}, sample_ids=("a",), data_fingerprint="d" * 16,
                    code_fingerprint=cell_code_fingerprint(AGENTS[system], root)).key()


@pytest.fixture(scope="module")
def pkg_copy(tmp_path_factory):
    root = tmp_path_factory.mktemp("pkg") / "balms"
    shutil.copytree(PKG, root, ignore=shutil.ignore_patterns("__pycache__"))
    keys = {s: _key(s, str(root)) for s in AGENTS} | {"judge": _judge_code(str(root))}
    assert keys == {s: _key(s, None) for s in AGENTS} | {"judge": _judge_code(None)}  # a copy reads as the package
    return root, keys


def _judge_code(root: str | None) -> str:
    """The judge verdicts' code key (`llm_judge.verdict_key`'s "code") as read from the package copy `root`."""
    return cellspec.closure_fingerprint(cellspec.JUDGE_ROOTS, root)


@pytest.mark.parametrize("module", ALL_MODULES)
def test_editing_a_module_changes_exactly_the_keys_of_the_cells_whose_closure_holds_it(pkg_copy, module):
    root, before = pkg_copy
    path = root / modules_of(PKG)[module].relative_to(PKG)
    original = path.read_bytes()
    path.write_bytes(original + b"\n# edited\n")
    cellspec.closure_fingerprint.cache_clear()
    try:
        after = {s: _key(s, str(root)) for s in AGENTS} | {"judge": _judge_code(str(root))}
    finally:
        path.write_bytes(original)
        cellspec.closure_fingerprint.cache_clear()
    for s in AGENTS:
        if module in CLOSURES[s]:
            assert after[s] != before[s], f"{module} is in {s}'s closure but editing it left the key unchanged"
        else:
            assert after[s] == before[s], f"{module} is outside {s}'s closure but editing it changed the key"
    # a judge verdict is keyed the same way: re-judged exactly when a module of the judge's closure changed
    assert (after["judge"] != before["judge"]) == (module in JUDGE_CLOSURE), module


def test_the_judge_closure_holds_the_renderer_the_agents_prompts_use():
    assert {"balms.judges.rubric", "balms.judges.geval", "balms.data.agent_input", "balms.data.paper_notation",
            "balms.data.render"} <= JUDGE_CLOSURE
    assert not JUDGE_CLOSURE & {"balms.report", "balms.metrics", "balms.experiments.grid"}


def test_the_closure_holds_what_the_hand_written_list_missed_and_leaves_out_what_runs_no_cell():
    for s, mods in CLOSURES.items():
        # llama.cpp's default system message, the per-sample seeds, the runner
        assert {"balms.models.llamacpp", "balms.models.seeds", "balms.runner",
                "balms.records", "balms.models.cache", "balms.data.render", f"{AGENTS[s].__module__}"} <= mods, s
        # downstream of records, or loaders (their tables are hashed by the data fingerprint)
        assert not mods & {"balms.report", "balms.metrics", "balms.experiments.grid", "balms.judges.llm_judge",
                           "balms.data.pmdata", "balms.data.loading", "balms.agents.registry"}, s
    assert all("balms.data.paper_notation" in CLOSURES[s] for s in ("healthllm", "rag", "raptor"))  # paper prompts
    assert "balms.sandbox.worker" in CLOSURES["phia"] and "balms.sandbox.executor" in CLOSURES["phia"]
    assert "balms.sandbox.worker" not in CLOSURES["healthllm"]  # per cell: the prompt systems run no sandbox
    assert CLOSURES["healthllm"] < CLOSURES["rag"] < CLOSURES["raptor"]  # RAG builds on Health-LLM, RAPTOR on RAG


def test_the_sandbox_worker_is_found_from_how_it_is_launched_not_from_an_import():
    """The executor starts worker.py as a script in a child process (`Path(__file__).with_name("worker.py")`):
    no import names it, the string literal does."""
    mods = modules_of(PKG)
    ex = "balms.sandbox.executor"
    assert "balms.sandbox.worker" not in {e.imported for e in imports_of(ex, mods[ex], mods, ex)}
    assert "balms.sandbox.worker" in {e.imported for e in imports_of(ex, mods[ex], mods, ex, references=True)}


def test_every_exclusion_is_reached_by_the_walk_and_covers_every_loader(monkeypatch):
    """NOT_CELL_CODE is not a stale list: without it, the walk reaches a module of every pattern; and every
    dataset's loader module is among the excluded."""
    for d in dataset_names():
        mod = get_dataset(d).loader.split(":")[0]
        assert cellspec.excluded(mod), f"{d}'s loader {mod} is not excluded from the cell code"
    monkeypatch.setattr(cellspec, "NOT_CELL_CODE", {})
    cellspec.import_closure.cache_clear()
    try:
        unexcluded = set().union(*(closure_of(s) for s in AGENTS))
    finally:
        monkeypatch.undo()
        cellspec.import_closure.cache_clear()
    for pattern in NOT_CELL_CODE:
        assert any(fnmatch.fnmatchcase(m, pattern) for m in unexcluded), f"{pattern} is never reached: drop it"


def test_a_plugin_agent_fingerprints_its_own_package_too(tmp_path, monkeypatch):
    """A system from another package: its modules are tracked besides balms's."""
    pkg = tmp_path / "myplugin"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "helpers.py").write_text("from balms.data import render\n\nX = 1\n")
    (pkg / "agent.py").write_text("from balms.agents.base import Agent\nfrom myplugin import helpers\n\n\n"
                                  "class MyAgent(Agent):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("myplugin", None)
    from myplugin.agent import MyAgent

    try:
        roots = cell_roots(MyAgent)
        assert roots[:2] == ("myplugin.agent", "balms.agents.base")
        mods = {m for m, _ in import_closure(roots)}
        assert {"myplugin", "myplugin.agent", "myplugin.helpers", "balms.data.render", "balms.runner"} <= mods
        before = cell_code_fingerprint(MyAgent)
        (pkg / "helpers.py").write_text("from balms.data import render\n\nX = 2\n")
        cellspec.closure_fingerprint.cache_clear()
        assert cell_code_fingerprint(MyAgent) != before
    finally:
        for m in [m for m in sys.modules if m == "myplugin" or m.startswith("myplugin.")]:
            del sys.modules[m]
        cellspec.closure_fingerprint.cache_clear()
        cellspec.import_closure.cache_clear()


def test_an_agent_without_a_source_file_is_fingerprinted_by_its_class_source():
    """An agent class from a notebook kernel (`__main__`, no file to walk) gets a key, not an error: its class
    source (here, exec'd, none: its name) beside the closure of the balms code it builds on."""
    from balms.agents.healthllm import HealthLLMAgent

    ns: dict = {"__name__": "__main__", "HealthLLMAgent": HealthLLMAgent}
    exec("class Mine(HealthLLMAgent):\n    pass\n", ns)
    fp = cell_code_fingerprint(ns["Mine"])
    assert fp != cell_code_fingerprint(HealthLLMAgent) and len(fp) == 16
    assert cell_roots(ns["Mine"])[:2] == ("__main__", "balms.agents.healthllm")
