"""The loaded-tables cache: a second load reads the pickle (same tables), any raw byte or option change reloads,
a damaged cache file is replaced, and BALMS_TABLES_CACHE=0 turns it off."""

from __future__ import annotations

import shutil

import pytest

from balms.data import loading
from balms.data.synthetic import ensure_synthetic


@pytest.fixture()
def raw_root(tmp_path):
    root = tmp_path / "raw"
    shutil.copytree(ensure_synthetic("diversityone"), root / "diversityone")
    return root


def _count_loads(monkeypatch) -> list:
    calls = []
    real = loading._loader

    def counting(name):
        fn = real(name)

        def load(*a, **k):
            calls.append(name)
            return fn(*a, **k)

        return load

    monkeypatch.setattr(loading, "_loader", counting)
    return calls


def test_second_load_comes_from_the_cache_with_the_same_tables(raw_root, isolated_cache, monkeypatch):
    calls = _count_loads(monkeypatch)
    first = loading.load_dataset("diversityone", raw_root)
    second = loading.load_dataset("diversityone", raw_root)
    assert calls == ["diversityone"]  # parsed once
    assert len(list((isolated_cache / "tables").glob("diversityone-real-*.pkl"))) == 1
    assert second is not first and second.fingerprint() == first.fingerprint()
    assert second.dropped == first.dropped and second.source == "real"


def test_a_changed_raw_file_or_option_loads_again(raw_root, isolated_cache, monkeypatch):
    calls = _count_loads(monkeypatch)
    loading.load_dataset("diversityone", raw_root)
    victim = sorted(p for p in (raw_root / "diversityone").rglob("*") if p.is_file())[0]
    victim.write_bytes(victim.read_bytes() + b"\n")
    loading.load_dataset("diversityone", raw_root)
    assert calls == ["diversityone", "diversityone"]
    assert len(list((isolated_cache / "tables").glob("*.pkl"))) == 2


def test_a_damaged_cache_file_is_replaced_not_trusted(raw_root, isolated_cache, monkeypatch):
    good = loading.load_dataset("diversityone", raw_root)
    (pkl,) = (isolated_cache / "tables").glob("*.pkl")
    pkl.write_bytes(b"not a pickle")
    calls = _count_loads(monkeypatch)
    again = loading.load_dataset("diversityone", raw_root)
    assert calls == ["diversityone"] and again.fingerprint() == good.fingerprint()
    assert pkl.read_bytes() != b"not a pickle"


def test_the_same_bytes_elsewhere_are_loaded_from_there(raw_root, isolated_cache, tmp_path):
    """Tables record their raw folder, so a copy in another place is its own entry (raw_dir stays true)."""
    first = loading.load_dataset("diversityone", raw_root)
    other = tmp_path / "elsewhere"
    shutil.copytree(raw_root, other)
    moved = loading.load_dataset("diversityone", other)
    assert moved.raw_dir.startswith(str(other)) and first.raw_dir.startswith(str(raw_root))
    assert moved.fingerprint() == first.fingerprint()  # same data, content-keyed results still compare equal


def test_switched_off(raw_root, isolated_cache, monkeypatch):
    monkeypatch.setenv("BALMS_TABLES_CACHE", "0")
    calls = _count_loads(monkeypatch)
    loading.load_dataset("diversityone", raw_root)
    loading.load_dataset("diversityone", raw_root)
    assert calls == ["diversityone", "diversityone"] and not (isolated_cache / "tables").exists()


def test_real_pmdata_round_trips(real_data, isolated_cache):
    first = loading.load_dataset("pmdata", real_data)
    second = loading.load_dataset("pmdata", real_data)
    assert first.source == second.source == "real"
    assert second.fingerprint() == first.fingerprint() and second.dropped == first.dropped


def test_first_use_by_many_threads_loads_once(raw_root, isolated_cache, monkeypatch):
    """The scheduler's threads may ask for a dataset at once: one load, one whole pickle, the same tables."""
    from test_stores import _together

    calls = _count_loads(monkeypatch)
    tables = _together(lambda i: loading.load_dataset("diversityone", raw_root))
    assert calls == ["diversityone"]
    assert len({t.fingerprint() for t in tables}) == 1
    assert len(list((isolated_cache / "tables").glob("*"))) == 1  # no temporary file left behind
