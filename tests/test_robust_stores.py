"""Stores tell damage from a crash (issue 37): only an unterminated last line is a torn write (dropped, counted in
a warning); any other bad line stops with the file, line and field, and the file is left as it was; a damaged
SQLite store is named with what to do."""

from __future__ import annotations

import json

import pytest

from balms.agents.raptor import SummaryCache
from balms.data.schema import DataError
from balms.jsonl_store import TornTailWarning
from balms.models.cache import ResponseCache
from balms.runner import load_records, run_samples
from balms.stores import DamagedStoreError
from fake_servers import FakeBackend, TinyAgent, make_samples


@pytest.fixture()
def run_file(tmp_path):
    out = tmp_path / "r.jsonl"
    run_samples(TinyAgent(), FakeBackend(), make_samples(3), None, out, progress=False)
    return out


def _resume(out):
    return run_samples(TinyAgent(), FakeBackend(), make_samples(3), None, out, progress=False)


def test_an_unterminated_last_line_is_a_torn_write(run_file):
    whole = run_file.read_bytes()
    last = whole.rstrip(b"\n").rsplit(b"\n", 1)[1]
    run_file.write_bytes(whole[: -len(last) - 1] + last)  # the last record complete but for its newline
    assert len(load_records(run_file)) == 2  # a reader skips it
    with pytest.warns(TornTailWarning, match=rf"torn last line \({len(last)} bytes.*2 complete line"):
        res = _resume(run_file)
    assert res.n_done_before == 2 and res.n_new == 1 and len(load_records(run_file)) == 3


@pytest.mark.parametrize("where", ["middle", "last"])
def test_a_complete_line_that_fails_validation_is_damage_named_with_its_field(run_file, where):
    lines = run_file.read_text().splitlines()
    row = 2 if where == "middle" else 3
    bad = json.loads(lines[row - 1])
    bad["lookback"] = "many"  # valid JSON, not a valid record
    lines[row - 1] = json.dumps(bad)
    run_file.write_text("\n".join(lines) + "\n")
    before = run_file.read_bytes()
    for read in (load_records, _resume):
        with pytest.raises(DataError, match=rf"r\.jsonl, row {row}, field 'lookback': not a valid PredictionRecord"):
            read(run_file)
    assert run_file.read_bytes() == before  # nothing deleted, nothing rebuilt


@pytest.mark.parametrize("where", ["middle", "last"])
def test_a_garbled_complete_line_is_damage_named_with_its_line(run_file, where):
    lines = run_file.read_text().splitlines()
    row = 1 if where == "middle" else 3
    lines[row - 1] = lines[row - 1][:20] + "\x00garbage"
    run_file.write_text("\n".join(lines) + "\n")
    before = run_file.read_bytes()
    with pytest.raises(DataError, match=rf"r\.jsonl, row {row}: not a valid PredictionRecord.*file is damaged"):
        _resume(run_file)
    assert run_file.read_bytes() == before


@pytest.mark.parametrize("store", [ResponseCache, SummaryCache])
def test_a_damaged_sqlite_store_is_named_with_what_to_do(tmp_path, store):
    path = tmp_path / "store.sqlite"
    path.write_bytes(b"not a database, a damaged file " * 200)
    with pytest.raises(DamagedStoreError, match=rf"{path}: damaged, SQLite cannot read it .*Move it aside"):
        store(path)


def test_a_page_damaged_after_the_store_opened_is_named_on_read(tmp_path):
    """Damage SQLite meets only when it reads the page (the header is intact, the file opens) is named too."""
    path = tmp_path / "raptor_summaries.sqlite"
    writer = SummaryCache(path)
    keys = [("pmdata", "p01", f"2019-11-{i:03d}", "m", "sha") for i in range(400)]
    for k in keys:
        writer.put(k, "a summary of the day " * 10, {"prompt_tokens": 1, "completion_tokens": 1, "latency_s": 0.1})
    writer._con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    reader = SummaryCache(path)  # opens: schema and header are fine
    data = bytearray(path.read_bytes())
    page = 4096
    assert len(data) > 4 * page
    data[3 * page: 4 * page] = b"\xff" * page  # one data page overwritten
    path.write_bytes(bytes(data))
    with pytest.raises(DamagedStoreError, match=rf"{path}: damaged, SQLite cannot read it \(database disk image is "
                                                r"malformed\)"):
        for k in keys:
            reader.get(k)


def test_the_cli_names_a_damaged_store_without_a_traceback(tmp_path, monkeypatch, capsys):
    """Any command that meets a damaged store (or a damaged run file) ends with the message alone, exit 2."""
    import sqlite3

    import balms.data.summary as summary
    from balms import cli

    def damaged(*a, **kw):
        raise DamagedStoreError(tmp_path / "responses.sqlite", sqlite3.DatabaseError("file is not a database"))

    monkeypatch.setattr(summary, "dataset_summary", damaged)
    assert cli.main(["data", "summary", "--dataset", "pmdata"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"balms data: {tmp_path / 'responses.sqlite'}: damaged") and "Traceback" not in err
