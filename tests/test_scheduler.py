"""The scheduler (balms.experiments.scheduler): the same grid on real PMData, real agents (Health-LLM, RAG, RAPTOR)
and real routing to two loopback servers gives the same records cell by cell at concurrency 1, all in flight at
two other concurrencies, and through the notebooks' path (grid.run); all in flight keeps both servers busy
at once, never above each server's slot limit; a cell already on disk is resumed, not recomputed; cells on an
embedded model run one at a time. RAPTOR's day summaries of one window go out together (even at concurrency 1)
and its records stay the same."""

from __future__ import annotations

import json
import threading
import time

import pytest

from agent_fakes import use_hash_embedder
from balms import runner
from balms.experiments.cells import adhoc_cells
from balms.experiments.config import ExperimentConfig
from balms.experiments.grid import make_cell, records_of, run
from balms.experiments.scheduler import schedule_cells
from balms.models.slots import ServerSlots
from balms.runfile import cell_records, record_content
from balms.runner import manifest_path_for
from fake_servers import AnsweringOpenAIServer

MODELS = {"Qwen2.5-7B-Instruct": "Qwen/Qwen2.5-7B-Instruct",
          "Mistral-7B-Instruct-v0.3": "mistralai/Mistral-7B-Instruct-v0.3"}
SYSTEMS = ["healthllm", "rag", "raptor"]


@pytest.fixture()
def servers():
    srvs = [AnsweringOpenAIServer(models=[mid], strict=True, latency=0.02).start() for mid in MODELS.values()]
    yield srvs
    for s in srvs:
        s.stop()


def _cfg(servers, **kw) -> ExperimentConfig:
    return ExperimentConfig(profile="sched", datasets=["pmdata"], systems=SYSTEMS, backbones=list(MODELS),
                            n_samples=3, seed=0, lookback=3, servers=[s.url for s in servers], **kw)


def _cells(cfg):
    return [make_cell(cfg, "pmdata", s, m) for m in cfg.backbones for s in cfg.systems]


def _fresh(monkeypatch, tmp_path, name):
    monkeypatch.setenv("BALMS_CACHE_DIR", str(tmp_path / name / "cache"))
    monkeypatch.setenv("BALMS_RUNS_DIR", str(tmp_path / name / "runs"))
    monkeypatch.setenv("BALMS_TABLES_CACHE", "0")


def _content(records_per_cell) -> list:
    return [sorted((record_content(r) for r in recs), key=lambda d: d["sample_id"]) for recs in records_per_cell]


def _overlap(a, b) -> bool:
    return any(s1 < e2 and s2 < e1 for s1, e1 in a for s2, e2 in b)


def _hold_until(servers, reached, *, only=lambda payload: True, timeout: float = 60.0):
    """Hold each server's requests (those `only` selects) until `reached(servers)` holds once, or `timeout`
    passes: then every request goes on. What the scheduler puts in flight together is then seen whatever the
    machine's load (a request answered before the next arrives would hide it); a scheduler that never puts them
    together waits out the timeout and fails the assertion after it."""
    latched = threading.Event()

    def hook(server, payload):
        if latched.is_set() or not only(payload):
            return
        deadline = time.monotonic() + timeout
        while not latched.is_set() and time.monotonic() < deadline:
            if reached(servers):
                latched.set()
            time.sleep(0.005)
        latched.set()

    for s in servers:
        s.on_request = hook


def _is_summary(payload) -> bool:
    return "Summarise this day" in payload["messages"][-1]["content"]


def test_same_records_cell_by_cell_and_all_in_flight_at_two_concurrencies(servers, tmp_path, monkeypatch, real_data):
    monkeypatch.setenv("BALMS_RAW_DIR", str(real_data))
    use_hash_embedder(monkeypatch)

    _fresh(monkeypatch, tmp_path, "serial")
    cfg = _cfg(servers, concurrency=1)
    for s in servers:  # each server's first two summaries seen together
        _hold_until([s], lambda ss: ss[0].in_flight >= 2, only=_is_summary)
    serial = [records_of(cfg, [c], progress=False)[0] for c in _cells(cfg)]
    assert not _overlap(servers[0].busy, servers[1].busy)  # one server at a time
    assert all(s.peak_in_flight == 2 for s in servers)  # at concurrency 1: RAPTOR's two day summaries together
    for s in servers:
        s.busy.clear()
        s.peak_in_flight = 0

    _fresh(monkeypatch, tmp_path, "wide")
    cfg = _cfg(servers, concurrency=8, server_slots=2)
    _hold_until(servers, lambda ss: all(x.in_flight >= 2 for x in ss))  # both servers full at once
    wide = schedule_cells(cfg, _cells(cfg), progress=False)
    assert wide.limits == {s.url + "/v1": 2 for s in servers}
    assert _overlap(servers[0].busy, servers[1].busy)  # both servers at work at the same time
    assert all(s.peak_in_flight <= 2 for s in servers) and max(s.peak_in_flight for s in servers) == 2

    _fresh(monkeypatch, tmp_path, "narrow")
    for s in servers:
        s.on_request = None
    cfg = _cfg(servers, concurrency=2, server_slots=1)
    cells = _cells(cfg)
    records_of(cfg, cells[:1], progress=False)  # one cell already done: resumed, nothing recomputed
    narrow = schedule_cells(cfg, cells, progress=False)
    assert narrow.results[0].n_new == 0 and narrow.results[1].n_new == 3

    # the notebooks' path (grid.run -> the scheduler), one model taken as embedded: its samples one at a time
    # (its pool has cfg.concurrency threads), the server model's cells all in flight
    _fresh(monkeypatch, tmp_path, "grid")
    cfg = _cfg(servers, concurrency=1, server_slots=2)
    local = MODELS["Mistral-7B-Instruct-v0.3"]
    qwen = MODELS["Qwen2.5-7B-Instruct"]
    real_kind = ExperimentConfig.backend_kind
    monkeypatch.setattr(ExperimentConfig, "backend_kind", lambda cfg, model: "llamacpp" if MODELS.get(model) == local
                        else real_kind(cfg, model))
    inside = {m: 0 for m in MODELS.values()}  # samples of each model inside predict now, and the most at once
    most = dict(inside)
    lock = threading.Lock()
    qwen_all_in = threading.Event()
    predict = runner._predict

    def counted(agent, backend, sample, tables):
        m = backend.model_id
        with lock:
            inside[m] += 1
            most[m] = max(most[m], inside[m])
            if most[qwen] == 3:
                qwen_all_in.set()
        try:
            if m == qwen:  # one sample of each of the three Qwen cells in flight together (or give up)
                qwen_all_in.wait(60)
            return predict(agent, backend, sample, tables)
        finally:
            with lock:
                inside[m] -= 1

    monkeypatch.setattr(runner, "_predict", counted)
    df = run(cfg, adhoc_cells(cfg))
    assert len(df) == 18 and (df["status"] != "error").all()
    grid = [cell_records(c.spec.run_path(cfg.runs_root()), c) for c in _cells(cfg)]
    for c in _cells(cfg):
        manifest = json.loads(manifest_path_for(c.spec.run_path(cfg.runs_root())).read_text())
        assert manifest["agent"]["class"].startswith("balms.agents.")  # the agent's class, not a wrapper's
    assert most[local] == 1  # the embedded model: one sample at a time at concurrency 1
    assert most[qwen] == 3  # the server model's cells all in flight

    assert all(len(recs) == 3 for recs in serial)
    assert sum(r.prediction is not None for recs in serial for r in recs) == 18  # parseable answers
    assert _content(wide.records) == _content(serial)
    assert _content(narrow.records) == _content(serial)
    assert _content(grid) == _content(serial)


def test_slots_hold_each_server_to_its_limit_and_pause_on_retry_after():
    import threading
    import time

    slots = ServerSlots()
    slots.set_limit("u1", 2)
    taken = [slots.take(["u1"]) for _ in range(2)]
    got = []
    t = threading.Thread(target=lambda: got.append(slots.take(["u1", "u2"])))
    t.start()
    t.join(30)
    assert got == ["u2"] and taken == ["u1", "u1"]  # u1 full: the unlimited u2 is taken
    slots.set_limit("u2", 1)
    waiter = threading.Thread(target=lambda: got.append(slots.take(["u1", "u2"])))
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive()  # both full: waits
    t0 = time.monotonic()
    slots.pause("u1", 0.3)
    slots.give("u1")
    waiter.join(30)
    assert got[-1] == "u1" and time.monotonic() - t0 >= 0.3  # freed, but paused by retry-after first
    assert slots.peak == {"u1": 2, "u2": 1}


def test_run_puts_several_notebooks_cells_in_one_scheduler(servers, tmp_path, monkeypatch, real_data,
                                                                     capsys):
    """`balms run --notebooks 01_prediction,02_cot`: 02's zero-shot cells are 01's (run once), its CoT cells run
    beside them; the records land in the profile's runs, where the notebooks read them."""
    from balms.cli import main

    monkeypatch.setenv("BALMS_RAW_DIR", str(real_data))
    _fresh(monkeypatch, tmp_path, "cli")
    urls = ",".join(s.url for s in servers)
    overrides = (f"-p datasets [pmdata] -p systems [healthllm] -p backbones [{','.join(MODELS)}] -p servers [{urls}] "
                 "-p n_samples 2 -p lookback 3 -p cot_systems [healthllm] -p concurrency 4")
    assert main(["run", "--notebooks", "01_prediction,02_cot", "--config", "demo", "--set", overrides,
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["profile"] == "demo" and out["records"] == 12  # 01: 2 cells; 02: the same 2 + 2 CoT cells; x 2
    runs = sorted(p.name for p in (tmp_path / "cli" / "runs" / "demo" / "pmdata").glob("*.jsonl"))
    assert len(runs) == 4 and sum("__cot__" in r for r in runs) == 2
    assert sum(len(s.requests) for s in servers) == 8  # each of the 4 cells' 2 samples called once
    with pytest.raises(SystemExit, match="unknown notebook"):
        main(["run", "--notebooks", "01_predictoin", "--config", "demo", "--set", overrides])


def test_ranked_pool_runs_the_best_rank_first_and_hands_back_errors():
    """The pool (balms.threads.Pool: a grid's samples, RAPTOR's day summaries) runs the best rank first, whatever
    the order of submission; a task's exception reaches whoever waits on it."""
    import threading

    from balms.threads import Pool

    pool = Pool(1, "t")
    gate, ran = threading.Event(), []
    blocker = pool.submit(0, gate.wait, 30)
    futures = [pool.submit(rank, ran.append, rank) for rank in (5, 1, 3)]
    failing = pool.submit(9, lambda: 1 / 0)
    gate.set()
    assert blocker.result(30) is True
    for f in futures:
        f.result(30)
    assert ran == [1, 3, 5]
    with pytest.raises(ZeroDivisionError):
        failing.result(30)


def test_a_pool_closed_with_tuple_ranked_tasks_queued_runs_them_then_ends():
    """A run stopped mid-grid closes its pools with samples still queued under the scheduler's tuple ranks: the end
    marks (once a float rank) failed to compare with them and every thread died with a TypeError."""
    import threading

    from balms.threads import Pool

    died = []
    old_hook, threading.excepthook = threading.excepthook, lambda a: died.append(a.exc_value)
    try:
        pool = Pool(2, "t")
        gate = threading.Event()
        futures = [pool.submit((0, k, 1), gate.wait, 30) for k in range(6)]
        pool.close()
        gate.set()
        assert [f.result(30) for f in futures] == [True] * 6
        for t in pool.threads:
            t.join(30)
        assert not died and not any(t.is_alive() for t in pool.threads)
    finally:
        threading.excepthook = old_hook


def test_submit_once_shares_a_queued_or_running_task_and_forgets_it_once_done():
    """RAPTOR's day summaries: a user's samples in flight together need the same days. Each held a pool thread
    blocked on the first sample's call, so a full summary pool kept its servers underfed (issue 36's bench-scale
    diagnosis). submit_once gives the second asker the first's future."""
    import threading

    from balms.threads import Pool

    pool = Pool(1, "t")
    gate, calls = threading.Event(), []

    def work(x):
        calls.append(x)
        gate.wait(30)
        return x

    first, mine = pool.submit_once("day-1", 0, work, "a")
    again, mine_again = pool.submit_once("day-1", 0, work, "b")
    other, mine_other = pool.submit_once("day-2", 0, work, "c")
    assert (mine, mine_again, mine_other) == (True, False, True) and again is first and other is not first
    gate.set()
    assert first.result(30) == "a" and other.result(30) == "c"
    later, mine_later = pool.submit_once("day-1", 0, work, "d")  # done: a new task
    assert mine_later and later.result(30) == "d" and calls == ["a", "c", "d"]
    pool.close()


def test_each_model_has_its_own_summary_pool():
    """One pool per model: a slow model's day summaries never queue behind a fast model's (issue 27)."""
    from balms.agents.raptor import summary_pool

    assert summary_pool("bench/model-a") is summary_pool("bench/model-a")
    assert summary_pool("bench/model-a") is not summary_pool("bench/model-b")




def _cache_rows(root) -> int:
    import sqlite3

    n = 0
    for p in root.rglob("*.sqlite"):
        with sqlite3.connect(p) as con:
            if con.execute("SELECT 1 FROM sqlite_master WHERE name='responses'").fetchone():
                n += con.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
    return n


def test_a_stopped_run_starts_none_of_its_queued_samples_after_it_returns():
    """A failed job stops the run: drive raises, and the samples still queued on its pool never start, even though
    the process-wide STOP is cleared for later calls (a notebook's next cell); it had let them all start."""
    from balms.models.slots import STOP, drive
    from balms.threads import Pool

    pool, started = Pool(2, "balms-test"), []

    def job(i):  # the others outlast the stop's grace period, so samples are still queued when drive returns
        started.append((i, time.monotonic()))
        if i == 0:
            raise RuntimeError("the first sample fails")
        time.sleep(1.5)

    with pytest.raises(RuntimeError, match="first sample"):
        drive(((pool, i, job, i) for i in range(20)), lambda rec: None)
    returned = time.monotonic()
    time.sleep(2.0)
    pool.close()
    assert not STOP.is_set()  # later calls go on
    assert [i for i, t in started if t > returned] == [] and len(started) < 20


def test_ctrl_c_stops_a_grid_within_two_seconds_keeping_every_finished_record(tmp_path, monkeypatch, real_data):
    """Issue 36: SIGINT to `balms run` (the scheduler's path) on a slow server (1 s a call, 4 in flight): the
    process exits within 2 s, no request leaves after the signal, every answer received before it is a record on
    disk, and the next run makes only the calls whose answers are not in the cache."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    from balms.experiments.config import load
    from balms.runner import load_records

    model, mid = "Qwen2.5-7B-Instruct", MODELS["Qwen2.5-7B-Instruct"]
    _fresh(monkeypatch, tmp_path, "sigint")
    monkeypatch.setenv("BALMS_RAW_DIR", str(real_data))
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    with AnsweringOpenAIServer(models=[mid], strict=True, latency=1.0) as srv:
        proc = subprocess.Popen([sys.executable, "-m", "balms.cli", "run", "--dataset", "pmdata", "--system",
                                 "healthllm", "--model", model, "--n", "40", "--lookback", "3", "--concurrency", "4",
                                 "--profile", "sigint", "--set", f"-p servers [{srv.url}] -p server_slots 4"],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                # a runner started in the background inherits SIGINT ignored (so the child would
                                # run to the end, as a local clean-clone CI once did): Ctrl-C's default, as typed
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        deadline = time.monotonic() + 180
        while len(srv.busy) < 8 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert len(srv.busy) >= 8, proc.communicate()[1][-2000:]
        t_sig = time.monotonic()
        proc.send_signal(signal.SIGINT)
        err = proc.communicate(timeout=30)[1].decode(errors="replace")
        took = time.monotonic() - t_sig
        answered = sum(end < t_sig - 0.2 for _, end in srv.busy)  # answers the client had before the signal
        late = [a for a in srv.arrivals if a > t_sig + 0.05]
        assert took < 2.0 and proc.returncode == 130, (took, proc.returncode, err[-2000:])
        assert late == []  # no request (so no sample) started after the signal
        (path,) = (tmp_path / "sigint" / "runs").rglob("*.jsonl")
        kept = load_records(path)
        assert len(kept) >= answered and len(kept) < 40 and all(r.status == "ok" for r in kept)
        cached, before = _cache_rows(tmp_path / "sigint" / "cache"), len(srv.requests)
        assert cached >= len(kept)

        srv.latency = 0.0
        cfg = load("demo", n_samples=40, concurrency=4, server_slots=4, servers=[srv.url]).replace(profile="sigint")
        again = schedule_cells(cfg, [make_cell(cfg, "pmdata", "healthllm", model, lookback=3)], progress=False)
        assert len(again.records[0]) == 40 and len(srv.requests) - before == 40 - cached  # only the missing calls


def test_the_judge_phase_keeps_its_server_at_its_concurrency_limit(tmp_path, monkeypatch):
    """Issue 36: the judge sent one request at a time, then one cell at a time (a cell's few rationales against
    judge servers of hundreds of slots). Now every cell's rationales go through one loop
    (balms.judges.loop.judge_files, as `judge_grid` calls it) with as many in flight as the judge's servers have
    slots (judge_concurrency): four cells of 3 rationales keep a 6-slot server at 6, never above, and each cell's
    verdicts land in its own file in its records' order."""
    from balms.experiments.judging import judge_concurrency
    from balms.judges.loop import judge_files
    from balms.models.openai_http import OpenAICompatBackend
    from balms.models.registry import resolve_spec
    from balms.records import PredictionRecord

    _fresh(monkeypatch, tmp_path, "judge")
    from balms.experiments.config import load

    judge_model = load("paper").judge_model  # the 70B judge, served over HTTP
    mid = resolve_spec(judge_model, []).model_id
    with AnsweringOpenAIServer(models=[mid], strict=True, latency=0.2) as srv:
        cfg = ExperimentConfig(profile="judge", servers=[srv.url], server_slots=6)
        assert judge_concurrency(cfg, judge_model) == 6
        cells = [[PredictionRecord(sample_id=f"globem/u{c}/2018-05-{i:02d}/L3", dataset="globem", user=f"u{c}",
                                   target_date=f"2018-05-{i:02d}", lookback=3, label=0, source="real",
                                   system="healthllm", cot=True, model="m", model_id="m", prediction=2,
                                   rationale="Steps fell.") for i in range(1, 4)] for c in range(4)]
        http = OpenAICompatBackend(mid, [srv.url])
        _hold_until([srv], lambda ss: ss[0].in_flight >= 6)
        files = [(tmp_path / f"cell{c}.judge.jsonl", recs, {r.sample_id: "WINDOW" for r in recs})
                 for c, recs in enumerate(cells)]
        out = judge_files(files, http, judge_model=judge_model, key="k", concurrency=6, mode="paper")
        assert [[v["sample_id"] for v in vs] for vs in out] == [[r.sample_id for r in rs] for rs in cells]
        assert srv.peak_in_flight == 6  # at its limit across cells, never above
        assert [len(p.read_text().splitlines()) for p, _, _ in files] == [3] * 4
        http.close()


def test_a_cell_another_process_holds_is_run_after_the_others_not_waited_for_first(servers, tmp_path, monkeypatch,
                                                                                  real_data):
    """Two notebooks at once share cells: the second process runs its own cells while the first holds the shared
    one, then picks the shared one up (already done: nothing recomputed) once its lock is free."""
    import fcntl

    monkeypatch.setenv("BALMS_RAW_DIR", str(real_data))
    use_hash_embedder(monkeypatch)
    _fresh(monkeypatch, tmp_path, "locks")
    cfg = _cfg(servers, concurrency=2)
    mine, shared = _cells(cfg)[:2]  # Qwen's Health-LLM and RAG cells
    shared_path = shared.spec.run_path(cfg.runs_root())
    records_of(cfg, [shared], progress=False)  # the other process's work, on disk
    shared_path.parent.mkdir(parents=True, exist_ok=True)
    holder = open(shared_path.with_name(shared_path.name + ".lock"), "a+")  # a second open file: another holder
    fcntl.flock(holder, fcntl.LOCK_EX)
    out = {}
    t = threading.Thread(target=lambda: out.update(r=schedule_cells(cfg, [shared, mine], progress=False)), daemon=True)
    t.start()
    mine_path = mine.spec.run_path(cfg.runs_root())
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(cell_records(mine_path, mine)) < 3:
        time.sleep(0.05)
    assert len(cell_records(mine_path, mine)) == 3  # its own cell finished while the shared one stayed locked
    assert t.is_alive()  # and it waits for the shared cell's lock
    fcntl.flock(holder, fcntl.LOCK_UN)
    holder.close()
    t.join(60)
    assert not t.is_alive()
    rep = out["r"]
    assert [len(r) for r in rep.records] == [3, 3] and rep.results[0].n_new == 0 and rep.results[1].n_new == 3


def test_embeddings_are_computed_once_ahead_while_the_other_samples_calls_go_on(servers, tmp_path, monkeypatch,
                                                                               real_data):
    """Issue 36: retrieval samples embedded on the client while the fleet waited, each backbone's cell embedding
    the same texts again. The scheduler's embedding stage embeds each RAG sample's texts once for both backbones'
    cells, and Health-LLM's calls reach the servers while the (slow) embedder still works."""
    from agent_fakes import HashEmbedder
    from balms.agents import embeddings

    monkeypatch.setenv("BALMS_RAW_DIR", str(real_data))
    encoded: list[str] = []
    spans: list[tuple[float, float]] = []

    class Slow(HashEmbedder):
        def encode(self, texts, **kw):
            t0 = time.monotonic()
            time.sleep(0.3)
            encoded.extend(texts)
            spans.append((t0, time.monotonic()))
            return super().encode(texts, **kw)

    monkeypatch.setattr(embeddings, "load_embedder", lambda name=embeddings.DEFAULT_EMBEDDER: Slow())
    _fresh(monkeypatch, tmp_path, "embed")
    cfg = _cfg(servers, concurrency=8, server_slots=4).replace(systems=["healthllm", "rag"])
    rep = schedule_cells(cfg, _cells(cfg), progress=False)
    assert all(len(recs) == 3 and all(r.status == "ok" for r in recs) for recs in rep.records)
    import sqlite3

    with sqlite3.connect(tmp_path / "embed" / "cache" / "embeddings.sqlite") as con:
        (stored,) = con.execute("SELECT COUNT(*) FROM embeddings").fetchone()
    assert 0 < len(encoded) == stored  # every (key, text) embedded once, for both backbones' cells
    rag = [r for recs in rep.records for r in recs if r.system == "rag"]
    assert rag and all(r.latency_s >= 0.3 for r in rag)  # the embedding done ahead still counts in its latency
    first_call = min(start for s in servers for start, _ in s.busy)
    assert first_call < spans[-1][1]  # calls went out while the embedder still worked
