"""Runner: records, errors, retries, manifest, resume after SIGKILL, torn lines, replay."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from balms.data.schema import DataError
from balms.jsonl_store import TornTailWarning
from balms.models.base import BackendError
from balms.models.cache import CachedBackend, ResponseCache
from balms.runner import load_records, manifest_path_for, run_samples
from fake_servers import FakeBackend, TinyAgent, make_samples

TESTS = Path(__file__).resolve().parent


def _ids(records):
    return [r.sample_id for r in records]


def test_run_writes_one_record_per_sample_and_manifest(tmp_path):
    samples = make_samples(12)
    backend = CachedBackend(FakeBackend(latency=0.01), ResponseCache(tmp_path / "c.sqlite"))
    out = tmp_path / "run.jsonl"
    res = run_samples(TinyAgent(n_calls=2), backend, samples, None, out, concurrency=4, progress=False,
                      manifest_extra={"profile": "test"})
    recs = load_records(out)
    assert sorted(_ids(recs)) == sorted(s.sample_id for s in samples)
    assert res.n_new == 12 and res.n_done_before == 0 and res.n_errors == 0
    assert all(r.prediction in range(1, 6) and r.n_steps == 2 and len(r.transcript) == 4 for r in recs)
    m = json.loads(manifest_path_for(out).read_text())
    assert m["status"] == "complete" and m["model_ids"] == ["fake-model"]
    assert m["parameters"]["concurrency"] == 4 and m["parameters"]["profile"] == "test"
    assert m["data"]["sources"] == ["synthetic"] and m["git"]["commit"]
    assert m["packages"]["pydantic"] and m["packages"]["tenacity"]
    if "llama_cpp" in sys.modules:  # the llama.cpp build flavour is recorded once a llama.cpp backend is loaded
        assert "AVX" in m["llama_cpp_build"] and "threads " in m["llama_cpp_build"]  # flags and threads
    else:
        assert m["llama_cpp_build"] is None
    assert m["usage"]["prompt_tokens"] == sum(r.prompt_tokens for r in recs) > 0
    assert m["usage"]["completion_tokens"] == 12 * 2 * 5 and m["usage"]["model_calls"] == 24
    assert m["sessions"][0]["cache_misses"] == 24 and m["sessions"][0]["model_attempts"] == 24


def test_cost_estimated_from_price_table(tmp_path):
    backend = FakeBackend(model_id="claude-haiku-4-5")
    run_samples(TinyAgent(), backend, make_samples(2), None, tmp_path / "r.jsonl", progress=False)
    recs = load_records(tmp_path / "r.jsonl")
    for r in recs:
        assert r.cost_usd == pytest.approx((r.prompt_tokens * 1.0 + r.completion_tokens * 5.0) / 1e6)
    m = json.loads((tmp_path / "r.manifest.json").read_text())
    assert m["usage"]["estimated_cost_usd"] == pytest.approx(sum(r.cost_usd for r in recs), abs=1e-6)


def test_transient_errors_retried_permanent_recorded(tmp_path):
    samples = make_samples(3)
    errs = [BackendError("HTTP 503", transient=True, retry_after=0.0)] * 2 + [None, BackendError("HTTP 400 bad")]
    backend = FakeBackend(errors=errs)
    res = run_samples(TinyAgent(fail_on=frozenset({samples[2].sample_id})), backend, samples, None,
                      tmp_path / "r.jsonl", concurrency=1, progress=False, retries=3)
    recs = {r.sample_id: r for r in load_records(tmp_path / "r.jsonl")}
    assert len(recs) == 3 and res.n_errors == 2
    # sample 0: two 503s retried then success; sample 1: permanent 400 recorded; sample 2: agent raised
    assert recs[samples[0].sample_id].error is None and recs[samples[0].sample_id].prediction is not None
    assert "BackendError (permanent): HTTP 400 bad" in recs[samples[1].sample_id].error
    assert recs[samples[2].sample_id].error.startswith("ValueError: tiny agent refuses")
    assert backend.calls == 4
    m = json.loads((tmp_path / "r.manifest.json").read_text())
    assert m["sessions"][0]["retries"] == 2 and m["usage"]["n_errors"] == 2
    assert [recs[s.sample_id].status for s in samples] == ["ok", "error", "error"]
    # retry_errors=False keeps the error records as they are: nothing is run
    kept = run_samples(TinyAgent(), FakeBackend(), samples, None, tmp_path / "r.jsonl", progress=False,
                       retry_errors=False)
    assert kept.n_new == 0 and kept.n_errors == 2
    # by default the next run retries only the failed ones and leaves the good record untouched
    res2 = run_samples(TinyAgent(), FakeBackend(), samples, None, tmp_path / "r.jsonl", progress=False)
    assert res2.n_new == 2 and res2.n_errors == 0 and res2.session["n_errors_retried"] == 2
    assert sorted(_ids(load_records(tmp_path / "r.jsonl"))) == sorted(recs)


def test_errors_are_retried_by_default_and_then_count_in_the_mae(tmp_path):
    """Issue 24: 2 of 4 samples fail, the agent is fixed, the re-run writes 2 new records; the errors were never
    parse failures, and once they succeed they are scored."""
    from balms import metrics

    samples = make_samples(4)
    out = tmp_path / "r.jsonl"
    broken = TinyAgent(fail_on=frozenset(s.sample_id for s in samples[:2]))
    first = run_samples(broken, FakeBackend(), samples, None, out, progress=False)
    recs = load_records(out)
    assert first.n_errors == 2 and sorted(r.status for r in recs) == ["error", "error", "ok", "ok"]
    assert metrics.parse_failure_rate(recs) == 0.0  # an error is not a parse failure
    row = metrics.summarize_run(recs)
    assert row["n_errors"] == 2 and row["n_parse_failures"] == 0 and row["n_parsed"] == 2
    assert json.loads(out.read_text().splitlines()[0])["status"] in ("ok", "error")  # stated in the file
    second = run_samples(TinyAgent(), FakeBackend(), samples, None, out, progress=False)
    recs = load_records(out)
    assert second.n_new == 2 and second.n_errors == 0 and len(recs) == 4
    assert {r.status for r in recs} == {"ok"} and metrics.parse_failure_rate(recs) == 0.0
    row = metrics.summarize_run(recs)
    assert row["n_parsed"] == 4 and row["n_errors"] == 0
    assert row["mae"] == pytest.approx(sum(abs(r.label - r.prediction) for r in recs) / 4)


def test_transient_exhausted_becomes_error_record(tmp_path):
    backend = FakeBackend(errors=[BackendError("HTTP 529 overloaded", transient=True, retry_after=0.0)] * 3)
    run_samples(TinyAgent(), backend, make_samples(1), None, tmp_path / "r.jsonl", progress=False, retries=2)
    (rec,) = load_records(tmp_path / "r.jsonl")
    assert "transient, retries exhausted" in rec.error and "gave up after 3 attempts" in rec.error


def test_per_request_timeout(tmp_path):
    backend = FakeBackend(latency=0.5)
    run_samples(TinyAgent(), backend, make_samples(1), None, tmp_path / "r.jsonl", progress=False, retries=1,
                timeout_s=0.1)
    (rec,) = load_records(tmp_path / "r.jsonl")
    assert "no response within the deadline of 0.1 s" in rec.error and backend.calls == 2


def test_resume_skips_done_and_truncates_torn_line(tmp_path):
    samples = make_samples(6)
    out = tmp_path / "r.jsonl"
    run_samples(TinyAgent(), FakeBackend(), samples[:3], None, out, progress=False)
    with open(out, "ab") as fh:
        fh.write(b'{"sample_id": "synthetic-test/u3/2020-01-15/L7", "datas')  # killed mid-write
    torn = out.stat().st_size
    assert len(load_records(out)) == 3  # the reader ignores the torn tail
    torn -= len(out.read_bytes().rsplit(b"\n", 1)[0]) + 1
    backend = FakeBackend()
    with pytest.warns(TornTailWarning, match=rf"r\.jsonl: torn last line \({torn} bytes"):
        res = run_samples(TinyAgent(), backend, samples, None, out, progress=False)
    assert res.n_done_before == 3 and res.n_new == 3 and backend.calls == 3
    assert sorted(_ids(load_records(out))) == sorted(s.sample_id for s in samples)
    assert out.read_bytes().endswith(b"\n") and b'"datas\n' not in out.read_bytes()
    m = json.loads(manifest_path_for(out).read_text())
    assert len(m["sessions"]) == 2 and m["status"] == "complete"


def test_corrupt_middle_line_is_a_clear_error(tmp_path):
    out = tmp_path / "r.jsonl"
    run_samples(TinyAgent(), FakeBackend(), make_samples(2), None, out, progress=False)
    lines = out.read_text().splitlines()
    out.write_text(lines[0] + "\n{not json}\n" + lines[1] + "\n")
    with pytest.raises(DataError, match=r"r\.jsonl, row 2: not a valid PredictionRecord"):
        load_records(out)
    out.write_text(lines[0] + "\n" + lines[0] + "\n")
    with pytest.raises(DataError, match="duplicate record"):
        load_records(out)


def test_duplicate_samples_refused(tmp_path):
    s = make_samples(2)
    with pytest.raises(ValueError, match="duplicate sample ids"):
        run_samples(TinyAgent(), FakeBackend(), [s[0], s[1], s[0]], None, tmp_path / "r.jsonl", progress=False)


def test_replay_makes_no_calls_and_writes_identical_records(tmp_path):
    samples = make_samples(8)
    cache_path = tmp_path / "c.sqlite"
    run_samples(TinyAgent(n_calls=2), CachedBackend(FakeBackend(latency=0.001), ResponseCache(cache_path)), samples,
                None, tmp_path / "rw.jsonl", progress=False)
    never = FakeBackend(errors=[AssertionError("model called in replay")] * 100)
    replay = CachedBackend(never, ResponseCache(cache_path), mode="replay")
    res = run_samples(TinyAgent(n_calls=2), replay, samples, None, tmp_path / "replay.jsonl", progress=False)
    assert never.calls == 0 and res.n_errors == 0 and replay.stats()["hits"] == 16
    # identical records but for the wall time of the run that wrote them
    strip = [{k: v for k, v in json.loads(line).items() if k != "wall_s"} for line in
             (tmp_path / "replay.jsonl").read_text().splitlines()], [
        {k: v for k, v in json.loads(line).items() if k != "wall_s"} for line in
        (tmp_path / "rw.jsonl").read_text().splitlines()]
    assert strip[0] == strip[1] and len(strip[0]) == 8
    assert all(r.wall_s is not None for r in load_records(tmp_path / "replay.jsonl"))
    # a request never recorded: an error record naming it, not a silent call
    extra = make_samples(9)[8]
    run_samples(TinyAgent(n_calls=2), replay, samples + [extra], None, tmp_path / "replay.jsonl", progress=False)
    rec = {r.sample_id: r for r in load_records(tmp_path / "replay.jsonl")}[extra.sample_id]
    assert "replay-only cache miss" in rec.error and "fake-model" in rec.error and never.calls == 0


CRASH_SCRIPT = textwrap.dedent('''
    import json, sys
    sys.path.insert(0, {tests!r})
    from fake_servers import FakeBackend, TinyAgent, make_samples
    from balms.models.cache import CachedBackend, ResponseCache
    from balms.runner import run_samples
    backend = CachedBackend(FakeBackend(latency=0.03), ResponseCache({cache!r}))
    res = run_samples(TinyAgent(n_calls=3), backend, make_samples(40), None, {out!r}, concurrency=4, progress=False)
    print(json.dumps(res.session))
''')


def _cache_rows(path: Path) -> int:
    with sqlite3.connect(path) as con:
        return con.execute("SELECT COUNT(*) FROM responses").fetchone()[0]


def test_sigkill_midway_then_restart_every_sample_exactly_once(tmp_path):
    out, cache = tmp_path / "run.jsonl", tmp_path / "c.sqlite"
    script = tmp_path / "crash_run.py"
    script.write_text(CRASH_SCRIPT.format(tests=str(TESTS), cache=str(cache), out=str(out)))
    env = {**os.environ, "PYTHONPATH": str(TESTS.parent)}
    proc = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 60
    while time.time() < deadline and (not out.exists() or out.read_bytes().count(b"\n") < 10):
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    n_lines = out.read_bytes().count(b"\n")
    assert 10 <= n_lines < 40, "the kill must land part-way"
    rows_at_restart = _cache_rows(cache)

    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    session = json.loads(done.stdout.strip().splitlines()[-1])
    recs = load_records(out)
    ids = _ids(recs)
    assert len(ids) == 40 and sorted(set(ids)) == sorted(s.sample_id for s in make_samples(40))
    assert session["n_new"] == 40 - n_lines
    # cached calls were not recomputed: every miss of the second run added a new row
    assert _cache_rows(cache) == rows_at_restart + session["cache_misses"] == 40 * 3
    assert session["cache_hits"] == 3 * session["n_new"] - session["cache_misses"]
    assert json.loads(manifest_path_for(out).read_text())["status"] == "complete"


def test_http_backend_gets_the_per_request_timeout_natively(tmp_path):
    from balms.models.openai_http import OpenAICompatBackend
    from fake_servers import FakeOpenAIServer

    with FakeOpenAIServer(faults=["timeout"], timeout_sleep=1.0) as srv:
        http = OpenAICompatBackend("fake-model", [srv.url], timeout_s=60)  # its own timeout is long
        res = run_samples(TinyAgent(), CachedBackend(http, ResponseCache(tmp_path / "c.sqlite")), make_samples(1),
                          None, tmp_path / "r.jsonl", progress=False, timeout_s=0.3, retries=2)
        (rec,) = load_records(tmp_path / "r.jsonl")
        assert rec.error is None and rec.prediction is None and rec.raw_answer.startswith("echo:")
        assert res.session["retries"] == 1 and len(srv.requests) == 2
        http.close()


def test_remote_backend_from_registry_retries_once_not_twice(tmp_path, isolated_cache):
    from balms.models.registry import get_backend
    from fake_servers import FakeOpenAIServer

    with FakeOpenAIServer(faults=["500", "503", "ok"] + ["500"] * 10) as srv:
        b = get_backend("Qwen2.5-7B-Instruct", base_urls=[srv.url], retries=2)
        res = run_samples(TinyAgent(), b, make_samples(2), None, tmp_path / "r.jsonl", progress=False, retries=5)
        recs = load_records(tmp_path / "r.jsonl")
        # sample 1: 500, 503, then success (3 attempts); sample 2: 500 x 3 -> gave up after the backend's 3 attempts
        assert sum(r.error is None for r in recs) == 1
        failed = next(r for r in recs if r.error)
        assert "HTTP 500" in failed.error and "gave up after 3 attempts" in failed.error
        assert len(srv.requests) == 6 and res.session["model_attempts"] == 6 and res.session["retries"] == 4


# fault -> attempts it takes (a permanent error is not retried) and what the failed sample's error says
FAULTS = {"500": (2, "HTTP 500"), "timeout": (2, "deadline of 1 s"), "drip": (2, "deadline of 1 s"),
          "malformed": (2, "not JSON"), "truncated": (2, "transport error"), "missing_choices": (1, "lacks choices")}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_server_fault_is_an_error_record_never_a_stored_answer_and_the_run_goes_on(tmp_path, fault):
    """Each fault of the stand-in (500s, a hung server, a drip of one byte at a time, an HTML page, a truncated
    body, JSON without choices) on the first sample's every attempt: that sample is an error record, nothing of it
    enters the response cache, the second sample is answered, and the next run calls the failed sample again."""
    from balms.models.openai_http import OpenAICompatBackend
    from fake_servers import AnsweringOpenAIServer

    attempts, says = FAULTS[fault]
    with AnsweringOpenAIServer(faults=[fault] * attempts, timeout_sleep=3.0, drip_s=0.2) as srv:
        http = OpenAICompatBackend("fake-model", [srv.url])
        cache = ResponseCache(tmp_path / "c.sqlite")
        t0 = time.monotonic()
        run_samples(TinyAgent(), CachedBackend(http, cache), make_samples(2), None, tmp_path / "r.jsonl",
                    progress=False, timeout_s=1.0, retries=1)
        wall = time.monotonic() - t0
        first, second = load_records(tmp_path / "r.jsonl")  # concurrency 1: in sample order
        assert first.status == "error" and says in first.error and not first.raw_answer and first.prediction is None
        assert second.status == "ok" and second.prediction is not None
        assert len(srv.requests) == attempts + 1
        assert wall < attempts * (1.0 + 0.5) + 2.0  # each attempt within its deadline (+ backoff, + sample 2)
        with sqlite3.connect(tmp_path / "c.sqlite") as con:
            assert con.execute("SELECT COUNT(*) FROM responses").fetchone()[0] == 1  # only the answer
        run_samples(TinyAgent(), CachedBackend(http, cache), make_samples(2), None, tmp_path / "r.jsonl",
                    progress=False, timeout_s=1.0, retries=1)
        assert [r.status for r in load_records(tmp_path / "r.jsonl")] == ["ok", "ok"]
        assert len(srv.requests) == attempts + 2  # the failed sample called again, the answered one from the cache
        http.close()


def test_an_answer_without_a_score_is_a_parse_failure_and_the_run_goes_on(tmp_path):
    from balms.models.openai_http import OpenAICompatBackend
    from fake_servers import AnsweringOpenAIServer

    with AnsweringOpenAIServer(faults=["no_score"]) as srv:
        http = OpenAICompatBackend("fake-model", [srv.url])
        run_samples(TinyAgent(), http, make_samples(2), None, tmp_path / "r.jsonl", progress=False)
        first, second = load_records(tmp_path / "r.jsonl")
        assert first.status == "parse_failure" and first.prediction is None and first.error is None
        assert second.status == "ok" and second.prediction is not None and len(srv.requests) == 2
        http.close()


def test_a_server_dripping_one_byte_a_second_meets_the_wall_clock_deadline(tmp_path):
    """httpx's read timeout is per read: a byte a second never trips it. The deadline is wall-clock: with a 2 s
    deadline and one retry the sample is an error record within 2 x (2 s + 1 byte) + the backoff."""
    from balms.models.openai_http import OpenAICompatBackend
    from fake_servers import AnsweringOpenAIServer

    with AnsweringOpenAIServer(faults=["drip", "drip"], drip_s=1.0) as srv:
        http = OpenAICompatBackend("fake-model", [srv.url], timeout_s=600)
        t0 = time.monotonic()
        run_samples(TinyAgent(), http, make_samples(1), None, tmp_path / "r.jsonl", progress=False,
                    timeout_s=2.0, retries=1)
        wall = time.monotonic() - t0
        (rec,) = load_records(tmp_path / "r.jsonl")
        assert rec.status == "error" and "deadline of 2 s" in rec.error and len(srv.requests) == 2
        assert 4.0 <= wall < 2 * (2.0 + 1.0) + 0.5 + 1.0
        http.close()


def test_the_default_deadline_grows_with_the_output_budget():
    from balms.models.base import GenParams
    from balms.models.retrying import DEADLINE_BASE_S, call_deadline

    short, long = call_deadline(GenParams(max_tokens=16)), call_deadline(GenParams(max_tokens=8192))
    assert DEADLINE_BASE_S < short < long
