"""Responses travel: the subset of the cache a profile used is exported deterministically, imported on a
fresh cache, and replays the same records with zero model calls; regenerated tables are compared with the
committed ones, latency aside."""

from __future__ import annotations

import gzip
import json

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
    pd.DataFrame({"path": ["tables/cells.csv"]}).to_csv(tmp_path / "a" / "index.csv", index=False)
    probs = bundle.compare_tables(tmp_path / "b", tmp_path / "a")
    assert [p.split(":")[0] for p in probs] == ["cells.csv"]  # extra.csv is no indexed artefact: not compared


def _make_profile_runs(tmp_path, monkeypatch, profile="p", dataset="pmdata", fp="0" * 16):
    from balms.cellspec import CellSpec

    monkeypatch.setenv("BALMS_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("BALMS_CACHE_JOURNAL", str(bundle.journal_path(profile)))
    samples = make_samples(3)
    spec = CellSpec(dataset=dataset, system="tiny", model="fake", model_id="fake-model", cot=False, lookback=14,
                    sample_ids=tuple(s.sample_id for s in samples), data_fingerprint=fp, code_fingerprint="c")
    cache = ResponseCache(tmp_path / "c1" / "responses.sqlite")
    out = spec.run_path(tmp_path / "runs" / profile)
    run_samples(TinyAgent(), CachedBackend(FakeBackend(), cache), samples, None, out, progress=False, spec=spec)
    cache.close()
    monkeypatch.delenv("BALMS_CACHE_JOURNAL")
    return out


def test_bundle_round_trip_is_deterministic_and_installs_runs_and_responses(tmp_path, monkeypatch):
    run_file = _make_profile_runs(tmp_path, monkeypatch)
    b1 = bundle.export_bundle("p", tmp_path / "p.tar.gz", cache_dir=tmp_path / "c1")
    b2 = bundle.export_bundle("p", tmp_path / "again" / "p.tar.gz", cache_dir=tmp_path / "c1")
    assert b1["sha256"] == b2["sha256"] and b1["responses"] == 3 and b1["run_files"] == 1
    meta, files = bundle.verify_bundle(tmp_path / "p.tar.gz")
    assert "README.md" in files and meta["data_fingerprints"] == {"pmdata": ["0" * 16]}
    monkeypatch.setenv("BALMS_RUNS_DIR", str(tmp_path / "elsewhere"))
    got = bundle.import_bundle(tmp_path / "p.tar.gz", cache_dir=tmp_path / "c2", check_local_data=False)
    assert got["run_files"] >= 2 and got["responses"] == 3  # records + manifest
    moved = tmp_path / "elsewhere" / run_file.relative_to(tmp_path / "runs")
    assert moved.read_bytes() == run_file.read_bytes()
    assert len(ResponseCache(tmp_path / "c2" / "responses.sqlite")) == 3


def test_tampered_bundle_is_refused_naming_the_file(tmp_path, monkeypatch):
    import tarfile

    _make_profile_runs(tmp_path, monkeypatch)
    good = tmp_path / "p.tar.gz"
    bundle.export_bundle("p", good, cache_dir=tmp_path / "c1")
    with tarfile.open(good) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
    rec_name = next(n for n in files if n.endswith(".jsonl") and n.startswith("runs/"))
    lines = files[rec_name].decode().splitlines()
    rec = json.loads(lines[0])
    rec["prediction"] = 5 if rec["prediction"] != 5 else 1  # one record changed
    files[rec_name] = ("\n".join([json.dumps(rec)] + lines[1:]) + "\n").encode()
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(bundle._tar_bytes(files))
    with pytest.raises(DataError, match=rf"{rec_name.split('/')[-1]}: checksum mismatch"):
        bundle.import_bundle(bad, cache_dir=tmp_path / "c3", check_local_data=False)
    assert not (tmp_path / "c3" / "responses.sqlite").exists()  # nothing installed


def test_bundle_made_on_other_data_is_refused(tmp_path, monkeypatch, real_data):
    _make_profile_runs(tmp_path, monkeypatch, dataset="pmdata", fp="f" * 16)
    f = tmp_path / "p.tar.gz"
    bundle.export_bundle("p", f, cache_dir=tmp_path / "c1")
    with pytest.raises(DataError, match="pmdata: local tables fingerprint"):
        bundle.import_bundle(f, cache_dir=tmp_path / "c2", raw_root=str(real_data))


def test_data_check_finds_the_real_data_as_make_does(monkeypatch):
    """`balms bundle import` outside make (no BALMS_RAW_DIR) compares with the real data beside the project, as
    `make` would read them, not with data/raw (it refused the shipped cpu-study bundle that way)."""
    from balms import paths
    from balms.data.loading import load_dataset

    monkeypatch.delenv("BALMS_RAW_DIR", raising=False)
    shared = paths.shared_data_dir()
    if shared is None:
        pytest.skip("no real data beside the project")
    meta = {"data_fingerprints": {"pmdata": [load_dataset("pmdata", shared).fingerprint()]}}
    assert bundle.check_data(meta) == []
    assert bundle.check_data({"data_fingerprints": {"pmdata": ["0" * 16]}}) != []


def test_import_counts_keys_the_local_cache_answers_differently(tmp_path):
    """The same request answered differently on two machines (another llama.cpp build, prefix reuse rounding
    otherwise) is not silently resolved: the import counts it, keeps the local row by default, takes the file's
    with replace=True."""
    def one_response_file(text: str):
        lines = [json.dumps({"format": bundle.FORMAT, "profile": "p"})] + [
            json.dumps({"table": "responses", "key": k, "model_id": "m",
                        "completion": {"text": t, "model_id": "m", "prompt_tokens": 3, "completion_tokens": 1}})
            for k, t in (("k1", text), ("k2", "same"))]
        f = tmp_path / f"{text}.jsonl.gz"
        f.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
        return f

    local = tmp_path / "local"
    assert bundle.import_responses(one_response_file("ours"), cache_dir=local)["conflicts"] == 0
    got = bundle.import_responses(one_response_file("theirs"), cache_dir=local)
    assert got["responses"] == 2 and got["conflicts"] == 1 and got["kept_local"] == 1
    assert ResponseCache(local / "responses.sqlite").get("k1").text == "ours"
    got = bundle.import_responses(one_response_file("theirs"), cache_dir=local, replace=True)
    assert got["conflicts"] == 1 and got["replaced"] == 1
    assert ResponseCache(local / "responses.sqlite").get("k1").text == "theirs"


def test_a_call_that_fails_leaves_no_journal_line(tmp_path, monkeypatch):
    """A run stopped mid-call (killed, or the backend failed) must not journal a key whose response was never
    stored: export-responses would then refuse the whole profile ("journalled keys are not in the cache")."""
    from balms.models.base import BackendError, GenParams, Message

    monkeypatch.setenv("BALMS_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("BALMS_CACHE_JOURNAL", str(bundle.journal_path("p")))
    cache = ResponseCache(tmp_path / "c" / "responses.sqlite")
    be = CachedBackend(FakeBackend(errors=[BackendError("server went away", transient=False)]), cache)
    with pytest.raises(BackendError):
        be.generate([Message("user", "first")], GenParams(max_tokens=4))
    be.generate([Message("user", "second")], GenParams(max_tokens=4))  # computed and stored
    be.generate([Message("user", "second")], GenParams(max_tokens=4))  # a hit: journalled again, same key
    cache.close()
    assert len(bundle.journal_path("p").read_text().splitlines()) == 2
    assert bundle.export_responses("p", tmp_path / "r.jsonl.gz", cache_dir=tmp_path / "c")["responses"] == 1
