"""Numbers written once (issue 35): every measured figure the docs show is written by `make docs`
(scripts/make_docs.py) into docs/_generated/ or the README's and runbook's generated blocks, the committed files
equal what it writes from the committed results, and no prose (README, docs/*.md, notebook headers, balms
docstrings, profile comments) repeats a measured number: a ratio, a timing, a size, a multiplier, a measured share or a
count from a run."""

from __future__ import annotations

import ast
import functools
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import make_docs  # noqa: E402

# What a measured number looks like in prose. Inline code and code blocks are commands and configuration, not
# prose, and are not read; nor is the generated folder, or docs/fidelity.md (written by balms.fidelity).
MEASURED = {
    "ratio": r"(?<![\w.])\d+\.\d{2,}(?![\w.])",  # 0.914 (not a version 0.14.1, not 2608.27219 after arXiv)
    "duration": r"(?<![\w.*/])\d[\d,]*(?:\.\d+)?\s?(?:ms|s|sec|seconds?|min|minutes?|h|hours?)\b(?!-)",
    "size": r"(?<![\w.])\d+(?:\.\d+)?\s?(?:KB|MB|GB|TB)\b",
    "multiplier": r"(?<![\w.])(?:x\d+(?:\.\d+)?|\d+(?:\.\d+)?x)(?![\w.])",
    "share": r"(?<![\w.])(?!95%)\d+(?:\.\d+)?%",
    "clock": r"(?<![\w.:])(?!0\d)\d{1,3}:\d{2}(?![\d:])",  # 8:15 cold
    "count": r"\b\d[\d,]* of (?:the )?\d[\d,]* (?:cells|episodes|replies|days|samples|records|calls|runs|prompts)\b",
}
PATTERN = re.compile("|".join(f"(?P<{k}>{v})" for k, v in MEASURED.items()))
# generated blocks: make docs's, and the runbook's plan table (tests/test_plan.py checks it equals `balms plan`)
GENERATED_BLOCKS = re.compile(r"<!-- BEGIN generated:(\S+) -->.*?<!-- END generated:\1 -->"
                              r"|<!-- plan \S+ -->.*?<!-- /plan -->"
                              r"|<!-- (\S+):start .*? -->.*?<!-- \2:end -->", re.S)  # balms.scoring's table
CODE = re.compile(r"```.*?```|``[^`\n]+``|`[^`\n]*`", re.S)
# Not ours to measure, by the words before it in its sentence: a number the paper states ("the paper 0.48",
# "Table 3: PMData 0.48", "Table 7 gives ... 2.11"), an example ("e.g. 1.80") or hardware ("48 GB GPUs").
CITED = re.compile(r"\bpaper|\bTable \d|\bFigure \d|\bAppendix [A-Z]|\breports?\b|\be\.g\.", re.I)
_END = r"(?:(?<!e\.g)(?<!i\.e)[.;!?]\s|\n\s*\n)"
SENTENCE_END = re.compile(f"{_END}(?!.*{_END})", re.S)
CITED_AFTER = re.compile(r"^[^.;]{0,40}\b(?:in Table \d|in the paper)")
# in a docstring, a quoted string is an example of a format the code reads or writes
QUOTED = re.compile(r'"[^"]{1,200}"')


def _not_ours(prose: str, start: int, end: int) -> bool:
    """Cited from the paper, an example in quotes or after e.g., a version or hardware: not a measured number."""
    before = prose[max(0, start - 160):start]
    m = SENTENCE_END.search(before)
    sentence = before[m.end():] if m else before
    after = prose[end:end + 12]
    return (before.rstrip().endswith(("arXiv", "Python")) or after.startswith("+") or bool(CITED.search(sentence))
            or CITED_AFTER.match(prose[end:end + 80]) is not None
            or sentence.count('"') % 2 == 1 or re.match(r"\)?\s*GPUs?\b|\)\s*GPUs?", after) is not None)


def measured_numbers(text: str, docstring: bool = False) -> list[str]:
    """The measured-looking numbers of a prose text (code spans and blocks, arXiv ids and paper citations aside)."""
    prose = CODE.sub(" ", GENERATED_BLOCKS.sub(" ", text))
    if docstring:
        prose = QUOTED.sub(" ", prose)
    hits = []
    for m in PATTERN.finditer(prose):
        if _not_ours(prose, m.start(), m.end()):
            continue
        line = prose.count("\n", 0, m.start()) + 1
        context = prose[max(0, m.start() - 40):m.end() + 20].replace("\n", " ")
        hits.append(f"line {line}: {m.group(0)!r} ({m.lastgroup}) in '...{context}...'")
    return hits


@functools.cache
def prose_sources() -> dict[str, str]:
    """README, the hand-written docs pages, the notebooks' markdown cells and balms's docstrings, by name."""
    out = {"README.md": (ROOT / "README.md").read_text()}
    for page in sorted((ROOT / "docs").glob("*.md")):
        if page.name != "fidelity.md":  # written by `make fidelity` from balms/resources/fidelity.yaml
            out[f"docs/{page.name}"] = page.read_text()
    for nb in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py")):
        cells = re.split(r"^# %%", nb.read_text(), flags=re.M)
        md = [c for c in cells if c.startswith(" [markdown]")]
        out[f"notebooks/{nb.name} (markdown)"] = "\n".join(
            "\n".join(line[2:] for line in c.splitlines()[1:]) for c in md)
    for prof in sorted((ROOT / "balms" / "profiles").glob("*.yaml")):  # a profile's comments are prose too
        out[f"{prof.relative_to(ROOT)} (comments)"] = "\n".join(
            line.split("#", 1)[1] for line in prof.read_text().splitlines() if "#" in line)
    for py in sorted((ROOT / "balms").rglob("*.py")):
        tree = ast.parse(py.read_text())
        docs = [ast.get_docstring(n, clean=False) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))]
        out[f"{py.relative_to(ROOT)} (docstrings)"] = "\n".join(d for d in docs if d)
    return out


def test_the_generated_files_are_what_make_docs_writes_from_the_committed_results():
    stale = [str(p.relative_to(ROOT)) for p, text in make_docs.rendered().items()
             if not p.exists() or p.read_text() != text]
    assert not stale, f"run `make docs` and commit: {stale}"
    assert set(make_docs.PAGES) == {p.name for p in make_docs.GENERATED.glob("*.md")}, \
        "docs/_generated/ holds a file make docs no longer writes"


def test_a_changed_result_makes_the_generated_files_stale(tmp_path, monkeypatch):
    """The check above can fail: a claims table with one value changed renders another README and claims page."""
    import pandas as pd

    table = pd.read_csv(make_docs.CLAIMS)
    table.loc[table.claim == "personal_baseline_mean", "diff"] += 1.0
    changed = tmp_path / "cpu_study_claims.csv"
    table.to_csv(changed, index=False)
    before = make_docs.rendered()
    monkeypatch.setattr(make_docs, "CLAIMS", changed)
    after = make_docs.rendered()
    assert after[make_docs.README] != before[make_docs.README]
    assert after[make_docs.GENERATED / "claims.md"] != before[make_docs.GENERATED / "claims.md"]


def test_the_runbooks_serving_recipe_follows_the_model_registry(monkeypatch):
    """The runbook's block is `balms deploy local`'s recipe (checked above with every generated file); a changed
    registry changes it, so a hand edit of either shows as stale."""
    from dataclasses import replace

    from balms.models import registry

    before = make_docs.serve_paper_block()
    assert before in make_docs.RUNBOOK.read_text()
    judge = registry.MODELS[registry.JUDGE_MODEL]
    monkeypatch.setitem(registry.MODELS, judge.name, replace(judge, tensor_parallel=4))
    assert make_docs.serve_paper_block() != before


@pytest.mark.parametrize("claims", [make_docs.README_CLAIMS, None], ids=["README", "all"])
def test_every_claims_row_is_labelled_once_with_its_model(claims):
    import pandas as pd

    models = set(pd.read_csv(make_docs.CLAIMS).model.dropna())
    labels = [r[0] for r in make_docs.claims_rows(claims)]
    assert labels and len(labels) == len(set(labels)), "two rows of the claims table read the same"
    assert all(any(m in label for m in models) for label in labels), "a claims row does not name its model"


@pytest.mark.parametrize("name", sorted(prose_sources()))
def test_no_prose_repeats_a_measured_number(name):
    hits = measured_numbers(prose_sources()[name], docstring=name.endswith("(docstrings)"))
    assert not hits, (f"{name} types measured numbers; put them in a file `make docs` writes "
                      "(scripts/make_docs.py) and include or link it:\n" + "\n".join(hits[:30]))


@pytest.mark.parametrize("text, kind", [
    ("the scheduler reached 0.914 of the bound", "ratio"),
    ("a cold run takes 28 minutes on 2 cores", "duration"),
    ("the dry run passed in 831 s", "duration"),
    ("the venv is 5.1 GB", "size"),
    ("prefix reuse gives x5.43", "multiplier"),
    ("the code-block rate was 83%", "share"),
    ("12 of 26 cells gave one answer", "count"),
    ("**Time on the demo profile:** 8:15 cold", "clock"),
])
def test_the_scan_finds_each_kind_of_measured_number(text, kind):
    hits = measured_numbers(text)
    assert len(hits) == 1 and f"({kind})" in hits[0], hits


@pytest.mark.parametrize("text", [
    "Python 3.10+ with vLLM 0.34.0 and SkyPilot 0.14.1",  # versions
    "Wu et al., arXiv 2608.27219",  # the paper's id
    "the paper 0.48 on its windows; the paper's 0.80",  # paper-cited
    "Table 3: PMData 0.48, GLOBEM 0.80; Table 7 gives PHIA on DiversityOne MAE 2.11",  # paper-cited
    'a from->to statement ("decreased from 1.79 on day 3 to 0.85"), e.g. 1.80',  # examples
    "on four 48 GB GPUs",  # hardware
    "a 95% participant-bootstrap interval; goal `0.85`",  # the interval's level, a parameter in code
    "a 15-minute goal, `wall_s: 10`, n = 160 days",  # parameters
    "```text\nwall 831 s\n```",  # a code block
])
def test_the_scan_allows_versions_paper_numbers_and_parameters(text):
    assert measured_numbers(text) == []
