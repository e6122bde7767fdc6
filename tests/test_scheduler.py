"""The scheduler (balms.experiments.scheduler): the same grid on real PMData, real agents (Health-LLM, RAG, RAPTOR)
and real routing to two loopback servers gives the same records cell by cell at concurrency 1, all in flight at
two other concurrencies, and through the notebooks' path (grid.run_cells); all in flight keeps both servers busy
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
from balms.experiments import scheduler
from balms.experiments.config import ExperimentConfig
from balms.experiments.grid import make_cell, run_cell_spec, run_grid
from balms.experiments.scheduler import cell_records, interleave, record_content, run_cells
from balms.models.slots import ServerSlots
from balms.runner import manifest_path_for, run_samples
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
    serial = [run_cell_spec(cfg, c, progress=False) for c in _cells(cfg)]
    assert not _overlap(servers[0].busy, servers[1].busy)  # one server at a time
    assert all(s.peak_in_flight == 2 for s in servers)  # at concurrency 1: RAPTOR's two day summaries together
    for s in servers:
        s.busy.clear()
        s.peak_in_flight = 0

    _fresh(monkeypatch, tmp_path, "wide")
    cfg = _cfg(servers, concurrency=8, server_slots=2)
    _hold_until(servers, lambda ss: all(x.in_flight >= 2 for x in ss))  # both servers full at once
    wide = run_cells(cfg, _cells(cfg), progress=False)
    assert wide.limits == {s.url + "/v1": 2 for s in servers}
    assert _overlap(servers[0].busy, servers[1].busy)  # both servers at work at the same time
    assert all(s.peak_in_flight <= 2 for s in servers) and max(s.peak_in_flight for s in servers) == 2

    _fresh(monkeypatch, tmp_path, "narrow")
    for s in servers:
        s.on_request = None
    cfg = _cfg(servers, concurrency=2, server_slots=1)
    cells = _cells(cfg)
    run_cell_spec(cfg, cells[0], progress=False)  # one cell already done: resumed, nothing recomputed
    narrow = run_cells(cfg, cells, progress=False)
    assert narrow.results[0].n_new == 0 and narrow.results[1].n_new == 3

    # the notebooks' path (grid.run_cells -> the scheduler), one model taken as embedded: its cells one at a time
    _fresh(monkeypatch, tmp_path, "grid")
    cfg = _cfg(servers, concurrency=4, server_slots=2)
    local = "Mistral-7B-Instruct-v0.3"
    monkeypatch.setattr(scheduler, "_is_local", lambda cfg, cell: cell.spec.model == local)
    inside = {m: 0 for m in MODELS}  # cells of each model inside run_samples now, and the most at once
    most = dict(inside)
    lock = threading.Lock()
    qwen_all_in = threading.Event()

    def timed(agent, backend, *a, spec, **kw):
        with lock:
            inside[spec.model] += 1
            most[spec.model] = max(most[spec.model], inside[spec.model])
            if most["Qwen2.5-7B-Instruct"] == 3:
                qwen_all_in.set()
        try:
            if spec.model == "Qwen2.5-7B-Instruct":  # all three Qwen cells in flight together (or give up)
                qwen_all_in.wait(60)
            return run_samples(agent, backend, *a, spec=spec, **kw)
        finally:
            with lock:
                inside[spec.model] -= 1

    monkeypatch.setattr(runner, "run_samples", timed)
    df = run_grid(cfg)
    assert len(df) == 18 and (df["status"] != "error").all()
    grid = [cell_records(c.spec.run_path(cfg.runs_root()), c) for c in _cells(cfg)]
    for c in _cells(cfg):
        manifest = json.loads(manifest_path_for(c.spec.run_path(cfg.runs_root())).read_text())
        assert manifest["agent"]["class"].startswith("balms.agents.")  # the agent's class, not the gate's
    assert most[local] == 1  # the embedded model's cells one at a time
    assert most["Qwen2.5-7B-Instruct"] == 3  # the server model's cells all in flight

    assert all(len(recs) == 3 for recs in serial)
    assert sum(r.prediction is not None for recs in serial for r in recs) == 18  # parseable answers
    assert _content(wide.records) == _content(serial)
    assert _content(narrow.records) == _content(serial)
    assert _content(grid) == _content(serial)


def test_interleave_alternates_models_in_first_seen_order():
    cells = ["a1", "a2", "a3", "b1", "c1", "c2"]
    assert [cells[i] for i in interleave(cells, key=lambda c: c[0])] == ["a1", "b1", "c1", "a2", "c2", "a3"]


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


def test_a_freed_slot_goes_to_the_oldest_samples_call_and_no_newcomer_takes_it():
    import threading
    import time

    from balms.models.slots import priority

    slots = ServerSlots()
    slots.set_limit("u", 1)
    slots.take(["u"])
    order = []

    def call(rank):
        with priority(rank):
            slots.take(["u"])
        order.append(rank)

    late = threading.Thread(target=call, args=(7,))  # a later sample's call, waiting first
    late.start()
    while not slots._waiters:
        time.sleep(0.01)
    early = threading.Thread(target=call, args=(2,))  # an older sample's call (e.g. RAPTOR's final answer)
    early.start()
    while len(slots._waiters) < 2:
        time.sleep(0.01)
    slots.give("u")
    assert slots.in_flight("u") == 1  # handed over at once: a call arriving now finds it taken
    early.join(30)
    assert order == [2] and late.is_alive()
    slots.give("u")
    late.join(30)
    assert order == [2, 7] and slots.peak == {"u": 1}


def test_run_notebooks_puts_several_notebooks_cells_in_one_scheduler(servers, tmp_path, monkeypatch, real_data,
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


def test_admission_lets_multi_call_samples_in_first_then_arrival_order():
    import threading

    from balms.experiments.scheduler import Admission

    adm = Admission()
    adm.set_limit("m", 1)
    order = []
    hold = adm.admitted("m", 1)
    hold.__enter__()  # the one place is taken

    def sample(name, priority):
        with adm.admitted("m", priority):
            order.append(name)

    threads = []
    for name, prio in [("single-1", 1), ("single-2", 1), ("raptor", 0)]:
        t = threading.Thread(target=sample, args=(name, prio))
        t.start()
        threads.append(t)
        while len(adm._waiting["m"]) < len(threads):  # queued before the next arrives
            time.sleep(0.001)
    hold.__exit__(None, None, None)
    for t in threads:
        t.join(30)
    assert order == ["raptor", "single-1", "single-2"]


def test_slots_serve_waiters_in_arrival_order_and_pools_start_their_threads():
    import threading

    from balms.threads import started_pool

    slots = ServerSlots()
    slots.set_limit("u", 1)
    first = slots.take(["u"])
    got = []

    def waiter(i):
        got.append((i, slots.take(["u"])))
        slots.give("u")

    threads = []
    for i in range(20):
        t = threading.Thread(target=waiter, args=(i,))
        t.start()
        threads.append(t)
        while len(slots._waiters) < i + 1:  # queued before the next arrives
            time.sleep(0.001)
    slots.give(first)
    for t in threads:
        t.join(30)
    assert [i for i, _ in got] == list(range(20)) and slots.peak == {"u": 1}

    pool = started_pool(12, "t")
    assert len(pool._threads) == 12 and all(t.is_alive() for t in pool._threads)
    assert pool.submit(lambda: 7).result() == 7 and len(pool._threads) == 12  # an idle thread took it
    pool.shutdown()


def test_lanes_batch_only_claudes_single_call_cells_one_at_a_time():
    """With anthropic_batch, Claude's Health-LLM and RAG cells share one lane (one batch at a time); its RAPTOR and
    PHIA cells (direct calls) are lanes of their own beside the servers' cells; embedded models share a lane."""
    from types import SimpleNamespace

    from balms.experiments.scheduler import plan_lanes

    def cell(system, model):
        return SimpleNamespace(spec=SimpleNamespace(system=system, model=model))

    systems = ["healthllm", "rag", "raptor", "phia"]
    cells = ([cell(s, "Claude-Haiku-4.5") for s in systems] + [cell(s, "Qwen2.5-7B-Instruct") for s in systems]
             + [cell(s, "qwen2.5-coder-0.5b") for s in systems[:2]])
    cfg = ExperimentConfig(profile="lanes", anthropic_batch=True)
    todo = list(range(len(cells)))
    assert plan_lanes(cfg, cells, todo) == [[0, 1], [2], [3], [4], [5], [6], [7], [8, 9]]
    assert plan_lanes(cfg.replace(anthropic_batch=False), cells, todo) == [[i] for i in range(8)] + [[8, 9]]


def test_turns_go_best_rank_first_and_a_sample_gives_its_turn_back_at_its_first_wait():
    """The client's CPU in turns (balms.models.slots.Turns): with one turn, samples queued with ranks 5, 3, 9 get it
    in the order 3, 5, 9, each as soon as the holder reaches its first wait (a model call), not when it ends."""
    import threading
    import time

    from balms.models.slots import Turns, waiting

    turns = Turns(1)
    order, first_waits, finish = [], threading.Event(), threading.Event()

    def sample(rank):
        with turns.turn(rank):
            order.append(rank)
            waiting()  # its first model call: the next sample's turn starts now
            waiting()  # a second wait gives nothing back twice
            finish.wait(30)  # the rest of the sample (its call in flight) runs without a turn

    holder = threading.Thread(target=sample, args=(0,))
    with turns.turn(-1):  # hold the only turn while the others queue
        holder.start()
        while not turns._waiting:
            time.sleep(0.01)
        threads = []
        for r in (5, 3, 9):
            t = threading.Thread(target=sample, args=(r,))
            t.start()
            threads.append(t)
            while len(turns._waiting) < len(threads) + 1:
                time.sleep(0.01)
        first_waits.set()
    deadline = time.monotonic() + 30
    while len(order) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert order == [0, 3, 5, 9]  # all four hold no turn while they wait: none waited for another to end
    finish.set()
    for t in [holder, *threads]:
        t.join(30)
    assert turns._free == 1 and not turns._waiting
    waiting()  # outside a turn: nothing to give back


def test_ranked_pool_runs_the_best_rank_first_and_hands_back_errors():
    """RAPTOR's day summaries (balms.threads.RankedPool): the oldest sample's queued summaries run before a newer
    sample's, whatever the order they were submitted in; a task's exception reaches whoever waits on it."""
    import threading

    from balms.threads import RankedPool

    pool = RankedPool(1, "t")
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


def test_each_model_has_its_own_summary_pool():
    """One pool per model: a slow model's day summaries never queue behind a fast model's (issue 27)."""
    from balms.agents.raptor import summary_pool

    assert summary_pool("bench/model-a") is summary_pool("bench/model-a")
    assert summary_pool("bench/model-a") is not summary_pool("bench/model-b")
