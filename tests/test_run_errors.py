"""A store with explicit status, and a run that errors says so (issue 24).

Errors are retried on the next run and then count in the MAE; summaries and Table 3 report them apart from parse
failures; a cell whose samples all failed stops with the first error; a grid with errors stops once it has run
unless `allow_errors`; judge verdicts that are backend errors are judged again; torn JSONL tails are truncated and
reported. The scripted backend and the synthetic PMData cohort of tests/test_experiments.py stand in.
"""

from __future__ import annotations

import json

import pytest
from test_experiments import Scripted, env  # noqa: F401  (env is a fixture)

from balms import experiments as ex
from balms.experiments.errors import RunErrors, grid_errors
from balms.jsonl_store import TornTailWarning
from balms.models.base import BackendError
from balms.records import PredictionRecord
from balms.runner import load_records


class Failing(Scripted):
    """Scripted, but the first `n_fail` prediction (or judge) calls raise a permanent backend error."""

    def __init__(self, n_fail: int, judge: bool = False):
        super().__init__()
        self.n_fail, self.judge = n_fail, judge

    def generate(self, messages, params):
        is_judge = params.json_schema is not None or "rubric" in messages[0].content.lower()
        if is_judge == self.judge and self.n_fail > 0:
            self.n_fail -= 1
            raise BackendError("HTTP 400 the model folder is unusable")
        return super().generate(messages, params)


def _use(monkeypatch, backend):
    import balms.models.registry as reg

    monkeypatch.setattr(reg, "get_backend", lambda name=None, **kw: backend)


def test_errors_are_apart_from_parse_failures_retried_and_then_scored(env, monkeypatch, capsys):  # noqa: F811
    cfg, _ = env
    _use(monkeypatch, Failing(2))
    # a grid with errors stops once every cell has run, naming the first error; the grid line counts them
    with pytest.raises(RunErrors, match=r"2 of 4 record\(s\), in 1 cell\(s\), are errors .*HTTP 400 the model "
                                        r"folder is unusable"):
        ex.run(cfg, ex.adhoc_cells(cfg))
    err = capsys.readouterr().err
    assert grid_errors(err) == 2 and "4 records: " in err and ", 2 error records, " in err
    # allowed, the notebook goes on: errors counted apart from parse failures in the summary and Table 3
    allowed = cfg.replace(allow_errors=True)
    kept = allowed.replace(retry_errors=False)
    df = ex.run(kept, ex.adhoc_cells(kept))
    assert sorted(df["status"]) == ["error", "error", "ok", "ok"]
    summ = ex.summarize(df, cfg=allowed)
    assert summ.loc[0, "n_errors"] == 2 and summ.loc[0, "parse_failure_rate"] == 0 and summ.loc[0, "n_parsed"] == 2
    t3 = ex.table3_paper_vs_ours(summ, ex.mean_predictor_rows(allowed), cot=False)
    assert t3.loc[0, "ours scripted errors"] == 2 and t3.loc[0, "ours scripted parse fail"] == 0
    assert t3.loc[0, "ours scripted n parsed"] == 2
    # the next run (the backend fixed) retries the two errors only; then every sample counts in the MAE
    fixed = Scripted()
    _use(monkeypatch, fixed)
    df = ex.run(cfg, ex.adhoc_cells(cfg))
    assert fixed.calls == 2 and (df["status"] == "ok").all() and len(df) == 4
    summ = ex.summarize(df, cfg=cfg)
    assert summ.loc[0, "n_errors"] == 0 and summ.loc[0, "n_parsed"] == 4
    assert summ.loc[0, "mae"] == pytest.approx((df["label"] - 3).abs().mean())
    assert ex.table3_paper_vs_ours(summ, ex.mean_predictor_rows(cfg), cot=False).loc[0, "ours scripted errors"] == 0


def test_a_cell_whose_samples_all_errored_stops_with_the_first_error(env, monkeypatch):  # noqa: F811
    """Both cells in flight (the scheduler), two samples at a time; the RAG cell's first sample is in flight
    (its call held until the run stops) while every Health-LLM sample fails: that cell fails whole, the run stops,
    the RAG sample in flight finishes (within the stop's grace) and no further one starts. Ordered by events."""
    import threading

    from balms import runner
    from balms.models.slots import STOP

    cfg, _ = env
    cfg = cfg.replace(systems=["healthllm", "rag"], concurrency=1)
    rag_in = threading.Event()

    class Held:
        def __init__(self, backend, system, stop):
            self._backend, self._system, self._stop = backend, system, stop

        def __getattr__(self, item):
            return getattr(self._backend, item)

        def generate(self, messages, params):
            if self._system == "rag" and not rag_in.is_set():
                rag_in.set()
                self._stop.wait(60)  # the first RAG sample held until the failed cell stops the run
            else:
                rag_in.wait(60)  # Health-LLM fails only once a RAG sample is in flight
            return self._backend.generate(messages, params)

    predict = runner._predict

    def ordered(agent, backend, sample, tables):
        return predict(agent, Held(backend, agent.name, STOP), sample, tables)

    monkeypatch.setattr(runner, "_predict", ordered)
    _use(monkeypatch, Failing(10**6))
    with pytest.raises(RunErrors, match=r"cell pmdata healthllm scripted zs L14: all 4 sample\(s\) failed with an "
                                        r"error.*The first error: BackendError \(permanent\): HTTP 400 the model "
                                        r"folder is unusable"):
        ex.run(cfg, ex.adhoc_cells(cfg))
    recs = {p.name.split("__")[0]: load_records(p) for p in (cfg.runs_root() / "pmdata").glob("*.jsonl")}
    # one pool for the model's samples in rank order (h1, r1, h2, r2, ...): r1 held on one thread, the other runs
    # h1, h2, r2, h3, r3, h4 (and r4 if it takes it before the writer sees h4 fail); then the stop: r1 finishes
    # within the grace
    assert len(recs["healthllm"]) == 4 and 3 <= len(recs["rag"]) <= 4
    assert {r.status for rs in recs.values() for r in rs} == {"error"}
    monkeypatch.setattr(runner, "_predict", predict)
    fixed = Scripted()
    _use(monkeypatch, fixed)
    df = ex.run(cfg, ex.adhoc_cells(cfg))  # fixed: the errors retried, the rest run
    assert len(df) == 8 and (df["status"] == "ok").all() and fixed.calls == 8


def test_old_records_without_status_still_load():
    old = {"sample_id": "s", "system": "rag", "model": "m", "model_id": "m", "label": 3}
    assert PredictionRecord.model_validate(old).status == "parse_failure"
    assert PredictionRecord.model_validate(old | {"prediction": 2}).status == "ok"
    assert PredictionRecord.model_validate(old | {"error": "boom"}).status == "error"
    with pytest.raises(ValueError, match="status 'ok' disagrees"):
        PredictionRecord.model_validate(old | {"error": "boom", "status": "ok"})


def test_judge_backend_errors_are_retried_and_a_torn_tail_is_truncated(env, monkeypatch):  # noqa: F811
    cfg, _ = env
    judge = Failing(10**6, judge=True)
    _use(monkeypatch, judge)
    first = ex.judge_grid(cfg, judge_model="scripted")
    assert (first["judge_unscored_reason"].str.contains("HTTP 400")).all()
    jpath = next((cfg.runs_root() / "pmdata").glob("*.judge.jsonl"))
    calls = judge.calls
    kept = ex.judge_grid(cfg.replace(retry_errors=False), judge_model="scripted")
    assert judge.calls == calls and (kept["judge_status"] == "unscored").all()  # kept as they are
    judge.n_fail = 0  # the judge's backend works again
    # a crash mid-write left a torn last line: truncated (and reported) before the next verdict is appended
    intact = jpath.read_bytes()
    fragment = b'{"sample_id": "pmdata/p01/2020-01-0'
    with open(jpath, "ab") as fh:
        fh.write(fragment)
    with pytest.warns(TornTailWarning, match=rf"{jpath.name}: torn last line \({len(fragment)} bytes"):
        again = ex.judge_grid(cfg, judge_model="scripted")
    assert (again["judge_status"] == "scored").all() and judge.calls == calls + 4
    lines = jpath.read_text().splitlines()
    assert len(lines) == 4 and all(json.loads(line)["status"] == "scored" for line in lines)
    assert not jpath.read_bytes().startswith(intact)  # the backend errors were replaced, not appended after


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_make_paper_with_an_unusable_model_folder_exits_non_zero_naming_the_error(tmp_path):
    """The fresh-clone failure of issue 24: `<cache>/models` a dangling link, so every sample fails with
    FileExistsError. Notebook 01 of the smoke profile (on a chunked model, which lives in that folder), executed by
    papermill through make, must fail and say why, instead of 'succeeding' with no prediction made."""
    import os
    import subprocess

    from balms import paths

    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "models").symlink_to(tmp_path / "not-there")
    run_env = os.environ | {"BALMS_CACHE_DIR": str(cache), "BALMS_RUNS_DIR": str(tmp_path / "runs"),
                            "BALMS_OUTPUT_DIR": str(tmp_path / "out"), "PYTHONPATH": str(paths.PROJECT_ROOT)}
    proc = subprocess.run(["make", "--no-print-directory", "notebook", "NB=01_prediction", "PROFILE=smoke",
                           f"EXEC_DIR={tmp_path / 'executed'}", "P=-p backbones [qwen2.5-coder-0.5b]"],
                          cwd=paths.PROJECT_ROOT, env=run_env, capture_output=True, text=True, timeout=840)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "[01_prediction] FAILED" in out
    assert "RunErrors" in out and "failed with an error" in out and "FileExistsError" in out, out[-3000:]
    assert (tmp_path / "executed" / "01_prediction.ipynb.failed").exists()
