"""The sensor test of notebook 08 (issue 39) end to end on a scripted backend and the synthetic PMData cohort: its
cells are declared, run, keyed apart from the real ones, known to the bundle; the claims rows are computed from the
records (placebo with the 'uses the sensors' verdict, mood only, no mood, the neutral example), and say "not run"
while the test is off. The committed cpu-study profile declares them on both backbones, and its bundle holds every
one (its replay makes zero calls)."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from agent_fakes import HashEmbedder
from balms import experiments as ex
from balms import paths
from balms.experiments import runfiles, study
from balms.models.base import Completion

STUDY_BUNDLE = paths.PROJECT_ROOT / "results" / "cpu-study" / "cpu-study.bundle.tar.gz"
VARIANTS = {"healthllm": 5, "rag": 5, "personal_baseline": 3}  # no mood line to drop and no "Answer: 1" in ours


class SensorReader:
    """Answers from the prompt's first number after '[Steps]' (or 'deviations [', ours): a model that reads the
    sensors; 3 when there is no sensor line."""

    model_id = "scripted:sensor"
    name = "scripted"

    def __init__(self):
        self.prompts = []

    def generate(self, messages, params):
        text = messages[-1].content
        self.prompts.append(text)
        m = re.search(r"(?:\[Steps\]: \[|deviations \[)([-+]?\d+)", text)
        value = 3 if m is None else 1 + abs(int(m.group(1))) % 5
        return Completion(text=f"Answer: {value}", model_id=self.model_id, prompt_tokens=10, completion_tokens=2,
                          latency_s=0.0)


@pytest.fixture()
def env(tmp_path, monkeypatch):
    import balms.models.registry as reg
    import balms.models.routing as routing
    from balms.agents import embeddings

    monkeypatch.setenv("BALMS_RAW_DIR", str(tmp_path / "no_raw"))  # -> synthetic cohorts
    monkeypatch.setenv("BALMS_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("BALMS_OUTPUT_DIR", str(tmp_path / "out"))
    monkeypatch.setenv("BALMS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(embeddings, "load_embedder", lambda name=embeddings.DEFAULT_EMBEDDER: HashEmbedder())
    ex.cohorts._cohort.cache_clear()
    backend = SensorReader()
    monkeypatch.setattr(reg, "get_backend", lambda name=None, **kw: backend)
    monkeypatch.setattr(routing, "check_models", lambda *a, **kw: {})
    cfg = ex.ExperimentConfig(profile="t", datasets=["pmdata"], systems=list(VARIANTS), backbones=["scripted"],
                              n_samples=6, seed=0, notebooks=["01_prediction", "08_cpu_study"],
                              sensor_test_datasets=["pmdata"])
    yield cfg, backend
    ex.cohorts._cohort.cache_clear()


def test_sensor_cells_run_and_fill_the_claims_rows(env):
    cfg, backend = env
    zs = ex.run(cfg, "01_prediction", progress=False)
    sensor = study.declared_part(cfg, "08_cpu_study", "sensor_test", progress=False)
    cells = sensor.drop_duplicates("cell_key")
    assert cells.groupby("system").size().to_dict() == VARIANTS
    assert set(cells.cell_key).isdisjoint(zs.cell_key)  # a variant is a cell of its own (its options in the key)
    keys = set(runfiles.declared_keys(cfg))  # what the bundle and the report carry
    assert set(sensor.cell_key) <= keys and set(zs.cell_key) <= keys
    # same days as the real cells, the option recorded in every record
    for (s, v), g in sensor.groupby(["system", "variant"]):
        assert set(g.sample_id) == set(zs[zs.system == s].sample_id), (s, v)
        opts = g["options"].iloc[0]
        from balms.experiments.cells import SENSOR_VARIANTS

        assert {k: opts[k] for k in SENSOR_VARIANTS[v]} == SENSOR_VARIANTS[v], (s, v)
        donors = [o.get("placebo_donor") for o in g["options"]]
        assert all(donors) == v.startswith("placebo"), (s, v)  # each placebo record names its donor window
        if v == "placebo_other_user":
            assert all(d["user"] != u for d, u in zip(donors, g["user"], strict=True))
    assert any("Answer: <integer>" in p for p in backend.prompts)
    rows = pd.DataFrame(study.sensor_rows(cfg, zs, pd.DataFrame(), sensor))
    assert len(rows) == sum(VARIANTS.values()) and study.NOT_RUN not in set(rows.verdict)
    assert (rows.n == 6).all()
    # the mood-only cells saw no sensor line: this model answered 3 on every day
    mo = sensor[sensor.variant == "mood_only"]
    assert (mo.prediction == 3).all()
    # differences are the records' MAE differences
    hl = zs[zs.system == "healthllm"].set_index("sample_id")
    r = rows[(rows.system == "healthllm") & (rows.claim == "mood_only")].iloc[0]
    mo_hl = mo[mo.system == "healthllm"].set_index("sample_id").loc[hl.index]
    want = (hl.prediction - hl.label).abs().mean() - (mo_hl.prediction - mo_hl.label).abs().mean()
    assert r["diff"] == pytest.approx(want)
    table = study.claims_table(cfg, zs, pd.DataFrame(columns=zs.columns), pd.DataFrame(columns=zs.columns),
                               pd.DataFrame(columns=[*zs.columns, "executor"]), sensor=sensor)
    assert set(study.SENSOR_CLAIMS) <= set(table.claim) and "best_constant" in set(table.claim)
    assert study.sensor_sentence(table).startswith("Uses the sensors")
    answers = study.answer_shares(sensor, n_boot=50)
    assert {"variant", "qwk", "class_averaged_mae", "within_person_spearman", "collapse"} <= set(answers.columns)
    # notebook 01's cells table: the per-cell summary with the collapse metrics beside, one row per cell
    from balms import metrics

    summary = ex.summarize(zs, cfg=cfg, n_boot=50)
    keys = [k for k in ex.CELL_KEYS if k in summary.columns]
    merged = summary.merge(metrics.collapse_table(zs, keys, n_boot=50), on=keys, how="left")
    assert len(merged) == len(summary) and merged[["qwk", "class_averaged_mae", "collapse"]].notna().all().all()


def _recs(preds, labels, users, **kw):
    return pd.DataFrame({"sample_id": [f"s{i}" for i in range(len(preds))], "user": users, "label": labels,
                         "prediction": preds, "dataset": "pmdata", "system": "healthllm", "model": "m", **kw})


def test_uses_the_sensors_only_where_the_interval_excludes_zero():
    cfg = ex.ExperimentConfig(profile="t", datasets=["pmdata"], systems=["healthllm"], backbones=["m"],
                              sensor_test_datasets=["pmdata"])
    rng = np.random.default_rng(0)
    labels = rng.integers(1, 6, 200)
    users = [f"u{i % 10}" for i in range(200)]
    real = _recs(labels.astype(float), labels, users)  # reads the sensors perfectly
    placebo = _recs(np.full(200, 3.0), labels, users, variant="placebo_other_user")
    same = _recs(labels.astype(float), labels, users, variant="placebo_distant")  # identical answers
    noisy = np.clip(labels + rng.choice([-1, 1], 200), 1, 5).astype(float)
    rows = pd.DataFrame(study.sensor_rows(cfg, _recs(noisy, labels, users), pd.DataFrame(),
                                          pd.concat([placebo, same.assign(prediction=noisy)])))
    by = rows.set_index("comparison")
    # noisy real vs the very same answers: difference 0 on every day, a point interval at 0 -> never "uses the sensors"
    assert by.filter(like="distant", axis=0).verdict.iloc[0] != study.USES_SENSORS
    rows = pd.DataFrame(study.sensor_rows(cfg, real, pd.DataFrame(), pd.concat([placebo, same])))
    other = rows[rows.comparison.str.contains("another user")].iloc[0]
    assert other.verdict == study.USES_SENSORS and other.ci_high < 0
    assert set(rows[rows.claim.isin(["mood_only", "no_mood", "format_example"])].verdict) == {study.NOT_RUN}


def test_cpu_study_declares_the_sensor_test_on_pmdata_and_off_when_asked(real_data):
    from balms.experiments import config
    from balms.experiments.cells import cells_for

    off = config.load("cpu-study", raw_root=str(real_data), sensor_test_datasets=[])
    assert not [c for c in cells_for("08_cpu_study", off) if c.part == "sensor_test"]
    on = config.load("cpu-study", raw_root=str(real_data))
    assert on.sensor_test_datasets == ["pmdata"]  # the committed study runs it (issue 39)
    sensor = [c for c in cells_for("08_cpu_study", on) if c.part == "sensor_test"]
    assert {c.system for c in sensor} == {"healthllm", "rag", "personal_baseline"}
    assert {c.model for c in sensor} == {*on.backbones, *on.size_backbones}  # both model sizes (issue 39)
    assert {c.n_samples for c in sensor if c.model in on.size_backbones} == {on.size_n_samples["pmdata"]}
    one = config.load("cpu-study", raw_root=str(real_data), sensor_test_models=on.backbones)
    narrowed = [c for c in cells_for("08_cpu_study", one) if c.part == "sensor_test"]
    assert {c.model for c in narrowed} == set(on.backbones)
    assert len(sensor) == 2 * sum(VARIANTS.values()) == 2 * len(narrowed)
    with pytest.raises(config.ConfigError, match="sensor_test_models"):
        config.load("cpu-study", sensor_test_models=["qwen2.5-7b"])
    paper = config.load("paper", raw_root=str(real_data))
    assert {c.system for c in cells_for("08_cpu_study", paper)} == {"healthllm", "rag"}  # RAPTOR, PHIA: not supported
    narrowed = config.load("cpu-study", datasets=["globem"], sensor_test_datasets=["pmdata"])
    assert not [c for c in cells_for("08_cpu_study", narrowed) if c.part == "sensor_test"]  # no real cell to pair
    with pytest.raises(config.ConfigError, match="sensor_test_datasets"):
        config.load("cpu-study", sensor_test_datasets=["mars"])


@pytest.mark.skipif(not STUDY_BUNDLE.exists(), reason="no committed CPU-study bundle")
def test_the_committed_bundle_holds_every_sensor_test_cell(real_data, monkeypatch):
    """Every declared sensor-test cell of the CPU study (its key: samples, placebo source, prompt code) has its run
    file in the committed bundle, so `make test-replay` reproduces the claims' placebo rows with zero calls."""
    import tarfile

    from balms.cellspec import key_of_run_file
    from balms.experiments import config, grid
    from balms.experiments.cells import cells_for

    monkeypatch.setenv("BALMS_RAW_DIR", str(real_data))
    cfg = config.load("cpu-study")
    declared = {grid.build_cell(cfg, d, key_only=True).spec.key()
                for d in cells_for("08_cpu_study", cfg) if d.part == "sensor_test"}
    with tarfile.open(STUDY_BUNDLE) as tar:
        bundled = {key_of_run_file(m.name) for m in tar.getmembers() if m.name.endswith(".jsonl")}
    assert declared and not declared - bundled, f"{len(declared - bundled)} of {len(declared)} not in the bundle"
