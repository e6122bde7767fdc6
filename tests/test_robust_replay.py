"""Fresh and replayed records are identical for the same work (issue 37): a grid run fresh, then again from the
caches in a new runs folder, writes the same run files but for timings and cache provenance
(balms.runfile.record_content). Two ways they differed: a RAPTOR day summary kept its model's
trailing space when generated and lost it when read back from the summary cache; PHIA's `sandbox_mechanisms`
appeared on an episode that ran no code when its Sandbox happened to be the process's first (the one that checks a
worker before any block)."""

from __future__ import annotations

import pytest

from agent_fakes import use_hash_embedder
from balms import experiments as ex
from balms.agents import prompts
from balms.experiments import cohorts
from balms.models.base import Completion
from balms.models.cache import CachedBackend, ResponseCache
from balms.runfile import record_content
from balms.runner import load_records


class Scripted:
    """A day summary with the trailing space a model leaves; an answer to every other prompt."""

    model_id = "scripted:test"
    name = "scripted"

    def __init__(self):
        self.calls = 0

    def generate(self, messages, params):
        self.calls += 1
        if messages[0].content == prompts.SUMMARY_SYSTEM_PROMPT:
            text = "A quiet day: few steps, a short night. "
        else:
            text = "Sleep was short on the last day, so stress is moderate.\nAnswer: 3"
        return Completion(text=text, model_id=self.model_id, prompt_tokens=50, completion_tokens=10,
                          latency_s=0.25, finish_reason="stop")


class Never:
    model_id = "scripted:test"
    name = "scripted"

    def generate(self, messages, params):
        raise AssertionError("a model call in the replay")


def _run_files(root):
    """Every run file's records without what they say about the run that made them (the scheduler's one list:
    timings, whether a call was answered from a cache, how many summaries this sample wrote first), by sample: a
    run file is appended in the order samples finish, which concurrency decides."""
    return {p.relative_to(root).as_posix(): sorted((record_content(r) for r in load_records(p)),
                                                   key=lambda r: r["sample_id"])
            for p in sorted(root.rglob("*.jsonl"))}


@pytest.mark.slow  # real sandbox workers for PHIA
def test_a_grid_replayed_in_a_new_runs_folder_writes_the_same_run_files(tmp_path, monkeypatch, isolated_cache):
    from balms.sandbox import executor

    use_hash_embedder(monkeypatch)
    monkeypatch.setenv("BALMS_RAW_DIR", str(tmp_path / "no_raw"))  # the synthetic cohorts
    import balms.models.registry as reg
    import balms.models.routing as routing

    monkeypatch.setattr(routing, "check_models", lambda *a, **kw: {})
    cache = ResponseCache(tmp_path / "responses.sqlite")
    fresh = Scripted()
    backends = {"now": CachedBackend(fresh, cache)}
    monkeypatch.setattr(reg, "get_backend", lambda name=None, **kw: backends["now"])
    cfg = ex.ExperimentConfig(profile="t", datasets=["pmdata"], systems=["healthllm", "rag", "raptor", "phia"],
                              backbones=["scripted"], n_samples=2, seed=0, phia_max_iters=1)
    cohorts._cohort.cache_clear()
    monkeypatch.setattr(executor, "_verified", set())  # as in a new process: its first Sandbox checks a worker
    try:
        monkeypatch.setenv("BALMS_RUNS_DIR", str(tmp_path / "fresh"))
        ex.run(cfg, ex.adhoc_cells(cfg, cots=(False, True)))
        backends["now"] = CachedBackend(Never(), cache, mode="replay")
        monkeypatch.setenv("BALMS_RUNS_DIR", str(tmp_path / "replay"))
        ex.run(cfg, ex.adhoc_cells(cfg, cots=(False, True)))
    finally:
        cohorts._cohort.cache_clear()
    first, again = _run_files(tmp_path / "fresh"), _run_files(tmp_path / "replay")
    assert len(first) == 8 and fresh.calls > 0 and sum(map(len, first.values())) == 16
    summaries = [st for recs in first.values() for r in recs for st in r["transcript"] if st["kind"] == "summary"]
    assert summaries and all(st["content"] == st["content"].strip() for st in summaries)
    for name in first:
        assert again[name] == first[name], (name, _diff(first[name], again[name])[:10])


def _diff(a, b, path=""):
    """Debug helper: the first paths where two JSON values differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}.{k}: only one side" for k in set(a) ^ set(b)]
        for k in set(a) & set(b):
            out += _diff(a[k], b[k], f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in _diff(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"[:300]]
