"""Inputs refused before they cost anything (issue 37): every parameter is checked where it is declared, ranges
included, and a bad value stops `balms run` before any backend exists, with a message naming the parameter."""

from __future__ import annotations

import pytest

from balms import cli
from balms.experiments import cohorts, config

# the cases and their kin: (parameter, a value out of its range)
INVALID = [
    ("lookbacks", [0, -3]), ("lookbacks", []), ("lookback", 0), ("max_usd", -5), ("max_usd", 0),
    ("max_gpu_hours", -1.0), ("phia_max_iters", 0), ("n_samples", -1), ("n_samples_by", {"pmdata": -1}),
    ("size_n_samples", {"pmdata": 0}), ("retrieval_top_k", 0), ("concurrency", 0), ("server_slots", 0),
    ("server_slot_limits", {"http://127.0.0.1:1": 0}), ("zs_max_tokens", 0), ("judge_max_tokens", -1),
    ("seed", -1),
]


@pytest.mark.parametrize(("name", "value"), INVALID, ids=[f"{n}={v}" for n, v in INVALID])
def test_each_invalid_parameter_is_refused_naming_it(name, value):
    with pytest.raises(config.ConfigError, match=rf"\b{name}\b"):
        config.load("demo", **{name: value})


def _numeric_fields() -> list[str]:
    """Every numeric parameter, from the model's own schema (a new one is checked without editing this test)."""
    out = []
    for name, prop in config.ExperimentConfig.model_json_schema()["properties"].items():
        kinds = {prop.get("type")} | {a.get("type") for a in prop.get("anyOf", [])}
        if kinds & {"integer", "number"}:
            out.append(name)
    return out


@pytest.mark.parametrize("name", _numeric_fields())
def test_every_numeric_parameter_has_a_lower_bound(name):
    """-1 is out of range for every count, budget, cap and seed the configuration takes."""
    with pytest.raises(config.ConfigError, match=rf"\b{name}\b"):
        config.load("demo", **{name: -1})


@pytest.fixture()
def no_backend(monkeypatch, tmp_path):
    """Any backend built fails the test: the refusal must come before one exists."""
    import balms.models.registry as reg

    def boom(*a, **kw):
        raise AssertionError("a backend was built before the parameters were checked")

    monkeypatch.setattr(reg, "get_backend", boom)
    monkeypatch.setenv("BALMS_RUNS_DIR", str(tmp_path / "runs"))


@pytest.mark.parametrize(("name", "value"), [("max_usd", "-5"), ("phia_max_iters", "0"), ("lookbacks", "[0,-3]")])
def test_balms_run_notebooks_refuses_before_any_backend(no_backend, name, value):
    with pytest.raises(SystemExit, match=rf"\b{name}\b"):
        cli.main(["run", "--notebooks", "01_prediction", "--config", "smoke", "--set", f"-p {name} {value}"])


@pytest.mark.parametrize(("flag", "value"), [("--lookback", "0"), ("--max-iters", "0"), ("--n", "-1"),
                                             ("--concurrency", "0")])
def test_balms_run_flags_refused_before_any_backend(no_backend, capsys, flag, value):
    with pytest.raises(SystemExit) as exc:
        cli.main(["run", "--dataset", "pmdata", "--system", "healthllm", "--model", "qwen2.5-coder-0.5b",
                  flag, value])
    assert exc.value.code == 2 and f"{flag}: must be >= " in capsys.readouterr().err


def test_with_lookback_refuses_a_window_of_no_days():
    from balms.experiments.cohorts import with_lookback

    with pytest.raises(ValueError, match="look-back 0: expected >= 1"):
        with_lookback(object(), 0)


def test_more_samples_than_eligible_are_clamped_with_a_message(tmp_path, monkeypatch):
    monkeypatch.setenv("BALMS_RAW_DIR", str(tmp_path / "no_raw"))  # the synthetic PMData cohort
    cohorts._cohort.cache_clear()
    try:
        co = cohorts.cohort("pmdata", config.ExperimentConfig(datasets=["pmdata"]))
        n = len(co.test)
        with pytest.warns(cohorts.SampleCountWarning, match=rf"pmdata: 100000 evaluation samples asked for, {n} "
                                                            rf"eligible .*: all {n} used"):
            got = co.eval_samples(100000, 0)
        assert len(got) == n
    finally:
        cohorts._cohort.cache_clear()


def test_make_notebook_validates_before_it_deletes_the_executed_notebook(tmp_path):
    """A bad P (or notebook name) stops `make notebook` with the parameter named; the executed notebook is kept."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from balms import paths

    executed = tmp_path / "01_prediction.ipynb"
    executed.write_text("{}")
    venv = Path(sys.executable).parent.parent
    for nb, p, said in [("01_prediction", "-p phia_max_iters 0", "phia_max_iters"),
                        ("01_nope", "", "no notebook '01_nope'; the notebooks are")]:
        proc = subprocess.run(["make", "--no-print-directory", "notebook", f"NB={nb}", f"VENV={venv}",
                               f"EXEC_DIR={tmp_path}", f"P={p}"], cwd=paths.PROJECT_ROOT, capture_output=True,
                              text=True, timeout=120, env=os.environ | {"PYTHONPATH": str(paths.PROJECT_ROOT)})
        assert proc.returncode != 0 and said in proc.stdout + proc.stderr, proc.stdout + proc.stderr
        assert executed.read_text() == "{}"
