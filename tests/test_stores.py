"""Every SQLite store is safe under concurrent first use: many threads open an EMPTY store at the same instant (each
its own connection, as separate processes would), then write and read; none fails and every write is there. The
RAPTOR summary cache once failed here with `duplicate column name` (issue 27). Tables cache: test_tables_cache.py."""

from __future__ import annotations

import sqlite3
import threading

from balms.agents.embeddings import EmbeddingStore, _sha
from balms.agents.raptor import SummaryCache
from balms.models.anthropic_batch import BatchStore
from balms.models.base import Completion
from balms.models.cache import ResponseCache
from balms.stores import one_per_key

N_THREADS = 32


def _together(fn) -> list:
    """Run fn(i) in N_THREADS threads released at once; re-raise the first failure."""
    barrier = threading.Barrier(N_THREADS)
    out: list = [None] * N_THREADS
    errors: list = []

    def run(i):
        try:
            barrier.wait()
            out[i] = fn(i)
        except BaseException as exc:  # noqa: BLE001 - collected and re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(N_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    if errors:
        raise errors[0]
    return out


def test_summary_cache_first_use_by_many_threads(tmp_path):
    path = tmp_path / "raptor_summaries.sqlite"

    def use(i):
        c = SummaryCache(path)
        c.put(("pmdata", "p01", f"2019-11-{i:02d}", "m", "sha"), f"summary {i}",
              {"prompt_tokens": i, "completion_tokens": 1, "latency_s": 0.5})
        return c

    caches = _together(use)
    got = caches[0].get(("pmdata", "p01", "2019-11-07", "m", "sha"))
    assert got == ("summary 7", {"prompt_tokens": 7, "completion_tokens": 1, "latency_s": 0.5})
    assert sum(caches[0].get(("pmdata", "p01", f"2019-11-{i:02d}", "m", "sha")) is not None
               for i in range(N_THREADS)) == N_THREADS


def test_summary_cache_written_before_usage_columns_migrates_once_under_concurrency(tmp_path):
    path = tmp_path / "old.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE summaries (dataset TEXT, user TEXT, day TEXT, model_id TEXT, leaves_sha TEXT, "
                "summary TEXT, PRIMARY KEY (dataset, user, day, model_id, leaves_sha))")
    con.execute("INSERT INTO summaries VALUES ('pmdata','p01','2019-11-01','m','sha','old text')")
    con.commit()
    con.close()
    caches = _together(lambda i: SummaryCache(path))
    assert caches[0].get(("pmdata", "p01", "2019-11-01", "m", "sha")) == ("old text", None)  # usage unknown
    cols = [r[1] for r in sqlite3.connect(path).execute("PRAGMA table_info(summaries)")]
    assert cols[-3:] == list(SummaryCache.USAGE)


def test_response_cache_first_use_by_many_threads(tmp_path):
    path = tmp_path / "responses.sqlite"

    def use(i):
        c = ResponseCache(path)
        c.put(f"k{i}", {"model_id": "m"}, Completion(text=f"t{i}", model_id="m"))
        return c

    caches = _together(use)
    assert len(caches[0]) == N_THREADS
    assert caches[-1].get("k3").text == "t3"


def test_embedding_store_first_use_by_many_threads(tmp_path):
    path = tmp_path / "embeddings.sqlite"

    def use(i):
        s = EmbeddingStore(db_path=path)
        with s._lock:
            s._con.execute("INSERT INTO embeddings VALUES (?,?,?,?,?)", ("m", f"k{i}", "sha", 1, b"\0\0\0\0"))
            s._con.commit()
        return s

    stores = _together(use)
    assert stores[0]._con.execute("SELECT COUNT(*) FROM embeddings").fetchone()[0] == N_THREADS


def test_batch_store_first_use_by_many_threads(tmp_path):
    path = tmp_path / "anthropic_batches.sqlite"
    stores = _together(lambda i: BatchStore(path))
    stores[0].record_batch("b1", "m", ["c1", "c2"])
    assert stores[-1]._con.execute("SELECT COUNT(*) FROM requests").fetchone()[0] == 2


def test_one_per_key_builds_one_object_per_key_under_concurrency():
    built = []

    @one_per_key
    def make(key):
        built.append(key)
        return object()

    objs = _together(lambda i: make("a" if i % 2 else "b"))
    assert sorted(built) == ["a", "b"]
    assert len({id(o) for o in objs}) == 2


def test_reads_never_wait_behind_a_write(tmp_path):
    """The summary, embedding and response stores read through their own WAL connections (balms.stores.Readers): a
    read of a stored row returns while another thread holds the store's write lock (with all cells in flight, 150
    samples once queued on the embedding store's lock behind its writes: issue 27)."""
    import numpy as np

    summaries = SummaryCache(tmp_path / "s.sqlite")
    summaries.put(("pmdata", "p01", "2019-11-01", "m", "sha"), "text", None)
    summaries._memory.clear()  # a row this process has not read yet: the read goes to SQLite
    embeddings = EmbeddingStore("hash", tmp_path / "e.sqlite")
    embeddings._con.execute("INSERT INTO embeddings VALUES (?,?,?,?,?)",
                            ("hash", "k", _sha("leaf"), 2,
                             np.array([1, 0], dtype=np.float32).tobytes()))
    embeddings._con.commit()
    responses = ResponseCache(tmp_path / "r.sqlite")
    responses.put("key", {"model_id": "m"}, Completion(text="hi", model_id="m"))
    got = {}
    reads = {"summary": lambda: summaries.get(("pmdata", "p01", "2019-11-01", "m", "sha")),
             "embedding": lambda: embeddings.embed([("k", "leaf")]).tolist(),
             "response": lambda: responses.get("key").text}
    with summaries._lock, embeddings._lock, responses._lock:  # a writer of each store in the middle of a write
        threads = [threading.Thread(target=lambda k=k, f=f: got.__setitem__(k, f())) for k, f in reads.items()]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert not any(t.is_alive() for t in threads), f"a read waited behind the write lock: {got}"
    assert got == {"summary": ("text", None), "embedding": [[1.0, 0.0]], "response": "hi"}
