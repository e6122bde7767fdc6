"""One declared benchmark: the systems registry, the cells each notebook declares, specs that rebuild their cell,
and run files that are current or superseded."""

from __future__ import annotations

import dataclasses
import json
import tarfile

import pytest

from balms import experiments as ex
from balms.agents import registry
from balms.cellspec import CellSpec
from balms.experiments import runfiles
from balms.experiments.config import ExperimentConfig, load


@pytest.mark.parametrize("system", registry.PAPER_SYSTEMS)
def test_agent_defaults_are_the_configurations(system):
    """A bare make_agent and a configured run agree: every option the configuration sets has the config's default
    as the agent's own default."""
    spec = registry.get_system(system)
    defaults = {f.name: f.default for f in dataclasses.fields(spec.agent) if f.init}
    cfg = ExperimentConfig()
    assert spec.config_fields, system
    for opt, field in spec.config_fields.items():
        assert defaults[opt] == getattr(cfg, field), (system, opt, field)
    # token budgets included: a bare agent records what a configured cell of a non-reasoning model records
    assert registry.make_agent(system).options() == registry.build_agent(system, cfg).options()
    if spec.single_call and "cot" in {f.name for f in dataclasses.fields(spec.agent)}:
        assert registry.make_agent(system, cot=True).options() == registry.build_agent(system, cfg, cot=True).options()


def test_registry_names_systems_everywhere_from_one_list(capsys):
    from balms.cli import build_parser

    assert registry.system_names(paper_only=True) == ["healthllm", "rag", "raptor", "phia"]
    assert registry.get_system("Health-LLM").name == "healthllm" and registry.get_system("RAPTOR").name == "raptor"
    with pytest.raises(ValueError, match="unknown system 'gpt'.*healthllm"):
        registry.get_system("gpt")
    with pytest.raises(ValueError, match="unknown system"):
        ExperimentConfig(systems=["healthllm", "gpt"])
    run = build_parser()._subparsers._group_actions[0].choices["run"]
    choices = {a.dest: a.choices for a in run._actions if a.choices}
    assert choices["system"] == registry.system_names() and choices["dataset"] == ["diversityone", "pmdata", "globem"]
    assert ex.PAPER_SYSTEM_NAMES["raptor"] == "Raptor"


@dataclasses.dataclass
class _Echo:
    """A plugin-style agent (any dataclass with `cot` and `predict`)."""

    cot: bool = False
    seed: int = 0
    max_tokens: int = 8
    name: str = dataclasses.field(default="echo", init=False)

    def options(self):
        return {"seed": self.seed, "max_tokens": self.max_tokens}


def test_a_system_from_an_entry_point_is_registered_and_labelled_as_ours(monkeypatch):
    import importlib.metadata as md

    spec = registry.SystemSpec("echo", _Echo, "Echo", paper=False)

    class EP:
        name, value, group, dist = "echo", "tests.test_cells:spec", registry.ENTRY_POINT_GROUP, None

        def load(self):
            return spec

    class Broken(EP):
        name = "broken"

        def load(self):
            raise ImportError("no such module")

    monkeypatch.setattr(md, "entry_points", lambda group=None: [EP(), Broken()] if group == "balms.systems" else [])
    monkeypatch.setattr(registry, "_PLUGINS_LOADED", False)
    monkeypatch.setattr(registry, "_SYSTEMS", dict(registry._SYSTEMS))
    assert "echo" in registry.system_names() and "echo" not in registry.system_names(paper_only=True)
    assert ex.PAPER_SYSTEM_NAMES["echo"] == "Echo (ours)"
    assert ExperimentConfig(systems=["healthllm", "echo"]).systems == ["healthllm", "echo"]
    assert ExperimentConfig().systems == list(registry.PAPER_SYSTEMS)  # never in the paper's grid by default
    assert registry.build_agent("echo", ExperimentConfig(seed=4)).options() == {"seed": 4, "max_tokens": 16}
    with pytest.raises(ValueError, match="already registered"):
        registry.register_system(registry.SystemSpec("echo", _Echo, "Other"))


def test_cells_for_declares_each_notebooks_grid():
    cfg = ExperimentConfig(datasets=["pmdata"], backbones=["a", "b"], cot_systems=["healthllm"],
                           system_backbones={"phia": "p"})
    zs = ex.cells_for("01_prediction", cfg)
    assert [(c.system, c.model) for c in zs] == [("healthllm", "a"), ("rag", "a"), ("raptor", "a"), ("phia", "p"),
                                                 ("healthllm", "b"), ("rag", "b"), ("raptor", "b")]
    cot = ex.cells_for("02_cot", cfg)
    assert {(c.system, c.cot) for c in cot if c.cot} == {("healthllm", True)}  # CoT only for cot_systems
    assert {c.label_values["executor"] for c in ex.cells_for("05_phia_failures", cfg)} == {"faithful", "improved"}
    judged = ex.cells_for("07_rationale_quality", cfg.replace(judge_datasets=["pmdata"]))
    assert all(c.cot for c in judged) and len(judged) == len(set(judged))
    assert ex.cells_for("00_preprocessing", cfg) == []


def test_run_takes_a_notebook_its_part_several_notebooks_or_cells(monkeypatch):
    """`ex.run` is the one entry point: what it runs is a notebook's declared cells (or one part), several
    notebooks' cells, or the cells given; a name or part it does not know is refused before any cell is built."""
    from balms.experiments import grid

    cfg = ExperimentConfig(datasets=["pmdata"], backbones=["a"], cot_systems=["healthllm"])
    seen = []
    monkeypatch.setattr("balms.models.routing.check_models", lambda models, *a, **k: seen.append(models) or 1 / 0)
    for what, part, want in (("01_prediction", None, ex.cells_for("01_prediction", cfg)),
                             ("04_ablations", "prompt_style",
                              [c for c in ex.cells_for("04_ablations", cfg) if c.part == "prompt_style"]),
                             (["01_prediction", "02_cot"], None,
                              ex.cells_for("01_prediction", cfg) + ex.cells_for("02_cot", cfg)),
                             (ex.adhoc_cells(cfg), None, ex.adhoc_cells(cfg))):
        assert grid._declarations(cfg, what, part) == want
        with pytest.raises(ZeroDivisionError):  # the run reaches the model check with those cells' models
            ex.run(cfg, what, part)
        assert seen.pop() == list(dict.fromkeys(c.model for c in want))
    with pytest.raises(ValueError, match="unknown notebook"):
        ex.run(cfg, "99_nope")
    with pytest.raises(ValueError, match="declares no part 'nope'"):
        ex.run(cfg, "04_ablations", "nope")
    with pytest.raises(ValueError, match="`part` selects among a notebook's declared cells"):
        ex.run(cfg, ex.adhoc_cells(cfg), "prompt_style")
    assert seen == []


def test_ablation_cells_include_every_part(real_data):
    cfg = load("demo", raw_root=str(real_data))
    parts = {c.part for c in ex.cells_for("04_ablations", cfg)}
    assert parts == {"globem_channels", "pmdata_channels", "prompt_style"}
    sets = ex.channel_sets(cfg)
    assert sets["globem_wearable"] and set(sets["pmdata_sleep_hr"]) <= {"sleep_minutes", "sleep_minutes_paper",
                                                                        "resting_hr", "sleep_score"} | set(
        sets["pmdata_sleep_hr"])


@pytest.mark.parametrize("system", registry.PAPER_SYSTEMS)
def test_a_cell_is_rebuilt_from_its_spec_alone(real_data, system):
    cfg = load("demo", raw_root=str(real_data))
    cell = ex.make_cell(cfg, "pmdata", system, "qwen2.5-coder-0.5b", cot=system == "rag",
                        options={"executor": "improved"} if system == "phia" else None, key_only=True)
    spec = CellSpec.from_json(cell.spec.to_json())
    again = ex.Cell.from_spec(spec, cfg)
    assert again.spec.key() == cell.spec.key()
    assert [s.sample_id for s in again.samples] == [s.sample_id for s in cell.samples]
    assert again.agent.options() == cell.agent.options()


def test_a_spec_on_other_data_is_refused(real_data):
    from balms.data.schema import DataError

    cfg = load("demo", raw_root=str(real_data))
    spec = ex.make_cell(cfg, "pmdata", "healthllm", "qwen2.5-coder-0.5b", key_only=True).spec
    other = spec.model_copy(update={"data_fingerprint": "0" * 16})
    with pytest.raises(DataError, match="not the same data"):
        ex.Cell.from_spec(other, cfg)


# ------------------------------------------------------------------------------- current vs superseded ---
@pytest.fixture()
def scripted(tmp_path, monkeypatch):
    from tests.test_experiments import Scripted

    monkeypatch.setenv("BALMS_RAW_DIR", str(tmp_path / "no_raw"))  # -> synthetic cohorts
    monkeypatch.setenv("BALMS_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("BALMS_CACHE_DIR", str(tmp_path / "cache"))
    ex.cohorts._cohort.cache_clear()
    backend = Scripted()
    import balms.models.registry as reg
    import balms.models.routing as routing

    monkeypatch.setattr(reg, "get_backend", lambda name=None, **kw: backend)
    monkeypatch.setattr(routing, "check_models", lambda *a, **kw: {})
    cfg = ExperimentConfig(profile="t", datasets=["pmdata"], systems=["healthllm", "rag"], backbones=["scripted"],
                           n_samples=2, notebooks=["01_prediction"])
    yield cfg, tmp_path
    ex.cohorts._cohort.cache_clear()


def test_after_a_prompt_change_only_the_new_cells_are_current(scripted, monkeypatch):
    from balms.bundle import export_bundle
    from balms.report_html import build_report

    cfg, tmp = scripted
    old = ex.run(cfg, "01_prediction", progress=False)
    changed = cfg.replace(prompt_style="corrected")  # a prompt change: every cell gets a new key
    new = ex.run(changed, "01_prediction", progress=False)
    assert set(old.cell_key).isdisjoint(new.cell_key)
    st = runfiles.status(changed)
    assert {runfiles.key_of(p) for p in st.current} == set(new.cell_key)
    assert {runfiles.key_of(p) for p in st.superseded} == set(old.cell_key) and not st.missing
    # gc: a dry run lists the old run files with their manifests and removes nothing
    listed = runfiles.gc(changed)
    assert {p.name for p in listed} >= {p.name for p in st.superseded} and all(p.exists() for p in listed)
    assert any(p.name.endswith(".manifest.json") for p in listed)
    # the bundle and the report read only the current cells
    keys = set(runfiles.declared_keys(changed))
    monkeypatch.setattr("balms.bundle.responses_payload", lambda *a, **k: (b"", {"responses": 0}))
    export_bundle("t", tmp / "t.tar.gz", keys=keys)
    with tarfile.open(tmp / "t.tar.gz") as tar:
        runs = {runfiles.key_of(n) for n in tar.getnames() if n.startswith("runs/")}
    assert runs == set(new.cell_key)
    (tmp / "exe").mkdir()
    monkeypatch.setattr("balms.paths.PROJECT_ROOT", tmp)
    idx = build_report("t", tmp / "report", keys=keys)
    pages = {p.parent.name for p in (idx.parent / "runs").glob("*/0.html")}
    assert len(pages) == len(set(new.cell_key)) and all(k in " ".join(pages) for k in set(new.cell_key))
    # removal for real, and the status is then clean
    runfiles.gc(changed, dry_run=False)
    assert not any(p.exists() for p in listed) and not runfiles.status(changed).superseded


def test_runs_status_strict_fails_on_a_superseded_file(scripted, capsys):
    from balms.cli import main

    cfg, tmp = scripted
    ex.run(cfg, "01_prediction", progress=False)
    (cfg.runs_root() / "pmdata" / "healthllm__x__zs__L14__0123456789abcdef.jsonl").write_text("")
    prof = tmp / "profiles"
    prof.mkdir()
    (prof / "t.yaml").write_text(json.dumps({k: v for k, v in cfg.model_dump().items() if k != "profile"}))
    import balms.experiments.config as config

    config.PROFILES_DIR, saved = prof, config.PROFILES_DIR
    try:
        assert main(["runs", "status", "--profile", "t", "--strict"]) == 1
        assert "superseded: pmdata/healthllm__x__zs__L14__0123456789abcdef.jsonl" in capsys.readouterr().out
    finally:
        config.PROFILES_DIR = saved
