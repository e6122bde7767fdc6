"""Responses travel: the responses a profile's records name are exported deterministically (refused when one is
missing or altered), imported all or nothing on a fresh cache, and replay the same records with zero model calls;
regenerated tables are compared with the committed ones, latency aside."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

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
    out1 = runs / "p" / "pmdata" / "run.jsonl"
    run_samples(TinyAgent(n_calls=2), CachedBackend(FakeBackend(), other), samples, None, out1, progress=False)
    other.close()
    f = tmp_path / "responses.jsonl.gz"
    info = bundle.export_responses("p", f, cache_dir=tmp_path / "c1")
    assert info["responses"] == 10  # 5 samples x 2 calls, the unrelated call left out
    again = bundle.export_responses("p", tmp_path / "again.jsonl.gz", cache_dir=tmp_path / "c1")
    assert again["sha256"] == info["sha256"]  # deterministic bytes

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
    samples = make_samples(3)
    spec = CellSpec(dataset=dataset, system="tiny", model="fake", model_id="fake-model", cot=False, lookback=14,
                    sample_ids=tuple(s.sample_id for s in samples), data_fingerprint=fp, code_fingerprint="c")
    cache = ResponseCache(tmp_path / "c1" / "responses.sqlite")
    out = spec.run_path(tmp_path / "runs" / profile)
    run_samples(TinyAgent(), CachedBackend(FakeBackend(), cache), samples, None, out, progress=False, spec=spec)
    cache.close()
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


def test_a_bundle_names_no_path_of_the_machine_that_made_it(tmp_path, monkeypatch):
    """A committed bundle is read on other machines: its manifests name their run file, not where it lay here."""
    import tarfile

    _make_profile_runs(tmp_path, monkeypatch)
    bundle.export_bundle("p", tmp_path / "p.tar.gz", cache_dir=tmp_path / "c1")
    with tarfile.open(tmp_path / "p.tar.gz") as tar:
        texts = {m.name: tar.extractfile(m).read().decode() for m in tar.getmembers() if m.isfile()}
    manifests = [json.loads(t) for n, t in texts.items() if n.endswith(".manifest.json")]
    assert manifests and all(m["run_file"].endswith(".jsonl") and "/" not in m["run_file"] for m in manifests)
    assert not [n for n, t in texts.items() if str(tmp_path) in t]


def test_a_manifest_names_its_data_folder_from_the_project_root(tmp_path, real_data):
    """The manifest's data folder is relative to the project (e.g. ../shared/data/pmdata), not this machine's path."""
    from balms.data.pmdata import load_pmdata
    from balms.paths import PROJECT_ROOT
    from balms.runfile import start_manifest

    tables = load_pmdata(real_data / "pmdata")
    out = tmp_path / "r.jsonl"
    m = start_manifest(out, TinyAgent(), FakeBackend(), make_samples(1), tables, None, {}, {"started_at": "now"})
    assert m["run_file"] == "r.jsonl" and not Path(m["data"]["tables"]["raw_dir"]).is_absolute()
    assert (PROJECT_ROOT / m["data"]["tables"]["raw_dir"]).resolve() == Path(tables.raw_dir).resolve()


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


def _response_file(tmp_path, text: str):
    lines = [json.dumps({"format": bundle.FORMAT, "profile": "p"})] + [
        json.dumps({"table": "responses", "key": k, "model_id": "m",
                    "completion": {"text": t, "model_id": "m", "prompt_tokens": 3, "completion_tokens": 1}})
        for k, t in (("k1", "same"), ("k2", text))]  # the differing key last: nothing before it may be written
    f = tmp_path / f"{text}.jsonl.gz"
    f.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    return f


def test_a_differing_local_response_is_refused_unless_told_which_side_wins(tmp_path, monkeypatch, capsys):
    """The same request answered differently on two machines (another llama.cpp build, prefix reuse rounding
    otherwise) is never resolved silently: the import writes nothing and exits non-zero, unless --prefer says."""
    import sqlite3

    from balms.cli import main

    local = tmp_path / "local"
    bundle.import_responses(_response_file(tmp_path, "ours"), cache_dir=local)
    con = sqlite3.connect(local / "responses.sqlite")
    con.execute("DELETE FROM responses WHERE key = 'k1'")  # so a half-written import would show as k1 back
    con.commit()
    con.close()
    theirs = _response_file(tmp_path, "theirs")
    with pytest.raises(DataError, match="1 entr.*differ.*response k2.*nothing written.*--prefer"):
        bundle.import_responses(theirs, cache_dir=local)
    assert ResponseCache(local / "responses.sqlite").get("k1") is None  # all or nothing
    monkeypatch.setenv("BALMS_CACHE_DIR", str(local))
    assert main(["bundle", "import-responses", str(theirs)]) == 2
    assert "k2" in capsys.readouterr().err
    assert main(["bundle", "import-responses", str(theirs), "--prefer", "local"]) == 0
    assert "yours won" in capsys.readouterr().err
    cache = ResponseCache(local / "responses.sqlite")
    assert cache.get("k2").text == "ours" and cache.get("k1").text == "same"
    got = bundle.import_responses(theirs, cache_dir=local, prefer="bundle")
    assert got["conflicts"] == 1 and got["replaced"] == 1
    assert ResponseCache(local / "responses.sqlite").get("k2").text == "theirs"


def test_export_refuses_a_missing_or_altered_response_and_a_record_without_keys(tmp_path, monkeypatch):
    """The export packs what the records name, verified: a response gone from the cache, one altered after it was
    stored, or a record that names none (written before records named them) is refused; nothing is written."""
    import sqlite3

    from balms.models.cache import CacheIntegrityError

    run_file = _make_profile_runs(tmp_path, monkeypatch)
    db = tmp_path / "c1" / "responses.sqlite"
    out = tmp_path / "r.jsonl.gz"
    assert bundle.export_responses("p", out, cache_dir=tmp_path / "c1")["responses"] == 3
    out.unlink()
    keys = [st["meta"]["response_key"] for line in run_file.read_text().splitlines()
            for st in json.loads(line)["transcript"] if "response_key" in st["meta"]]
    con = sqlite3.connect(db)
    con.execute("UPDATE responses SET completion = replace(completion, 'Answer', 'Answex') WHERE key = ?",
                (keys[-1],))
    con.commit()
    with pytest.raises(CacheIntegrityError, match=keys[-1]):
        bundle.export_responses("p", out, cache_dir=tmp_path / "c1")
    con.execute("DELETE FROM responses WHERE key = ?", (keys[-1],))
    con.commit()
    con.close()
    with pytest.raises(DataError, match=rf"1 of the 3 responses the records use are not in the cache, named by 1 "
                                        rf"file\(s\): {run_file.name} \(1\) \(first {keys[-1]}, named by "
                                        rf".*{run_file.name} row 3"):
        bundle.export_bundle("p", tmp_path / "p.tar.gz", cache_dir=tmp_path / "c1")
    lines = run_file.read_text().splitlines()
    rec = json.loads(lines[0])
    for st in rec["transcript"]:
        st["meta"].pop("response_key", None)
    run_file.write_text("\n".join([json.dumps(rec)] + lines[1:]) + "\n")
    with pytest.raises(DataError, match=rf"{run_file.name} row 1.*1 record\(s\)/verdict\(s\) name no response keys"):
        bundle.export_responses("p", out, cache_dir=tmp_path / "c1")
    rec["n_steps"] = 0  # a system that calls no model names no response, and needs none: only row 3 is refused now
    run_file.write_text("\n".join([json.dumps(rec)] + lines[1:]) + "\n")
    with pytest.raises(DataError, match=r"1 of the 2 responses the records use are not in the cache"):
        bundle.export_responses("p", out, cache_dir=tmp_path / "c1")
    with pytest.raises(DataError, match="no run file of the profile's current cells among its 2 files"):
        bundle.export_responses("p", out, cache_dir=tmp_path / "c1", keys={"not-a-cell"})  # an empty export: refused
    assert not out.exists() and not (tmp_path / "p.tar.gz").exists()


def test_a_refused_import_leaves_the_target_unchanged(tmp_path, monkeypatch):
    """All or nothing: a run file that differs locally, found on the LAST file, stops the import before any run
    file or response is written (the old loop had installed the files before it)."""
    run_file = _make_profile_runs(tmp_path, monkeypatch)
    f = tmp_path / "p.tar.gz"
    bundle.export_bundle("p", f, cache_dir=tmp_path / "c1")
    _, files = bundle.verify_bundle(f)
    names = sorted(n for n in files if n.startswith("runs/"))
    assert len(names) >= 2
    target = tmp_path / "elsewhere"
    monkeypatch.setenv("BALMS_RUNS_DIR", str(target))
    last = target / names[-1].removeprefix("runs/")
    last.parent.mkdir(parents=True)
    last.write_text("{}\n")  # the last file conflicts
    before = sorted(p for p in target.rglob("*"))
    with pytest.raises(DataError, match=f"{last.name}: exists with different content"):
        bundle.import_bundle(f, cache_dir=tmp_path / "c2", check_local_data=False)
    assert sorted(p for p in target.rglob("*")) == before and last.read_text() == "{}\n"
    assert not (tmp_path / "c2").exists()
    # a differing response refuses it too, before any run file is installed
    last.unlink()
    bundle.import_responses(_response_file_for(tmp_path, files, "changed"), cache_dir=tmp_path / "c2")
    with pytest.raises(DataError, match="differ from the local caches"):
        bundle.import_bundle(f, cache_dir=tmp_path / "c2", check_local_data=False)
    assert not any(p.is_file() for p in target.rglob("*"))
    got = bundle.import_bundle(f, cache_dir=tmp_path / "c2", check_local_data=False, prefer="bundle")
    assert got["run_files"] == len(names) and got["replaced"] == 1
    assert (target / run_file.relative_to(tmp_path / "runs")).read_bytes() == run_file.read_bytes()
    assert not list(target.rglob("*.import.tmp"))


def _response_file_for(tmp_path, files: dict, text: str):
    """A responses file answering the bundle's first response differently."""
    lines = files["responses.jsonl"].decode().splitlines()
    rec = json.loads(lines[1])
    rec["completion"]["text"] = text
    f = tmp_path / "changed.jsonl.gz"
    f.write_bytes(gzip.compress((lines[0] + "\n" + json.dumps(rec) + "\n").encode()))
    return f


@pytest.mark.slow  # PHIA starts its sandbox, RAPTOR and RAG their embedding model: a few minutes on 2 cores
def test_export_after_a_notebook_run_packs_every_response_the_records_used(tmp_path, monkeypatch):
    """Issue 37: after `balms run --notebooks ...` (no cache journal) the bundle held 3 responses for 9 records and
    the consumer's replay failed. Now the records name their responses: the export packs them all (a replay from
    the bundle alone, in an empty cache and a new runs folder, makes zero model calls and the same records)."""
    import balms.experiments as ex
    import balms.models.registry as reg
    import balms.models.routing as routing
    from balms.experiments.config import ExperimentConfig
    from balms.experiments.grid import run
    from tests.test_experiments import Scripted

    monkeypatch.setenv("BALMS_RAW_DIR", str(tmp_path / "no_raw"))  # -> synthetic cohorts
    monkeypatch.setattr(routing, "check_models", lambda *a, **kw: {})
    cfg = ExperimentConfig(profile="t", datasets=["pmdata"], systems=["healthllm", "rag", "raptor", "phia"],
                           backbones=["scripted"], n_samples=2, notebooks=["01_prediction", "02_cot"])

    def run_in(where: str, backend):
        monkeypatch.setenv("BALMS_RUNS_DIR", str(tmp_path / where / "runs"))
        monkeypatch.setenv("BALMS_CACHE_DIR", str(tmp_path / where / "cache"))
        monkeypatch.setattr(reg, "get_backend", lambda name=None, **kw: CachedBackend(
            backend, reg.shared_cache(), mode="replay" if isinstance(backend, NeverCalled) else "rw"))
        ex.cohorts._cohort.cache_clear()
        df = run(cfg, ["01_prediction", "02_cot"])
        judged = ex.judge_grid(cfg)
        case = ex.judge_case_study(cfg)
        return df, judged, case

    scripted = Scripted()
    df, judged, case = run_in("a", scripted)
    assert scripted.calls > 0 and len(judged) and len(case)
    got = bundle.export_bundle("t", tmp_path / "t.tar.gz", cache_dir=tmp_path / "a" / "cache")
    assert got["records"] == len(df.drop_duplicates(["cell_key", "sample_id"]))  # a cell two notebooks declare: once
    assert got["verdicts"] == len(judged) + len(case)
    assert got["responses"] > 0 and got["raptor_summaries"] > 0

    monkeypatch.setenv("BALMS_RUNS_DIR", str(tmp_path / "b" / "runs"))
    meta, files = bundle.verify_bundle(tmp_path / "t.tar.gz")
    bundle._write_responses(bundle._plan_responses(files["responses.jsonl"].decode(), "t",
                                                   cache_dir=tmp_path / "b" / "cache"))
    df2, judged2, case2 = run_in("b", NeverCalled(model_id=Scripted.model_id))  # the responses alone, no run files
    cols = ["sample_id", "system", "cot", "prediction"]
    assert df2[cols].sort_values(cols).values.tolist() == df[cols].sort_values(cols).values.tolist()
    assert judged2["judge_status"].tolist() == judged["judge_status"].tolist()
    assert case2.drop(columns=["judge_model"]).equals(case.drop(columns=["judge_model"]))
    ex.cohorts._cohort.cache_clear()


def test_export_after_notebooks_01_and_03_is_complete_or_refused(tmp_path, monkeypatch, capsys):
    """Issue 37's last gap: the demo's `make export-responses` packed the records of only part of its cells, exit 0,
    and a replay from that file stopped in notebook 03's sweep ("replay-only cache miss"). The notebooks had run part of
    the profile's cells under other keys (the code changed between notebooks; the same happens with another P),
    and the export read only the records of the keys declared now. Now every cell the notebooks declare must have
    its records here or the export refuses, naming them; a complete export replays notebooks 01 and 03 from an
    empty cache and a new runs folder with zero model calls; a response gone from the cache is refused by cell."""
    import sqlite3

    import balms.experiments as ex
    import balms.experiments.grid as grid
    import balms.models.registry as reg
    import balms.models.routing as routing
    from balms.cli import main
    from balms.experiments.config import load, parse_cli_overrides
    from tests.test_experiments import Scripted

    P = ("-p datasets [pmdata] -p systems [healthllm] -p backbones [scripted] -p horizon_datasets [pmdata] -p "
         "horizon_systems [healthllm] -p lookbacks [3,5] -p n_samples 2 -p notebooks [01_prediction,03_long_horizon]")
    cfg = load("smoke", **parse_cli_overrides(P))
    monkeypatch.setenv("BALMS_RAW_DIR", str(tmp_path / "no_raw"))  # -> synthetic cohorts
    monkeypatch.setattr(routing, "check_models", lambda *a, **kw: {})
    ex.cohorts._cohort.cache_clear()

    def use(where: str, backend, mode="rw"):
        monkeypatch.setenv("BALMS_RUNS_DIR", str(tmp_path / where / "runs"))
        monkeypatch.setenv("BALMS_CACHE_DIR", str(tmp_path / where / "cache"))
        monkeypatch.setattr(reg, "get_backend", lambda name=None, **kw: CachedBackend(backend, reg.shared_cache(),
                                                                                        mode=mode))

    def export(out, what="export-responses") -> tuple[int, str]:  # `make export-responses` with the run's P
        rc = main(["bundle", what, "--profile", "smoke", "--out", str(out), "--set", P])
        return rc, capsys.readouterr().err

    scripted = Scripted()
    use("a", scripted)
    with monkeypatch.context() as m:  # notebook 03 ran before a code change re-keyed its cells
        m.setattr(grid, "cell_code_fingerprint", lambda *a: "0" * 16)
        ex.run(cfg, "03_long_horizon")
    ex.run(cfg, "01_prediction")
    out = tmp_path / "responses.jsonl.gz"
    assert export(tmp_path / "t.tar.gz", "export")[0] == 2 and not (tmp_path / "t.tar.gz").exists()
    rc, err = export(out)  # before: 2 responses of notebook 01's 2 records packed, exit 0
    assert rc == 2 and not out.exists()
    assert re.search(r"2 cell\(s\) or verdict file\(s\) the profile's notebooks declare are not here.*"
                     r"03_long_horizon: pmdata healthllm scripted zs L3 .*: no run file.*"
                     r"\(2 run file\(s\) of other cells are", err), err

    calls = scripted.calls
    use("a", scripted, mode="replay")
    ex.run(cfg, "03_long_horizon")  # notebook 03 again at this code: from the cache, no call
    assert scripted.calls == calls
    rc, err = export(out)
    assert rc == 0, err
    assert "packed 6 response(s) named by 6 record(s) of 3 cell(s)" in err  # 01's cell and 03's two, 2 samples each
    assert "2 run file(s) of cells not declared now left out" in err  # notebook 03's superseded ones
    assert export(tmp_path / "t.tar.gz", "export")[0] == 0
    assert bundle.verify_bundle(tmp_path / "t.tar.gz")[0]["counts"]["responses"] == 6

    use("b", NeverCalled(model_id=Scripted.model_id), mode="replay")  # an empty cache and runs folder
    assert bundle.import_responses(out)["responses"] == 6
    zs, sweep = ex.run(cfg, "01_prediction"), ex.run(cfg, "03_long_horizon")
    assert (zs["status"] == "ok").all() and len(zs) == 2 and (sweep["status"] == "ok").all() and len(sweep) == 4

    use("a", scripted)
    run_file = next(f for f in (tmp_path / "a" / "runs" / "smoke").rglob("*L5__*.jsonl")  # the current one
                    if json.loads(f.read_text().splitlines()[0])["cell"]["code_fingerprint"] != "0" * 16)
    key = next(st["meta"]["response_key"] for st in json.loads(run_file.read_text().splitlines()[0])["transcript"]
               if "response_key" in st["meta"])
    con = sqlite3.connect(tmp_path / "a" / "cache" / "responses.sqlite")
    con.execute("DELETE FROM responses WHERE key = ?", (key,))
    con.commit()
    con.close()
    out.unlink()
    rc, err = export(out)
    assert rc == 2 and not out.exists()
    assert f"1 of the 6 responses the records use are not in the cache, named by 1 file(s): {run_file.name} (1)" in err
    ex.cohorts._cohort.cache_clear()


def test_export_refuses_a_judged_cell_without_its_verdicts(tmp_path, monkeypatch):
    """Notebook 07's verdicts name the judge's responses: a judged cell without its verdict file, or a profile
    without its case-study verdicts, is refused by name (the replay of notebook 07 would miss them)."""
    import balms.experiments as ex
    import balms.models.registry as reg
    import balms.models.routing as routing
    from balms.experiments.config import ExperimentConfig
    from balms.experiments.judging import CASE_STUDY_VERDICTS
    from tests.test_experiments import Scripted

    monkeypatch.setenv("BALMS_RAW_DIR", str(tmp_path / "no_raw"))  # -> synthetic cohorts
    monkeypatch.setenv("BALMS_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setattr(routing, "check_models", lambda *a, **kw: {})
    monkeypatch.setattr(reg, "get_backend", lambda name=None, **kw: Scripted())
    ex.cohorts._cohort.cache_clear()
    cfg = ExperimentConfig(profile="t", datasets=["pmdata"], systems=["healthllm"], backbones=["scripted"],
                           n_samples=1, judge_datasets=["pmdata"], notebooks=["02_cot", "07_rationale_quality"])
    ex.run(cfg, "02_cot", progress=False)
    with pytest.raises(DataError, match=r"2 cell\(s\) or verdict file\(s\).*healthllm__scripted__cot__L\d+__\w+"
                                        rf"\.jsonl: no judge verdicts \(notebook 07\); {CASE_STUDY_VERDICTS}: no "):
        bundle.complete_files(cfg)
    cot = next((tmp_path / "runs" / "t").rglob("*__cot__*.jsonl"))
    cot.with_name(cot.name.removesuffix(".jsonl") + ".judge.jsonl").write_text("")
    (tmp_path / "runs" / "t" / CASE_STUDY_VERDICTS).write_text("")
    files, left_out = bundle.complete_files(cfg)
    assert left_out == 0 and len([f for f in files if f.name.endswith(".judge.jsonl")]) == 2
    ex.cohorts._cohort.cache_clear()
