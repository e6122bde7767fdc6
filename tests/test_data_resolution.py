"""One data resolution (balms.paths.raw_dir) for the CLI, the notebooks and make; no silent synthetic fallback;
the reviewer's `make notebook` (committed responses first, each artefact equal or differs); mistakes answered."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from balms import cli, paths, report  # noqa: E402
from balms.data.registry import dataset_names  # noqa: E402
from balms.experiments import config  # noqa: E402

ROOT = paths.PROJECT_ROOT
PY = sys.executable


def test_raw_dir_order(monkeypatch, tmp_path):
    """BALMS_RAW_DIR, else ../shared/data beside the project, else data/raw."""
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.setattr(paths, "PROJECT_ROOT", project)
    monkeypatch.delenv("BALMS_RAW_DIR", raising=False)
    assert paths.raw_dir() == project / "data" / "raw"
    (tmp_path / "shared" / "data").mkdir(parents=True)
    assert paths.raw_dir() == tmp_path / "shared" / "data"
    monkeypatch.setenv("BALMS_RAW_DIR", str(tmp_path / "mine"))
    assert paths.raw_dir() == (tmp_path / "mine").resolve()


@pytest.fixture
def committed(monkeypatch, tmp_path):
    """A project whose committed tables say pmdata and globem were real; the data folder is empty."""
    tables, figures = tmp_path / "tables", tmp_path / "figures"
    tables.mkdir()
    figures.mkdir()
    pd.DataFrame({"dataset": dataset_names(),
                  "source": ["real" if d in ("pmdata", "globem") else "synthetic" for d in dataset_names()]}
                 ).to_csv(tables / paths.DATA_SUMMARY_CSV, index=False)
    (tables / "sample_rules.csv").write_text("rule,n\nbalms,1450\n")
    (figures / "table5.png").write_bytes(b"real figure")
    monkeypatch.setattr(paths, "TABLES_DIR", tables)
    monkeypatch.setattr(paths, "FIGURES_DIR", figures)
    monkeypatch.setattr(paths, "SYNTHETIC_OUTPUT", tmp_path / "build" / "synthetic")
    monkeypatch.setattr(paths, "PROJECT_ROOT", tmp_path)
    monkeypatch.setenv("BALMS_RAW_DIR", str(tmp_path / "empty"))
    for v in ("BALMS_OUTPUT_DIR", "BALMS_ALLOW_SYNTHETIC"):
        # set, then deleted: monkeypatch's undo then removes what a test sets (announce_data sets
        # BALMS_ALLOW_SYNTHETIC in the process), which would otherwise reach this worker's later tests: a `make
        # notebook` there wrote synthetic artefacts over the committed ones
        monkeypatch.setenv(v, "")
        monkeypatch.delenv(v)
    return tmp_path


def _digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _save_both(profile="demo"):
    report.save_table(pd.DataFrame({"rule": ["balms"], "n": [641]}), "sample_rules", artefact="Table 5",
                      notebook="00_preprocessing", source="synthetic", profile=profile)
    fig, ax = plt.subplots()
    ax.plot([0, 1])
    report.save_figure(fig, "table5", artefact="Table 5 (figure)", notebook="00_preprocessing",
                       source="synthetic", profile=profile)
    plt.close(fig)


def test_empty_data_folder_warns_and_keeps_committed(committed, capsys):
    """The library path `make notebook NB=00_preprocessing` takes (from_notebook, then save_table/save_figure):
    a warning naming every dataset the profile runs on stderr before anything runs; the committed artefacts
    untouched."""
    before = _digest(committed / "tables") | _digest(committed / "figures")
    cfg = config.from_notebook({"profile": "demo"})
    err = capsys.readouterr().err
    assert all(d in err.split("no real data for ")[1].split(" (")[0] for d in cfg.datasets), err
    assert "SYNTHETIC" in err and "build/synthetic/<profile>/" in err and "allow_synthetic" in err
    assert not cfg.allow_synthetic
    _save_both()
    assert _digest(committed / "tables") | _digest(committed / "figures") == before
    out = committed / "build" / "synthetic" / "demo"
    assert pd.read_csv(out / "tables" / "sample_rules.csv")["n"].tolist() == [641]
    assert (out / "figures" / "table5.png").exists() and (out / "tables" / "index.csv").exists()
    assert paths.executed_dir("demo") == committed / "build" / "synthetic" / "demo" / "executed"
    assert paths.data_summary_path().parent == committed / "build" / "synthetic"


def test_allow_synthetic_overwrites(committed, capsys):
    config.from_notebook({"profile": "demo", "settings": {"allow_synthetic": True}})
    assert "OVERWRITES" in capsys.readouterr().err
    _save_both()
    assert pd.read_csv(committed / "tables" / "sample_rules.csv")["n"].tolist() == [641]


def test_real_data_present_writes_committed(committed, real_data, monkeypatch, capsys):
    monkeypatch.setenv("BALMS_RAW_DIR", str(real_data))
    paths.announce_data(["pmdata", "globem"])
    assert capsys.readouterr().err == ""
    assert paths.output_dirs("demo")[0] == committed / "tables"


def test_cli_plan_announces(committed, capsys, monkeypatch):
    """`balms plan` prices the data it resolves: it says first when that is synthetic."""
    called = []
    monkeypatch.setattr(cli, "build_parser", lambda: _Parser(called))
    cli.main(["plan", "--profile", "paper"])
    assert called and "no real data for" in capsys.readouterr().err


class _Parser:
    def __init__(self, called):
        self.called = called

    def parse_args(self, argv):
        import argparse

        return argparse.Namespace(command=argv[0], func=lambda a: self.called.append(a) or 0)


def test_balms_without_arguments_says_what_to_try(capsys):
    assert cli.main([]) == 0
    out = capsys.readouterr().out
    assert "make notebook NB=01_prediction" in out
    # every `balms X` it suggests is a real command
    real = set(cli.build_parser()._subparsers._group_actions[0].choices)
    suggested = {ln.split()[1] for ln in out.splitlines() if ln.strip().startswith("balms ")}
    assert suggested and suggested <= real, suggested - real


def _make(*args, env=None, timeout=60):
    venv = Path(PY).parent.parent
    return subprocess.run(["make", "--no-print-directory", f"VENV={venv}", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


def test_make_help_lists_every_profile_and_notebook():
    out = _make("help").stdout
    for p in sorted(paths.PROJECT_ROOT.joinpath("profiles").glob("*.yaml")):
        assert f"    {p.stem} " in out, p.stem
    for nb in sorted(ROOT.joinpath("notebooks").glob("[0-9][0-9]_*.py")):
        assert nb.stem in out


def test_make_notebook_typo_lists_the_notebooks():
    r = _make("notebook", "NB=01_predictoin")
    assert r.returncode != 0
    assert "no notebook '01_predictoin'" in r.stdout and "01_prediction" in r.stdout.split("notebooks are:")[1]


def test_written_says_equal_or_differs(committed, monkeypatch):
    """`make notebook`'s last step: each artefact the notebook wrote, numbers compared, latency columns apart."""
    monkeypatch.setenv("BALMS_RAW_DIR", str(committed / "raw"))
    (committed / "raw" / "pmdata").mkdir(parents=True)
    (committed / "raw" / "globem").mkdir()
    idx = committed / "tables" / "index.csv"

    def save(n, latency, pixel):
        report.save_table(pd.DataFrame({"system": ["rag"], "mae": [n], "mean_latency_s": [latency]}), "cells",
                          artefact="Table 3", notebook="01_prediction", source="real", profile="demo")
        fig, ax = plt.subplots()
        ax.plot([0, pixel])
        report.save_figure(fig, "cells", artefact="Figure 3", notebook="01_prediction", source="real",
                           profile="demo")
        plt.close(fig)

    save(0.5, 1.0, 1)
    report.snapshot("demo", "01_prediction", committed / "before")
    save(0.5, 9.0, 1)  # only a latency column changed
    got = {p: s for p, s, _ in report.written("demo", "01_prediction", committed / "before")}
    assert got == {"tables/cells.csv": "equal", "figures/cells.png": "equal"}, got
    save(0.6, 9.0, 2)
    rows = report.written("demo", "01_prediction", committed / "before")
    assert {p: s for p, s, _ in rows} == {"tables/cells.csv": "differs", "figures/cells.png": "differs"}, rows
    assert "cells.csv" in dict((p, w) for p, _, w in rows)["tables/cells.csv"]  # what differs, named
    assert set(report.WHY_DIFFERS) == {".csv", ".png"}  # a reason for every kind `written` compares
    assert idx.exists()


@pytest.mark.slow
def test_make_notebook_00_with_empty_data_folder(tmp_path):
    """The acceptance run: an empty data folder, `make notebook NB=00_preprocessing`: a warning naming the
    datasets; every committed artefact (tables, figures, executed notebooks, results) unchanged."""
    watched = [ROOT / d for d in ("tables", "figures", "notebooks/executed", "results")]
    before = {str(d): _digest(d) for d in watched}
    (tmp_path / "empty").mkdir()
    r = _make("notebook", "NB=00_preprocessing", timeout=900,
              env={"BALMS_RAW_DIR": str(tmp_path / "empty"), "BALMS_CACHE_DIR": str(tmp_path / "cache")})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    said = r.stdout + r.stderr
    assert "no real data for pmdata" in said and "SYNTHETIC" in said, said[-3000:]  # the datasets the notebook runs
    assert {str(d): _digest(d) for d in watched} == before
    assert (ROOT / "build" / "synthetic" / "demo" / "executed" / "00_preprocessing.ipynb").exists()
    shutil.rmtree(ROOT / "build" / "synthetic", ignore_errors=True)


def _rows(db: Path, table: str) -> int:
    import sqlite3

    if not db.exists():
        return 0
    with sqlite3.connect(db) as con:
        return con.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]


@pytest.mark.slow
def test_reviewer_command_on_a_fresh_clone(tmp_path, real_data):
    """`make notebook NB=01_prediction` on a fresh clone: the committed responses are imported first, the run adds
    no response to the cache (0 model calls), and it ends listing each artefact as equal / differs."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    cache = tmp_path / "cache"
    env = {"BALMS_RAW_DIR": str(real_data), "BALMS_CACHE_DIR": str(cache), "BALMS_RUNS_DIR": str(tmp_path / "runs")}
    env = {**{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "BALMS_OUTPUT_DIR")}, **env}
    venv = Path(PY).parent.parent
    # what the import alone puts in the cache: the run must add nothing to it
    subprocess.run([PY, "-m", "balms.cli", "bundle", "import-responses", "results/demo/responses.jsonl.gz"],
                   cwd=clone, env=env, check=True, capture_output=True)
    imported = (_rows(cache / "responses.sqlite", "responses"), _rows(cache / "raptor_summaries.sqlite", "summaries"))
    r = subprocess.run(["make", "--no-print-directory", f"VENV={venv}", "notebook", "NB=01_prediction"], cwd=clone,
                       env=env, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "committed responses results/demo/responses.jsonl.gz imported" in r.stdout
    assert " 0 model calls made" in r.stdout + r.stderr, (r.stdout + r.stderr)[-3000:]  # the grid's own count
    after = (_rows(cache / "responses.sqlite", "responses"), _rows(cache / "raptor_summaries.sqlite", "summaries"))
    assert after == imported, f"model calls were made: cache rows {imported} -> {after}"
    listed = [ln.split() for ln in r.stdout.splitlines() if ln.split()[:1] in (["equal"], ["differs"], ["new"])]
    assert listed and {p for _, p in listed} >= {"tables/table3_zero_shot.csv", "figures/table3_zero_shot_mae.png"}
    assert not any(s == "new" for s, _ in listed), listed
    print("\n".join(" ".join(x) for x in listed))  # shown with -s: which artefacts differ from the committed ones
