"""The fidelity table (balms/resources/fidelity.yaml) is checked, not prose: every exact/option row names tests
that exist, every code reference resolves, the book page is the file's rendering, and the rows that state a
profile's setting are checked here against the profile."""

from __future__ import annotations

import subprocess
import sys

import pytest

from balms import fidelity, paths
from balms.experiments import config, grid


@pytest.fixture(scope="module")
def rows():
    return fidelity.load()


def test_every_exact_or_option_row_names_a_test(rows):
    assert {r.kind for r in rows} <= {"exact", "option", "differs", "paper inconsistent"}
    missing = [r.id for r in rows if r.kind in fidelity.NEEDS_TEST and not r.tests]
    assert not missing, f"rows marked exact/option without a test: {missing}"


def test_every_named_test_exists(rows):
    """Collect the named test files with pytest and find every node id (a parametrised test by its base id)."""
    named = sorted({t for r in rows for t in r.tests})
    files = sorted({t.split("::", 1)[0] for t in named})
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
                         cwd=paths.PROJECT_ROOT, capture_output=True, text=True, timeout=600)
    collected = {line.strip() for line in out.stdout.splitlines() if "::" in line}
    bases = collected | {c.split("[", 1)[0] for c in collected}
    absent = [t for t in named if t not in bases]
    assert collected, out.stdout[-2000:] + out.stderr[-2000:]
    assert not absent, f"named tests that pytest does not collect: {absent}"


def test_every_code_reference_resolves(rows):
    assert fidelity.unresolved_code(rows) == []


def test_an_untracked_or_missing_reference_is_named(tmp_path):
    """A file that exists only in the working tree (generated, ignored) is absent from a clean clone: refused."""
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "kept.json").write_text("{}")
    (tmp_path / "local.json").write_text("{}")
    subprocess.run(["git", "add", "kept.json"], cwd=tmp_path, check=True)
    row = fidelity.Row(id="r1", detail="d", paper="p", code=["kept.json", "local.json", "gone.json"],
                       status="option", tests=["t"])
    assert fidelity.unresolved_code([row], root=tmp_path) == [
        "r1: local.json is not tracked by git (ignored or never added)", "r1: gone.json does not exist"]


def test_book_page_is_the_files_rendering(rows):
    assert fidelity.DOC_FILE.exists(), "run python -m balms.fidelity --write"
    assert fidelity.DOC_FILE.read_text(encoding="utf-8") == fidelity.render(rows), \
        "docs/fidelity.md differs from balms/resources/fidelity.yaml: run python -m balms.fidelity --write"


@pytest.mark.parametrize("bad, match", [
    ("status: exact\n  tests: []", "needs a test"),
    ("status: roughly\n  tests: []", "status 'roughly'"),
    ("status: 'differs:'\n  tests: []", "status 'differs:'"),
])
def test_malformed_rows_are_refused_by_id(tmp_path, bad, match):
    p = tmp_path / "f.yaml"
    p.write_text(f"rows:\n- id: x1\n  detail: d\n  paper: p\n  code: [README.md]\n  {bad}\n")
    with pytest.raises(fidelity.FidelityError, match=match) as e:
        fidelity.load(p)
    assert "(x1)" in str(e.value)


def test_paper_profile_rag_and_raptor_read_the_same_memory():
    """Appendix A: RAPTOR builds its tree 'over the same records' as chunk RAG."""
    from balms.agents.registry import make_agent

    cfg = config.load("paper")
    opts = {s: grid.agent_options(cfg, s, False) for s in ("rag", "raptor")}
    rag = make_agent("rag", **{k: v for k, v in opts["rag"].items() if k != "max_tokens"})
    raptor = make_agent("raptor", **{k: v for k, v in opts["raptor"].items() if k != "max_tokens"})
    assert rag.memory == raptor.memory == "lookback"


def test_paper_profile_sweeps_the_papers_look_back_points():
    assert config.load("paper").lookbacks == [7, 14, 21, 28]


def test_paper_profile_scores_parse_failures_as_the_paper_did():
    """docs/scoring.md: the paper profile compares the MAE with failures scored as 0; the demo keeps exclusion."""
    from balms import metrics
    from balms.experiments import summaries

    assert config.load("paper").scoring == "fill" and metrics.PAPER_FAILURE_FILL == 0
    assert config.load("demo").scoring == "exclude"
    assert set(summaries._SCORED_SUFFIX) == set(config.ExperimentConfig.model_fields["scoring"].annotation.__args__)
