"""The spending cap (balms.experiments.budget) on the stand-ins: a scheduled run under a cap below its cost stops
before the cap, keeps what it did and says how far it got; run again with the cap raised it completes, the earlier
records untouched; a cap never charges calls answered from a cache."""

from __future__ import annotations

import pytest

from balms.experiments.budget import SpendingCapReached, call_usage, spend_of
from balms.experiments.cells import adhoc_cells
from balms.experiments.config import ExperimentConfig
from balms.experiments.grid import make_cell, run
from balms.experiments.plan import THROUGHPUT
from balms.experiments.scheduler import schedule_cells
from balms.records import PredictionRecord, Step
from balms.runfile import record_content
from fake_servers import AnsweringOpenAIServer

MODELS = {"Qwen2.5-7B-Instruct": "Qwen/Qwen2.5-7B-Instruct",
          "Mistral-7B-Instruct-v0.3": "mistralai/Mistral-7B-Instruct-v0.3"}
# the stand-ins report 11 prompt and 7 completion tokens per call; Health-LLM makes one call per sample
PER_SAMPLE_H = (11 / THROUGHPUT["7b"]["prefill"] + 7 / THROUGHPUT["7b"]["decode"]) / 3600


@pytest.fixture()
def servers():
    srvs = [AnsweringOpenAIServer(models=[mid], strict=True).start() for mid in MODELS.values()]
    yield srvs
    for s in srvs:
        s.stop()


def _cfg(servers, **kw):
    return ExperimentConfig(profile="cap", datasets=["pmdata"], systems=["healthllm"], backbones=list(MODELS),
                            n_samples=4, seed=0, lookback=3, concurrency=4, servers=[s.url for s in servers], **kw)


def _run(servers, **kw):
    cfg = _cfg(servers, **kw)
    cells = [make_cell(cfg, "pmdata", "healthllm", m) for m in cfg.backbones]
    return schedule_cells(cfg, cells, progress=False)


def test_cap_stops_before_it_keeps_and_resumes_when_raised(servers, tmp_path, monkeypatch, real_data):
    monkeypatch.setenv("BALMS_RAW_DIR", str(real_data))
    monkeypatch.setenv("BALMS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("BALMS_RUNS_DIR", str(tmp_path / "runs"))
    cap = 3.5 * PER_SAMPLE_H  # 8 samples in the grid; the cap allows 3

    first = _run(servers, max_gpu_hours=cap)
    done = [r for recs in first.records for r in recs]
    assert len(done) == 3 and not any(r.error for r in done)
    spent = sum(spend_of(r)[1] for r in done)
    assert spent <= cap
    assert first.stopped and "3 of 8 samples done" in first.stopped and "max_gpu_hours" in first.stopped
    assert sum(len(s.requests) for s in servers) == 3  # nothing beyond the cap was sent

    same = _run(servers, max_gpu_hours=cap)  # the same cap again: already spent, nothing more
    assert sum(len(recs) for recs in same.records) == 3 and same.stopped
    with pytest.raises(SpendingCapReached, match="3 of 8 samples done"):  # a notebook's grid stops, saying so
        capped = _cfg(servers, max_gpu_hours=cap)
        run(capped, adhoc_cells(capped))

    raised = _run(servers, max_gpu_hours=10 * PER_SAMPLE_H)
    assert raised.stopped is None
    after = {r.sample_id + r.model: record_content(r) for recs in raised.records for r in recs}
    assert len(after) == 8
    assert all(after[r.sample_id + r.model] == record_content(r) for r in done)  # kept as they were
    assert sum(len(s.requests) for s in servers) == 8  # each sample's call made once over the three runs


def test_cached_calls_are_not_spent():
    steps = [Step(kind="completion", meta={"prompt_tokens": 100, "completion_tokens": 10, "cached": False}),
             Step(kind="summary", meta={"prompt_tokens": 50, "completion_tokens": 5, "cached": True}),
             Step(kind="retrieval", meta={"ids": []})]
    rec = PredictionRecord(sample_id="s", system="rag", model="Qwen2.5-7B-Instruct", model_id="q", transcript=steps)
    assert call_usage(rec) == (100, 10)
    t = THROUGHPUT["7b"]
    assert spend_of(rec) == (0.0, pytest.approx((100 / t["prefill"] + 10 / t["decode"]) / 3600))
    claude = rec.model_copy(update={"model": "Claude-Haiku-4.5", "model_id": "claude-haiku-4-5"})
    usd, gpu = spend_of(claude)
    assert usd > 0 and gpu == 0.0


def test_a_warm_cache_teaches_no_cost_and_the_cap_holds(servers, tmp_path, monkeypatch, real_data):
    """Issue 36's case: the cache holds the first samples' answers (an earlier run, then `make clean-runs`), so
    the first samples cost nothing. They must not teach the cap a cost of zero: with a cap that allows 5 real
    calls, 24 samples at 8 in flight make at most 5 real calls plus one per server (one sample's cost each)."""
    monkeypatch.setenv("BALMS_RAW_DIR", str(real_data))
    monkeypatch.setenv("BALMS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("BALMS_RUNS_DIR", str(tmp_path / "runs"))
    model = "Qwen2.5-7B-Instruct"
    cfg = _cfg(servers, server_slots=8).replace(n_samples=24, concurrency=8)
    samples = make_cell(cfg, "pmdata", "healthllm", model).samples
    assert len(samples) == 24
    schedule_cells(cfg, [make_cell(cfg, "pmdata", "healthllm", model, samples=samples[:6])], progress=False)
    warm = sum(len(s.requests) for s in servers)
    assert warm == 6
    capped = cfg.replace(max_gpu_hours=5.5 * PER_SAMPLE_H)  # a fresh run file (other samples): as after clean-runs
    report = schedule_cells(capped, [make_cell(capped, "pmdata", "healthllm", model, samples=samples)], progress=False)
    real = sum(len(s.requests) for s in servers) - warm
    recs = report.records[0]
    paid = [r for r in recs if not all(st.meta.get("cached") for st in r.transcript if st.kind == "completion")]
    assert report.stopped and 1 <= real <= 5 + 1 and len(paid) == real  # (c5a6e3a: 10)
    assert len(recs) > len(paid)  # the samples answered from the cache were run (free), not refused


def test_single_cell_run_applies_the_cap_and_refuses_an_unknown_set_key(servers, tmp_path, monkeypatch, real_data,
                                                                      capsys):
    """`balms run --set '-p max_gpu_hours X'` holds the cap on a single cell; `--set '-p max_usdd 1'` is refused."""
    from balms.cli import main

    monkeypatch.setenv("BALMS_RAW_DIR", str(real_data))
    monkeypatch.setenv("BALMS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("BALMS_RUNS_DIR", str(tmp_path / "runs"))
    args = ["run", "--dataset", "pmdata", "--system", "healthllm", "--model", "Qwen2.5-7B-Instruct", "--n", "6",
            "--lookback", "3", "--concurrency", "4", "--config", "demo"]
    url = servers[0].url
    with pytest.raises(SystemExit, match="max_usdd"):
        main(args + ["--set", f"-p servers [{url}] -p max_usdd 1"])
    assert not servers[0].requests
    with pytest.raises(SpendingCapReached, match="2 of 6 samples done"):
        main(args + ["--set", f"-p servers [{url}] -p max_gpu_hours {2.5 * PER_SAMPLE_H!r}"])
    assert len(servers[0].requests) == 2
