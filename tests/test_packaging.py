"""Packaging: every data file the library reads ships in the wheel, pyproject's build requirements match the
metadata syntax it uses, and a NON-editable install run from another folder summarises real PMData and
rebuilds Table 5 (an editable install hides missing package data: files are read from the source tree)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _data_files() -> list[str]:
    """Every non-Python file inside the balms package (what package-data must cover)."""
    pkg = ROOT / "balms"
    return sorted(str(p.relative_to(pkg)) for p in pkg.rglob("*")
                  if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts)


def test_package_data_patterns_cover_every_data_file():
    patterns = PYPROJECT["tool"]["setuptools"]["package-data"]["balms"]
    pkg = ROOT / "balms"
    covered = {str(p.relative_to(pkg)) for pat in patterns for p in pkg.glob(pat) if p.is_file()}
    missing = [f for f in _data_files() if f not in covered]
    assert not missing, f"pyproject.toml [tool.setuptools.package-data] balms misses {missing} (patterns {patterns})"


def test_license_syntax_matches_the_required_setuptools():
    """`license = "MIT"` (a PEP 639 expression) needs setuptools>=77; older ones reject the string form."""
    lic = PYPROJECT["project"].get("license")
    req = next((r for r in PYPROJECT["build-system"]["requires"] if r.startswith("setuptools")), "")
    m = re.search(r">=\s*(\d+)", req)
    assert m, f"pyproject.toml [build-system] requires: no lower bound on setuptools in {req!r}"
    if isinstance(lic, str):
        assert int(m.group(1)) >= 77, (f"pyproject.toml: license = {lic!r} needs setuptools>=77, "
                                       f"but [build-system] requires {req!r}")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared_closure(requirements: list[str]) -> set[str]:
    """The distributions a set of requirements pulls in (transitively, markers evaluated), as installed here."""
    from importlib import metadata

    from packaging.requirements import Requirement

    todo, seen = [Requirement(r) for r in requirements], set()
    while todo:
        req = todo.pop()
        name = _norm(req.name)
        if name in seen or (req.marker is not None and not req.marker.evaluate({"extra": ""})):
            continue
        seen.add(name)
        for sub in metadata.requires(req.name) or []:
            r = Requirement(sub)
            if r.marker is None or r.marker.evaluate({"extra": ""}):
                todo.append(r)
    return seen


def link_distributions(names: set[str], target: Path) -> None:
    """A site folder with exactly these installed distributions (symlinks to their files, dist-info included)."""
    from importlib import metadata

    target.mkdir(parents=True)
    for name in sorted(names):
        dist = metadata.distribution(name)
        root = Path(dist.locate_file(""))
        for f in dist.files or []:
            if ".." in f.parts:  # scripts installed outside site-packages
                continue
            dst = target / f
            if not dst.exists():
                dst.parent.mkdir(parents=True, exist_ok=True)
                dst.symlink_to(root / f)


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    assert p.returncode == 0, (f"{' '.join(map(str, cmd))} failed ({p.returncode}):\n"
                               f"{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
    return p


@pytest.mark.slow
@pytest.mark.realdata
@pytest.mark.timeout(900)
def test_wheel_installed_non_editable_summarises_pmdata_and_rebuilds_table5(tmp_path, pmdata_dir):
    # 1. build the wheel from a copy of the sources (an in-tree build would write build/ into the checkout)
    src = tmp_path / "src"
    shutil.copytree(ROOT / "balms", src / "balms", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for f in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / f, src / f)
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
          "--check-build-dependencies", "-w", dist, src])
    (whl,) = dist.glob("balms-*.whl")
    names = set(zipfile.ZipFile(whl).namelist())
    missing = [f for f in _data_files() if f"balms/{f}" not in names]
    assert not missing, f"{whl.name} lacks package data {missing}"

    # 2. a fresh venv that holds ONLY the wheel's declared dependencies (and theirs), linked from the main venv, so
    #    an import of an undeclared package fails here as it would for a user who `pip install`s the wheel
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv])
    vpy = venv / "bin" / "python"
    purelib = Path(_run([vpy, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    deps = declared_closure(PYPROJECT["project"]["dependencies"])
    assert "pyyaml" in deps and "torch" not in deps and "sentence-transformers" not in deps
    link_distributions(deps, tmp_path / "deps")
    (purelib / "_balms_declared_deps.pth").write_text(str(tmp_path / "deps") + "\n")
    _run([sys.executable, "-m", "pip", "--python", vpy, "install", "-q", "--no-deps", "--no-index", whl])

    elsewhere = tmp_path / "elsewhere"  # not the checkout: `python -m` puts the working folder on sys.path
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "BALMS_RAW_DIR", "BALMS_OUTPUT_DIR")}
    env |= {"BALMS_CACHE_DIR": str(tmp_path / "cache"), "BALMS_RUNS_DIR": str(tmp_path / "runs"),
            "BALMS_OUTPUT_DIR": str(tmp_path / "out")}
    run = dict(cwd=elsewhere, env=env, timeout=600)
    where = _run([vpy, "-c", "import balms; print(balms.__file__)"], **run).stdout.strip()
    assert Path(where).is_relative_to(venv), f"balms imported from {where}, not from the installed wheel"

    # 3. the configuration (YAML profiles) and the CLI on real PMData, then Table 5 (packaged paper table + ours)
    shown = json.loads(_run([vpy, "-m", "balms.cli", "config", "show", "--profile", "demo"], **run).stdout)
    assert shown["profile"] == "demo" and shown["systems"]
    out = _run([vpy, "-m", "balms.cli", "data", "summary", "--dataset", "pmdata", "--raw", pmdata_dir, "--json"],
               **run).stdout
    summ = json.loads(out.strip().splitlines()[-1])
    assert summ["dataset"] == "pmdata" and summ["source"] == "real" and summ["n_samples"] > 1000
    (tmp_path / "pmdata.json").write_text(json.dumps(summ))
    code = ("import json, sys; from balms.data.summary import table5_eval_sets; "
            "print(table5_eval_sets({'pmdata': json.load(open(sys.argv[1]))}).to_json(orient='records'))")
    rows = json.loads(_run([vpy, "-c", code, tmp_path / "pmdata.json"], **run).stdout)
    assert {r["dataset"] for r in rows} == {"DiversityOne", "PMData", "GLOBEM"}  # every paper row
    (row,) = [r for r in rows if r["dataset"] == "PMData"]
    assert row["paper_n_samples"] == 1448 and row["paper_mean_predictor_mae"] == 0.48
    assert all(r["ours_n_samples"] is None for r in rows if r["dataset"] != "PMData")
    assert row["ours_n_samples"] == summ["n_samples"] and row["ours_users"] == summ["n_users"] == 16

    # 4. the HTML report renders from the packaged templates
    _run([vpy, "-m", "balms.cli", "report", "html", "--profile", "demo", "--out", tmp_path / "report"], **run)
    assert "Tables and figures" in (tmp_path / "report" / "index.html").read_text()


def test_every_test_has_a_timeout(pytestconfig):
    """pytest-timeout is configured globally (pyproject), so a hung server or worker fails one test, not CI."""
    assert float(pytestconfig.getini("timeout") or 0) > 0, "pyproject.toml [tool.pytest.ini_options]: no `timeout`"
    assert pytestconfig.getini("timeout_method") == "signal"
