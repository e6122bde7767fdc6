"""Shared fixtures. Real data lives at ../shared/data (read-only); tests never copy it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from balms.paths import shared_data_dir

# Tests must not touch the user's cache or runs; each session gets its own.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def real_data() -> Path:
    """Root of the real data (../shared/data or BALMS_TEST_DATA); skips when absent."""
    env = os.environ.get("BALMS_TEST_DATA")
    root = Path(env) if env else shared_data_dir()
    if root is None or not root.is_dir():
        pytest.skip("real data not found at ../shared/data (set BALMS_TEST_DATA)")
    return root


@pytest.fixture(scope="session")
def pmdata_dir(real_data) -> Path:
    return real_data / "pmdata"


@pytest.fixture(scope="session")
def globem_dir(real_data) -> Path:
    return real_data / "globem"


@pytest.fixture(scope="session")
def pmdata_tables(pmdata_dir):
    """The real PMData, loaded once per session."""
    from balms.data.pmdata import load_pmdata

    return load_pmdata(pmdata_dir)


@pytest.fixture(scope="session")
def globem_tables(globem_dir):
    """The real GLOBEM public sample (both cohorts), loaded once per session."""
    from balms.data.globem import load_globem

    return load_globem(globem_dir)


@pytest.fixture()
def isolated_cache(tmp_path, monkeypatch) -> Path:
    """A private BALMS_CACHE_DIR for tests that write caches."""
    d = tmp_path / "cache"
    monkeypatch.setenv("BALMS_CACHE_DIR", str(d))
    return d


def side_venv_tool(found: str | None, what: str) -> str:
    """A tool `make install` puts in a side venv (LiteLLM's proxy, SkyPilot): `found`, else skip, except under
    CI (CI=true), where its absence is an install failure and the test fails."""
    if found is None:
        if os.environ.get("CI"):
            pytest.fail(f"{what} not installed: CI installs it, so its absence is an install failure")
        pytest.skip(f"{what} not installed")
    return found

