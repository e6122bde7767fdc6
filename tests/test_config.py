"""Configuration: one pydantic model, profiles that only override, typos that fail loudly, and each notebook
receiving exactly its own parameters."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from balms.experiments import config
from balms.paths import PROJECT_ROOT

NOTEBOOKS = sorted((PROJECT_ROOT / "notebooks").glob("[0-9][0-9]_*.py"))


def test_misspelt_override_names_the_right_key():
    with pytest.raises(config.ConfigError, match=r"'n_sample' \(did you mean 'n_samples'\?\)"):
        config.load("demo", n_sample=20)


def test_misspelt_profile_key_names_the_file(tmp_path):
    bad = tmp_path / "mine.yaml"
    bad.write_text("backbone: [qwen2.5-coder-0.5b]\n")
    with pytest.raises(config.ConfigError, match=r"mine\.yaml.*'backbone' \(did you mean 'backbones'\?\)"):
        config.load(bad)


def test_bad_value_is_rejected_with_field_and_value():
    with pytest.raises(config.ConfigError, match=r"systems.*'gpt'"):
        config.load("demo", systems=["healthllm", "gpt"])
    with pytest.raises(config.ConfigError, match="cache_mode"):
        config.load("demo", cache_mode="sometimes")


@pytest.mark.parametrize("profile", ["demo", "smoke", "paper"])
def test_every_profile_loads_and_overrides_only_known_keys(profile):
    cfg = config.load(profile)
    assert cfg.profile == profile
    raw = config.profile_values(profile)
    for k, v in raw.items():
        assert getattr(cfg, k) == v


def test_defaults_live_in_one_place():
    """The demo profile is the defaults cut to size (which cells, how many samples, budgets), never another method
    (prompts, agents' options, the judge); the paper profile changes budgets and models, not the defaults."""
    demo = config.profile_values("demo")
    size_keys = {"datasets", "n_samples", "lookback", "cot_systems", "cot_max_tokens", "raptor_summary_tokens",
                 "horizon_datasets", "horizon_systems", "ablation_systems", "judge_datasets"}
    assert demo and set(demo) <= size_keys, set(demo) - size_keys
    assert config.load("demo") == config.ExperimentConfig(profile="demo", **demo)
    assert config.load("paper").backbones != config.ExperimentConfig().backbones


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_parameters_are_known_and_left_to_the_profile(nb):
    names = config.notebook_parameters(nb)
    assert names[0] == "profile"
    ns: dict = {}
    src = nb.read_text()
    cell = src.split('# %% tags=["parameters"]\n', 1)[1].split("\n# %%", 1)[0]
    exec(cell, ns)  # noqa: S102 - our own notebook's parameters cell
    assert all(ns[n] is None for n in names[1:]), f"{nb.name}: parameters must be None (the profile decides)"


def test_notebook_receives_only_its_own_parameters():
    nb = PROJECT_ROOT / "notebooks" / "00_preprocessing.py"
    vals = config.resolve_for_notebook("paper", nb, "-p seed 3")
    assert set(vals) == set(config.notebook_parameters(nb)) - {"settings"}  # no extra overrides: no settings
    assert vals["seed"] == 3 and vals["profile"] == "paper"
    assert "backbones" not in vals  # 00 does not declare it: papermill never sees it


def test_explicit_overrides_reach_a_notebook_that_does_not_declare_them():
    nb = PROJECT_ROOT / "notebooks" / "01_prediction.py"
    assert "servers" not in config.notebook_parameters(nb)
    cli = """-p servers '["http://127.0.0.1:9/v1"]' -p anthropic_batch true"""
    vals = config.resolve_for_notebook("paper", nb, cli + " -p seed 4")
    # undeclared keys travel in the one declared `settings` dict: papermill has no unknown parameter to warn about
    assert set(vals) - set(config.notebook_parameters(nb)) == set(), sorted(vals)
    assert vals["settings"] == {"servers": ["http://127.0.0.1:9/v1"], "anthropic_batch": True} and vals["seed"] == 4
    cfg = config.from_notebook(vals)  # what the notebook's first cell builds from papermill's injected values
    assert cfg.servers == ["http://127.0.0.1:9/v1"] and cfg.anthropic_batch and cfg.profile == "paper"
    assert cfg.seed == 4
    with pytest.raises(config.ConfigError, match="judge_mod"):  # a typo inside settings is named, not ignored
        config.from_notebook(vals | {"settings": {"judge_mod": "paper"}})


def test_every_notebook_declares_settings():
    """Without it, `make paper P="-p servers ..."` could not reach a notebook that does not declare `servers`."""
    for nb in NOTEBOOKS:
        assert "settings" in config.notebook_parameters(nb), nb.name


def test_cli_overrides_parse_like_papermill():
    got = config.parse_cli_overrides("""-p n_samples 20 -p backbones '["qwen2.5-coder-1.5b"]' -p judge_justify true""")
    assert got == {"n_samples": 20, "backbones": ["qwen2.5-coder-1.5b"], "judge_justify": True}
    with pytest.raises(config.ConfigError, match="pair"):
        config.parse_cli_overrides("-p n_samples")


def test_config_params_command_fails_on_a_typo_naming_the_key(tmp_path):
    nb = PROJECT_ROOT / "notebooks" / "01_prediction.py"
    run = subprocess.run([sys.executable, "-m", "balms.cli", "config", "params", "--profile", "demo",
                          "--notebook", str(nb), "--set", "-p n_sample 20", "--out", str(tmp_path / "p.yaml")],
                         capture_output=True, text=True, cwd=PROJECT_ROOT)
    assert run.returncode == 2 and "n_samples" in run.stderr and not (tmp_path / "p.yaml").exists()
    ok = subprocess.run([sys.executable, "-m", "balms.cli", "config", "params", "--profile", "demo",
                         "--notebook", str(nb), "--set", "-p n_samples 20", "--out", str(tmp_path / "p.yaml")],
                        capture_output=True, text=True, cwd=PROJECT_ROOT)
    assert ok.returncode == 0, ok.stderr
    assert yaml.safe_load((tmp_path / "p.yaml").read_text())["n_samples"] == 20


def test_make_paper_with_a_typo_fails_before_any_notebook(tmp_path):
    """The acceptance check: `make paper P="-p n_sample 20"` stops with a message naming n_samples."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    run = subprocess.run(["make", "paper", "PROFILE=smoke", "P=-p n_sample 20",
                          f"VENV={Path(sys.executable).parent.parent}"],
                         cwd=PROJECT_ROOT, capture_output=True, text=True, env=env | {"BALMS_RUNS_DIR": str(tmp_path)},
                         timeout=120)
    assert run.returncode != 0
    assert "did you mean 'n_samples'" in run.stderr + run.stdout


def test_paper_profile_keeps_the_paper_harness():
    """Our PHIA primers, the code-fence stop, the forced CoT answer and per-system backbones are demo options: the
    paper profile runs the plain prompts on every backbone."""
    cfg = config.load("paper")
    assert cfg.phia_primer == "none" and cfg.phia_fence_stop is False and cfg.cot_force_answer is False
    assert cfg.phia_force_answer is False and cfg.system_backbones == {}
    from balms.agents.registry import build_agent
    from balms.experiments.grid import agent_options
    for cot in (False, True):  # nothing of ours reaches the paper profile's agents (what their records carry)
        for system in config.SYSTEMS:
            opts = build_agent(system, cfg, cot=cot).options()
            assert not {"force_answer", "force_missing", "primer", "fence_stop"} & {
                k for k, v in opts.items() if v not in (False, "none")}, (system, cot, opts)
    demo = config.load("demo")
    assert agent_options(demo, "phia", False)["force_answer"] is True
    assert agent_options(demo, "rag", True)["force_missing"] is True
    assert all(cfg.models_for(s) == cfg.backbones for s in config.SYSTEMS)


def test_system_backbones_keys_must_be_systems():
    with pytest.raises(config.ConfigError, match=r"system_backbones.*unknown system"):
        config.load("demo", system_backbones={"phai": "qwen2.5-coder-1.5b"})
    with pytest.raises(config.ConfigError, match="phia_primer"):
        config.load("demo", phia_primer="fewshot")
