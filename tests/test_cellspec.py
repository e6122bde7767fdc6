"""The cell spec: a frozen, serialisable identity for one benchmark cell that names its run file, lives in every
manifest and record, and changes whenever the code or data that compute the records change."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading

import pytest
from pydantic import ValidationError

from balms.cellspec import CellSpec
from balms.data.schema import DataError
from balms.paths import PROJECT_ROOT
from balms.runner import load_records, manifest_path_for, run_samples
from fake_servers import FakeBackend, TinyAgent, make_samples


def _spec(**kw) -> CellSpec:
    base = dict(dataset="pmdata", system="healthllm", model="m", model_id="m@1", cot=False, lookback=14,
                options={"max_tokens": 16, "temperature": 0.0, "seed": 0}, sample_ids=("a", "b"),
                data_fingerprint="d" * 16, code_fingerprint="c" * 16)
    return CellSpec(**(base | kw))


def test_key_is_stable_and_covers_every_field():
    s = _spec()
    assert s.key() == _spec().key() and len(s.key()) == 16
    assert CellSpec.from_json(s.to_json()) == s
    for change in [dict(code_fingerprint="e" * 16), dict(data_fingerprint="e" * 16), dict(sample_ids=("a",)),
                   dict(options={"max_tokens": 32, "temperature": 0.0, "seed": 0}), dict(cot=True),
                   dict(lookback=7), dict(model_id="m@2"), dict(prompt_style="corrected")]:
        assert _spec(**change).key() != s.key(), change
    assert s.run_name().startswith("healthllm__m__zs__L14__") and s.run_name().endswith(s.key())
    assert s.decoding == {"max_tokens": 16, "temperature": 0.0, "seed": 0}
    with pytest.raises(ValidationError, match="typo"):
        CellSpec(**(s.model_dump() | {"typo": 1}))  # extra fields are refused


def test_compact_form_replaces_ids_by_digest():
    c = _spec().compact()
    assert "sample_ids" not in c and c["n_samples"] == 2 and c["key"] == _spec().key()


def test_records_and_manifest_carry_the_spec_and_foreign_records_are_refused(tmp_path):
    samples = make_samples(4)
    spec = _spec(sample_ids=tuple(s.sample_id for s in samples))
    out = tmp_path / "run.jsonl"
    run_samples(TinyAgent(), FakeBackend(), samples, None, out, progress=False, spec=spec)
    recs = load_records(out)
    assert len(recs) == 4 and all(r.cell["key"] == spec.key() for r in recs)
    man = json.loads(manifest_path_for(out).read_text())
    assert man["cell"]["key"] == spec.key() and man["cell"]["sample_ids"] == list(spec.sample_ids)
    assert isinstance(man["agent"]["options"], dict)  # options as data, not a method's repr
    other = _spec(code_fingerprint="f" * 16, sample_ids=spec.sample_ids)
    with pytest.raises(DataError, match="cell spec"):
        run_samples(TinyAgent(), FakeBackend(), samples, None, out, progress=False, spec=other)


def test_two_writers_on_one_cell_never_duplicate(tmp_path):
    """make -j2 paper: two notebooks sharing a cell; the second waits on the lock, then finds everything done."""
    samples = make_samples(6)
    out = tmp_path / "run.jsonl"
    errors = []

    def go():
        try:
            run_samples(TinyAgent(), FakeBackend(latency=0.05), samples, None, out, progress=False)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=go) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    ids = [r.sample_id for r in load_records(out)]
    assert sorted(ids) == sorted(s.sample_id for s in samples)  # each exactly once


_RUN = """
import json
from balms import experiments as ex
from balms.experiments.grid import run_path_of

cfg = ex.ExperimentConfig(profile="t", datasets=["pmdata"], n_samples=2, zs_max_tokens=8)
recs = ex.records_of(cfg, [ex.make_cell(cfg, "pmdata", "healthllm", "smollm2-135m")], progress=False)[0]
man = json.loads(run_path_of(cfg, recs[0]).with_suffix("").with_suffix(".manifest.json").read_text())
print(json.dumps({"key": recs[0].cell["key"], "hits": man["sessions"][-1].get("cache_hits"),
                  "misses": man["sessions"][-1].get("cache_misses"),
                  "prompts": [next(s.content for s in r.transcript if s.kind == "prompt") for r in recs]}))
"""


@pytest.mark.slow
def test_changed_code_reruns_the_cell_from_the_response_cache(tmp_path, real_data):
    """Acceptance: after a library change a warm re-run gets a new cell (new run file) whose unchanged model
    calls come from the response cache, and a prompt change reaches the records."""
    pkg = tmp_path / "pkg"
    shutil.copytree(PROJECT_ROOT / "balms", pkg / "balms", ignore=shutil.ignore_patterns("__pycache__"))
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(pkg),
           "BALMS_CACHE_DIR": str(tmp_path / "cache"), "BALMS_RUNS_DIR": str(tmp_path / "runs"),
           "BALMS_RAW_DIR": str(real_data), "HF_HUB_OFFLINE": "1"}

    def run():
        out = subprocess.run([sys.executable, "-c", _RUN], env=env, capture_output=True, text=True, timeout=600,
                             cwd=tmp_path)
        assert out.returncode == 0, out.stderr[-3000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    first = run()
    assert first["misses"] == 2 and first["hits"] == 0
    assert run()["misses"] == 0  # unchanged code: same cell, records read back, no call at all
    parsing = pkg / "balms" / "agents" / "parsing.py"
    parsing.write_text(parsing.read_text() + "\n# a comment alone re-keys nothing (cellspec.code_tokens)\n")
    assert run()["key"] == first["key"]
    parsing.write_text(parsing.read_text() + "\n_A_CODE_CHANGE_THAT_ALTERS_NO_PROMPT = 1\n")
    second = run()
    assert second["key"] != first["key"]  # new cell, new run file ...
    assert (second["hits"], second["misses"]) == (2, 0)  # ... computed from the response cache
    assert second["prompts"] == first["prompts"]
    prompts = pkg / "balms" / "agents" / "paper_prompts.py"  # the default (paper) style's template
    prompts.write_text(prompts.read_text() + "\n\n_orig_healthllm_prompt = healthllm_prompt\n\n\n"
                       "def healthllm_prompt(*args, **kwargs):\n"
                       "    return _orig_healthllm_prompt(*args, **kwargs) + '\\nPROMPT-CHANGED'\n")
    third = run()
    assert third["key"] not in (first["key"], second["key"]) and third["misses"] == 2
    assert all(p.endswith("PROMPT-CHANGED") for p in third["prompts"])


def test_the_spec_is_immutable_all_the_way_down():
    import copy
    import pickle

    s = _spec(options={"limits": {"cpu_s": 10}, "channels": ["a", "b"], "seed": 0})
    for change in (lambda o: o.__setitem__("seed", 1), lambda o: o["limits"].update(cpu_s=1),
                   lambda o: o.pop("seed"), lambda o: o.clear(), lambda o: o.setdefault("x", 1)):
        with pytest.raises(TypeError, match="read-only"):
            change(s.options)
    assert s.options["channels"] == ("a", "b")  # lists become tuples
    with pytest.raises(ValidationError, match="frozen"):
        s.lookback = 3
    assert isinstance(s.options, dict) and json.loads(json.dumps(s.options)) == {"limits": {"cpu_s": 10},
                                                                                "channels": ["a", "b"], "seed": 0}
    assert pickle.loads(pickle.dumps(s)) == s and copy.deepcopy(s) == s
    assert CellSpec.from_json(s.to_json()) == s and CellSpec.from_json(s.to_json()).key() == s.key()


@pytest.mark.parametrize("change, message", [
    ({"typo": 1}, r"unknown field\(s\) \['typo'\]"),
    ({"options": {"limits": {1, 2}}}, r"options.limits: set .* is not a JSON value"),
    ({"options": {"x": float("nan")}}, "options.x: float nan is not a JSON value"),
    ({"request_additions": {"default_system": object()}}, "request_additions.default_system: object"),
    ({"lookback": -1}, "lookback"),
    ({"model": ""}, "model"),
    ({"sample_ids": ("a", "b", "a")}, r"sample ids repeat: \['a'\]"),
])
def test_invalid_specs_are_refused_by_name(change, message):
    with pytest.raises(ValidationError, match=message):
        CellSpec(**(_spec().model_dump() | change))
    if "typo" in change:  # from a manifest too
        with pytest.raises(ValidationError, match=message):
            CellSpec.from_json(json.dumps(json.loads(_spec().to_json()) | change))


def test_one_model_one_cell_whatever_its_spelling(real_data, monkeypatch, tmp_path):
    """The registry matches names in any case; the spec, run file and records carry its canonical name."""
    from balms.experiments.config import ExperimentConfig
    from balms.experiments.grid import make_cell
    from balms.models.registry import canonical_name, get_backend

    monkeypatch.setenv("BALMS_CACHE_DIR", str(tmp_path / "cache"))
    cfg = ExperimentConfig(profile="t", datasets=["pmdata"], n_samples=1, raw_root=str(real_data))
    a = make_cell(cfg, "pmdata", "healthllm", "Qwen2.5-Coder-0.5B", key_only=True).spec
    b = make_cell(cfg, "pmdata", "healthllm", "qwen2.5-coder-0.5b", key_only=True).spec
    assert a.model == b.model == "qwen2.5-coder-0.5b" and a.key() == b.key() and a.run_name() == b.run_name()
    assert a.request_additions == {"default_system": "You are a helpful assistant."}  # what llama.cpp adds
    assert get_backend("QWEN2.5-CODER-0.5B", cache_mode="replay").name == "qwen2.5-coder-0.5b"  # records' model
    assert canonical_name("served-only/Model") == "served-only/Model"  # a served name is matched exactly
    spelled = ExperimentConfig(backbones=["Qwen2.5-Coder-0.5B", "qwen2.5-coder-0.5b"], judge_model="QWEN2.5-CODER-1.5B",
                               system_backbones={"raptor": "SmolLM2-135M"}, horizon_backbone="Qwen2.5-Coder-1.5B")
    assert (spelled.backbones, spelled.judge_model, spelled.system_backbones, spelled.horizon_backbone) == (
        ["qwen2.5-coder-0.5b"], "qwen2.5-coder-1.5b", {"raptor": "smollm2-135m"}, "qwen2.5-coder-1.5b")
