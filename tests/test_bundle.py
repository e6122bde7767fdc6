"""Responses travel: the subset of the cache a profile used is exported deterministically, imported on a
fresh cache, and replays the same records with zero model calls; regenerated tables are compared with the
committed ones, latency aside."""

from __future__ import annotations

import gzip

import pandas as pd
import pytest

from balms import bundle
from balms.data.schema import DataError
from balms.models.cache import CachedBackend, ResponseCache
from balms.runner import load_records, run_samples
from fake_servers import FakeBackend, TinyAgent, make_samples


class NeverCalled(FakeBackend):
    def generate(self, messages, params):  # pragma: no cover - failing is the point
        raise AssertionError("a replay must not call the model")


def test_export_import_replay_round_trip(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    monkeypatch.setenv("BALMS_RUNS_DIR", str(runs))
    samples = make_samples(5)
    other = ResponseCache(tmp_path / "c1" / "responses.sqlite")
    CachedBackend(FakeBackend(), other).generate(*_unrelated())  # other traffic in the same cache: not exported
    monkeypatch.setenv("BALMS_CACHE_JOURNAL", str(bundle.journal_path("p")))
    out1 = runs / "p" / "pmdata" / "run.jsonl"
    run_samples(TinyAgent(n_calls=2), CachedBackend(FakeBackend(), other), samples, None, out1, progress=False)
    other.close()
    f = tmp_path / "responses.jsonl.gz"
    info = bundle.export_responses("p", f, cache_dir=tmp_path / "c1")
    assert info["responses"] == 10  # 5 samples x 2 calls, the unrelated call left out
    again = bundle.export_responses("p", tmp_path / "again.jsonl.gz", cache_dir=tmp_path / "c1")
    assert again["sha256"] == info["sha256"]  # deterministic bytes

    monkeypatch.delenv("BALMS_CACHE_JOURNAL")
    assert bundle.import_responses(f, cache_dir=tmp_path / "c2")["responses"] == 10
    fresh = ResponseCache(tmp_path / "c2" / "responses.sqlite")
    out2 = tmp_path / "replay.jsonl"
    run_samples(TinyAgent(n_calls=2), CachedBackend(NeverCalled(), fresh, mode="replay"), samples, None, out2,
                progress=False)
    a = [r.model_dump(exclude={"wall_s", "latency_s"}) for r in load_records(out1)]
    b = [r.model_dump(exclude={"wall_s", "latency_s"}) for r in load_records(out2)]
    assert sorted(a, key=lambda r: r["sample_id"]) == sorted(b, key=lambda r: r["sample_id"])


def _unrelated():
    from balms.models.base import GenParams, Message

    return [Message("user", "unrelated")], GenParams(max_tokens=4)


def test_corrupt_file_is_refused_with_the_line(tmp_path):
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_bytes(gzip.compress(b'{"format": "balms-responses/1"}\n{"table": "responses", "key": 1}\n'))
    with pytest.raises(DataError, match=r"bad\.jsonl\.gz.*row 2"):
        bundle.import_responses(bad, cache_dir=tmp_path / "c")
    (tmp_path / "plain.txt").write_text("hello")
    with pytest.raises(DataError, match="gzip"):
        bundle.import_responses(tmp_path / "plain.txt", cache_dir=tmp_path / "c")


def test_compare_tables_sets_latency_aside_and_catches_real_changes(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    t = pd.DataFrame({"system": ["rag"], "mae": [0.5], "mean_latency_s": [3.2]})
    t.to_csv(tmp_path / "a" / "cells.csv", index=False)
    t.assign(mean_latency_s=9.9).to_csv(tmp_path / "b" / "cells.csv", index=False)
    assert bundle.compare_tables(tmp_path / "b", tmp_path / "a") == []
    t.assign(mae=0.6).to_csv(tmp_path / "b" / "cells.csv", index=False)
    assert bundle.compare_tables(tmp_path / "b", tmp_path / "a")[0].startswith("cells.csv")
    (tmp_path / "a" / "extra.csv").write_text("x\n1\n")
    assert any("not regenerated" in p for p in bundle.compare_tables(tmp_path / "b", tmp_path / "a"))
