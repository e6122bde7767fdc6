"""A new dataset in one place: examples/balms-tiny-cohort adds a dataset through the `balms.datasets` entry point,
with no edit to `balms/`; everything that needs a per-dataset fact (loader, synthetic writer, prompt phrasing, judge
text, scale, configuration) reads it from its `DatasetSpec`. Installed, it appears in the plan, notebook 00's
tables, notebook 01's Table 3 and a bundle."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pandas as pd
import pytest

from balms.data import registry

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "balms-tiny-cohort"


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    assert p.returncode == 0, (f"{' '.join(map(str, cmd))} failed ({p.returncode}):\n{p.stdout[-3000:]}\n"
                               f"{p.stderr[-4000:]}")
    return p


@pytest.fixture
def tiny(monkeypatch, tmp_path):
    """The example's spec registered in this process (as its entry point would), a private synthetic folder."""
    monkeypatch.syspath_prepend(str(EXAMPLE / "src"))
    sys.modules.pop("balms_tiny_cohort", None)
    import balms_tiny_cohort

    from balms.data import synthetic

    monkeypatch.setattr(synthetic, "synthetic_dir", lambda: tmp_path / "synthetic")
    monkeypatch.setenv("BALMS_RAW_DIR", str(tmp_path / "raw"))  # absent: the synthetic cohort
    monkeypatch.setenv("BALMS_TABLES_CACHE", "0")
    registry.load_plugins()  # (an egg-info left in src/ by a build would register it too: replaced below)
    saved = dict(registry._DATASETS)
    registry.register_dataset(balms_tiny_cohort.DATASET, replace=True)
    yield balms_tiny_cohort
    registry._DATASETS.clear()
    registry._DATASETS.update(saved)
    sys.modules.pop("balms_tiny_cohort", None)


def test_a_registered_dataset_is_loaded_sampled_prompted_and_configured_from_its_spec_alone(tiny):
    from balms.agents.registry import make_agent
    from balms.data.loading import load_dataset
    from balms.data.samples import build_samples
    from balms.data.synthetic import planted_relation
    from balms.experiments.config import ExperimentConfig

    tables = load_dataset("tinycohort")
    assert tables.source == "synthetic" and tables.users  # written by the example's writer, read by its reader
    assert planted_relation("tinycohort") == tiny.PLANTED
    samples = build_samples(tables).samples
    assert samples and {s.lookback for s in samples} == {tiny.DATASET.default_lookback}
    text = make_agent("healthllm", cot=False).first_prompt(samples[0], tables)[-1].content
    assert "predict Stress which ranges from 1 to 5" in text and "[Sleep minutes]:" in text
    assert ExperimentConfig(datasets=["tinycohort"]).datasets == ["tinycohort"]
    with pytest.raises(ValueError, match="unknown dataset"):
        ExperimentConfig(datasets=["tinycohorts"])


def test_the_judge_reads_the_label_text_from_the_spec(tiny):
    """A record whose window is given as text: the verdict's target and scale come from the dataset's spec."""
    from balms.judges.llm_judge import judge_record
    from balms.models.base import BackendError
    from balms.records import PredictionRecord

    class Down:
        model_id = name = "judge"

        def generate(self, messages, params):
            raise BackendError("down")

    rec = PredictionRecord(sample_id="tinycohort/t01/2024-03-10/L7", dataset="tinycohort", system="healthllm",
                           model="m", model_id="m", rationale="Short sleep, so stress is high.", prediction=4)
    res = judge_record(rec, {rec.sample_id: "[Steps]: [1, 2]"}, Down())
    assert res.meta["target"] == tiny.DATASET.judge_target and res.meta["scale"] == [1, 5]


def test_a_bad_spec_is_refused_with_what_is_wrong():
    spec = registry.get_dataset("pmdata")
    with pytest.raises(ValueError, match="already registered"):
        registry.register_dataset(dataclasses.replace(spec, display_name="other"))
    with pytest.raises(ValueError, match="scale"):
        registry.register_dataset(dataclasses.replace(spec, name="x1", scale=(5, 1)))
    with pytest.raises(ValueError, match="synthetic_stream 0 is 'pmdata'"):
        registry.register_dataset(dataclasses.replace(spec, name="x2"))
    with pytest.raises(ValueError, match="default_lookback"):
        registry.register_dataset(dataclasses.replace(spec, name="x3", default_lookback=0, synthetic_stream=9))


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_installed_dataset_appears_in_plan_notebooks_00_and_01_and_a_bundle(tmp_path):
    site = tmp_path / "site"
    _run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", site,
          EXAMPLE])
    runs, out = tmp_path / "runs", tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]), "BALMS_RUNS_DIR": str(runs),
           "BALMS_OUTPUT_DIR": str(out), "BALMS_RAW_DIR": str(tmp_path / "raw"),
           "BALMS_TABLES_CACHE": "0"}
    sets = "-p systems [healthllm] -p datasets [tinycohort]"
    balms = [sys.executable, "-m", "balms.cli"]
    plan = json.loads(_run([*balms, "plan", "--profile", "smoke", "--set", sets, "--json"], env=env, cwd=tmp_path)
                      .stdout)
    planned = {c["key"] for c in plan["cells"] if c["dataset"] == "tinycohort"}
    assert planned
    for nb in ("00_preprocessing", "01_prediction"):
        _run([sys.executable, "-m", "papermill", "-k", "balms", "--cwd", ROOT / "notebooks", "--no-progress-bar",
              "-p", "profile", "smoke", "-y", "systems: [healthllm]\ndatasets: [tinycohort]",
              ROOT / "notebooks" / f"{nb}.ipynb", tmp_path / f"{nb}.ipynb"], env=env, cwd=tmp_path)
    t5 = pd.read_csv(out / "smoke" / "tables" / "table5_eval_sets.csv")
    assert "TinyCohort (example)" in set(t5["dataset"])  # its display name, from its spec
    t3 = pd.read_csv(out / "smoke" / "tables" / "table3_zero_shot.csv")
    assert t3.astype(str).apply(lambda c: c.str.contains("TinyCohort|tinycohort")).any().any()
    ran = {p.name.removesuffix(".jsonl").rsplit("__", 1)[-1] for p in (runs / "smoke" / "tinycohort").glob("*.jsonl")}
    assert ran and ran <= planned
    # the bundle of what ran (notebook 01; the profile's other notebooks were not run: export would refuse)
    _run([*balms, "bundle", "export", "--profile", "smoke", "--set", sets + " -p notebooks [01_prediction]", "--out",
          tmp_path / "b.tar.gz"], env=env, cwd=tmp_path)
    with tarfile.open(tmp_path / "b.tar.gz") as tar:
        assert any("tinycohort/" in n and n.endswith(".jsonl") for n in tar.getnames())
