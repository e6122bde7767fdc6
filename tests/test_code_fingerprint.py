"""A cell's code fingerprint is the import closure of the code that builds its requests and reads its answers (the
agent, the records, its model's backend class), so no module can be missed: editing any module of a cell's closure
changes that cell's key, editing any other module (scheduling, transport, stores, reporting) does not."""

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
from balms.models.registry import BACKEND_CLASSES, backend_module, list_models
from balms.paths import PROJECT_ROOT

PKG = PROJECT_ROOT / "balms"
AGENTS = {s: get_system(s).agent for s in PAPER_SYSTEMS}
# one registry model per backend kind the registry serves with (llama.cpp in process, an OpenAI-compatible server,
# Anthropic): a cell's key covers its own backend's module, not the others'
_MODELS = list_models()
MODELS = {kind: _MODELS.index[_MODELS.backend == kind][0]
          for kind in BACKEND_CLASSES if (_MODELS.backend == kind).any()}
CELLS = [(s, m) for s in AGENTS for m in MODELS.values()]
LLAMA = "balms.models.llamacpp"


def closure_of(system: str, model: str, root: str | None = None) -> set[str]:
    return {m for m, _ in import_closure(cell_roots(AGENTS[system], backend_module(model)), root)}


CLOSURES = {c: closure_of(*c) for c in CELLS}
JUDGE_MODEL = "Llama-3.3-70B-Instruct"


def judge_closure() -> set[str]:
    return {m for m, _ in import_closure(cellspec.judge_roots(backend_module(JUDGE_MODEL)))}


JUDGE_CLOSURE = judge_closure()
ALL_MODULES = sorted(modules_of(PKG))


def _key(cell: tuple[str, str], root: str) -> str:
    """The key of one cell of (system, model) whose code is read from the package copy `root`."""
    system, model = cell
    return CellSpec(dataset="pmdata", system=system, model=model, model_id="m@1", cot=False, lookback=7,
                    options={"seed": 0}, sample_ids=("a",), data_fingerprint="d" * 16,
                    code_fingerprint=cell_code_fingerprint(AGENTS[system], backend_module(model), root)).key()


@pytest.fixture(scope="module")
def pkg_copy(tmp_path_factory):
    root = tmp_path_factory.mktemp("pkg") / "balms"
    shutil.copytree(PKG, root, ignore=shutil.ignore_patterns("__pycache__"))
    keys = {c: _key(c, str(root)) for c in CELLS} | {"judge": _judge_code(str(root))}
    assert keys == {c: _key(c, None) for c in CELLS} | {"judge": _judge_code(None)}  # a copy reads as the package
    return root, keys


def _judge_code(root: str | None) -> str:
    """The judge verdicts' code key (`llm_judge.verdict_key`'s "code") as read from the package copy `root`."""
    return cellspec.judge_code_fingerprint(backend_module(JUDGE_MODEL), root)


@pytest.mark.parametrize("module", ALL_MODULES)
def test_editing_a_module_changes_exactly_the_keys_of_the_cells_whose_closure_holds_it(pkg_copy, module):
    root, before = pkg_copy
    path = root / modules_of(PKG)[module].relative_to(PKG)
    original = path.read_bytes()
    path.write_bytes(original + b"\n_EDITED_FOR_THIS_TEST = 1\n")
    cellspec.closure_fingerprint.cache_clear()
    try:
        after = {c: _key(c, str(root)) for c in CELLS} | {"judge": _judge_code(str(root))}
    finally:
        path.write_bytes(original)
        cellspec.closure_fingerprint.cache_clear()
    for c in CELLS:
        if module in CLOSURES[c]:
            assert after[c] != before[c], f"{module} is in {c}'s closure but editing it left the key unchanged"
        else:
            assert after[c] == before[c], f"{module} is outside {c}'s closure but editing it changed the key"
    # a judge verdict is keyed the same way: re-judged exactly when a module of the judge's closure changed
    assert (after["judge"] != before["judge"]) == (module in JUDGE_CLOSURE), module


INSIDE = sorted(set().union(*CLOSURES.values()) - {"balms"})


@pytest.mark.parametrize("module", INSIDE)
def test_a_comment_or_docstring_edit_re_keys_nothing(pkg_copy, module):
    """Only code counts: a comment, a blank line or a reworded docstring (which no prompt reads) leaves every key as
    it was, so a documentation change never forces re-running or re-keying a study."""
    import ast

    root, before = pkg_copy
    path = root / modules_of(PKG)[module].relative_to(PKG)
    original = path.read_bytes()
    tree = ast.parse(original)
    text = original.decode()
    doc = ast.get_docstring(tree, clean=False)
    edited = text.replace(doc, doc + " (reworded)", 1) if doc else text
    path.write_text(edited + "\n\n# a comment added\n")
    cellspec.closure_fingerprint.cache_clear()
    try:
        after = {c: _key(c, str(root)) for c in CELLS} | {"judge": _judge_code(str(root))}
    finally:
        path.write_bytes(original)
        cellspec.closure_fingerprint.cache_clear()
    assert after == before, module


def test_the_judge_closure_holds_the_renderer_the_agents_prompts_use():
    assert {"balms.judges.rubric", "balms.judges.geval", "balms.data.agent_input", "balms.data.paper_notation",
            "balms.data.render"} <= JUDGE_CLOSURE
    assert not JUDGE_CLOSURE & {"balms.report", "balms.metrics", "balms.experiments.grid"}


def test_the_key_covers_what_a_model_sees_and_how_its_answer_is_read():
    """Inside every cell's key: its agent, the prompt renderer, the per-sample seeds, the answer parser, the record,
    and its own backend's module (what it adds to a request, how it reads a reply); PHIA's also the sandbox."""
    for (s, m), mods in CLOSURES.items():
        backend = BACKEND_CLASSES[_MODELS.loc[m, "backend"]].split(":")[0]
        assert {AGENTS[s].__module__, "balms.agents.parsing", "balms.models.seeds", "balms.data.render",
                "balms.records", backend} <= mods, (s, m)
        if backend != "balms.models.anthropic_api":  # (Anthropic's reads retry statuses from openai_http)
            assert not ({b.split(":")[0] for b in BACKEND_CLASSES.values()} - {backend}) & mods, (s, m)
    assert all("balms.data.paper_notation" in CLOSURES[c] for c in CELLS if c[0] in ("healthllm", "rag", "raptor"))
    assert all({"balms.sandbox.worker", "balms.sandbox.executor"} <= CLOSURES[c] for c in CELLS if c[0] == "phia")
    assert not any("balms.sandbox.worker" in CLOSURES[c] for c in CELLS if c[0] == "healthllm")
    for m in MODELS.values():  # RAG builds on Health-LLM, RAPTOR on RAG
        assert CLOSURES["healthllm", m] < CLOSURES["rag", m] < CLOSURES["raptor", m]


SCHEDULING = ("balms.runner", "balms.experiments.scheduler", "balms.models.slots", "balms.stores", "balms.threads",
              "balms.models.cache", "balms.models.retrying", "balms.experiments.budget", "balms.report",
              "balms.metrics", "balms.experiments.grid", "balms.data.pmdata", "balms.data.loading")


@pytest.mark.parametrize("module", [m for m in SCHEDULING if m in ALL_MODULES])
def test_scheduling_transport_stores_and_reporting_are_outside_every_key(module):
    """The issue's examples: a scheduling, transport, storage or reporting change re-keys no cell (the parametrised
    edit test above shows it for every module; this names the ones a contributor changes most)."""
    assert not any(module in mods for mods in CLOSURES.values()), module
    assert module not in JUDGE_CLOSURE, module


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
        unexcluded = set().union(*(closure_of(*c) for c in CELLS), judge_closure())
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
        roots = cell_roots(MyAgent, LLAMA)
        assert roots[:2] == ("myplugin.agent", "balms.agents.base")
        mods = {m for m, _ in import_closure(roots)}
        assert {"myplugin", "myplugin.agent", "myplugin.helpers", "balms.data.render", "balms.records"} <= mods
        before = cell_code_fingerprint(MyAgent, LLAMA)
        (pkg / "helpers.py").write_text("from balms.data import render\n\nX = 2\n")
        cellspec.closure_fingerprint.cache_clear()
        assert cell_code_fingerprint(MyAgent, LLAMA) != before
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
    fp = cell_code_fingerprint(ns["Mine"], LLAMA)
    assert fp != cell_code_fingerprint(HealthLLMAgent, LLAMA) and len(fp) == 16
    assert cell_roots(ns["Mine"], LLAMA)[:2] == ("__main__", "balms.agents.healthllm")
