"""Artefact saving, paper-vs-ours tables, the artefact index, and the static HTML report in headless Chromium."""

from __future__ import annotations

import json
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
import pytest

from balms import report
from balms.records import PredictionRecord, Step


@pytest.fixture()
def outdir(tmp_path, monkeypatch):
    monkeypatch.setenv("BALMS_OUTPUT_DIR", str(tmp_path / "out"))
    monkeypatch.setenv("BALMS_RUNS_DIR", str(tmp_path / "runs"))
    return tmp_path


def test_side_by_side_keeps_rows_only_one_side_has():
    ours = pd.DataFrame({"system": ["RAG", "New"], "mae": [0.9, 1.0]})
    paper = pd.DataFrame({"system": ["RAG", "PHIA"], "mae": [0.72, 0.64]})
    m = report.side_by_side(ours, paper, on=["system"], values=["mae"]).set_index("system")
    assert m.loc["RAG", "diff_mae"] == pytest.approx(0.18)
    assert pd.isna(m.loc["PHIA", "ours_mae"]) and pd.isna(m.loc["New", "paper_mae"])


def test_paper_table_unknown_name_lists_known():
    with pytest.raises(FileNotFoundError, match="table3_zero_shot_mae"):
        report.paper_table("table99")


def test_source_label():
    assert report.source_label(["real", "real"]) == "real"
    assert report.source_label(["real", "synthetic"]) == "mixed"
    with pytest.raises(ValueError):
        report.source_label([])


def test_save_table_and_figure_register_in_index(outdir):
    df = pd.DataFrame({"a": [1.0, 2.5]})
    csv = report.save_table(df, "t1", artefact="Table 1", notebook="nb", source="real", profile="demo", caption="c")
    assert csv.read_text().startswith("a\n") and csv.with_suffix(".md").exists() and csv.with_suffix(".tex").exists()
    fig, ax = plt.subplots()
    ax.plot([1, 2])
    png = report.save_figure(fig, "f1", artefact="Figure 1", notebook="nb", source="synthetic", profile="demo")
    assert png.exists() and png.with_suffix(".pdf").exists()
    first = png.read_bytes(), png.with_suffix(".pdf").read_bytes()
    report.save_figure(fig, "f1", artefact="Figure 1", notebook="nb", source="synthetic", profile="demo")
    assert (png.read_bytes(), png.with_suffix(".pdf").read_bytes()) == first
    assert b"/CreationDate" not in first[1]  # no timestamp in the PDF: re-running a notebook doesn't churn git
    report.save_table(df * 2, "t1", artefact="Table 1", notebook="nb", source="real", profile="demo")  # upsert
    idx = report.check_index("demo")
    assert sorted(idx["artefact"]) == ["Figure 1", "Table 1"]
    assert list(idx.columns[:4]) == ["artefact", "path", "notebook", "source"]
    csv.unlink()
    with pytest.raises(FileNotFoundError, match="t1.csv"):
        report.check_index("demo")


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "a" and a.get("href"):
            self.links.append(a["href"])
        if tag == "img" and a.get("src"):
            self.links.append(a["src"])


def _all_links_resolve(root: Path) -> list[str]:
    broken = []
    for page in root.rglob("*.html"):
        p = _Links()
        p.feed(page.read_text())
        for href in p.links:
            if href.startswith(("http:", "https:", "#", "mailto:", "data:")):
                continue
            if not (page.parent / href.split("#")[0]).exists():
                broken.append(f"{page.relative_to(root)} -> {href}")
    return broken


def _fake_run(outdir: Path) -> None:
    rec = PredictionRecord(sample_id="pmdata/p01/2019-11-20/L14", dataset="pmdata", user="p01",
                           target_date="2019-11-20", lookback=14, label=3, source="real", system="phia", cot=True,
                           model="smollm2-135m", model_id="gguf:x", prediction=None, parse_error="no answer",
                           raw_answer="<script>alert(1)</script>",
                           transcript=[Step(kind="code", content="print(df.mean())"),
                                       Step(kind="observation", content="Code executed (no output)",
                                            meta={"status": "no_output"})])
    run = outdir / "runs" / "demo" / "pmdata" / "phia__smollm2__cot.jsonl"
    run.parent.mkdir(parents=True)
    run.write_text(rec.model_dump_json() + "\n" + '{"torn": ')
    run.with_name(run.stem + ".judge.jsonl").write_text(json.dumps({"sample_id": rec.sample_id, "status": "unscored",
                                                                     "unscored_reason": "invalid_output"}) + "\n")
    report.save_table(pd.DataFrame({"x": [1]}), "t", artefact="Table 3", notebook="01", source="real", profile="demo")


def test_html_report_pages_and_links(outdir):
    from balms.report_html import build_report

    _fake_run(outdir)
    index = build_report("demo", outdir / "report")
    text = index.read_text()
    assert "Table 3" in text and "phia__smollm2__cot" in text
    rec_pages = list((outdir / "report" / "runs").rglob("0.html"))
    assert len(rec_pages) == 1
    page = rec_pages[0].read_text()
    assert "Code executed (no output)" in page and "invalid_output" in page
    assert "<script>alert(1)</script>" not in page  # escaped
    assert _all_links_resolve(outdir / "report") == []


@pytest.mark.slow
def test_html_report_renders_in_headless_chromium(outdir):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        pytest.skip("chromium not installed (make install-browser)")
    from balms.report_html import build_report

    _fake_run(outdir)
    index = build_report("demo", outdir / "report")
    rec_page = next((outdir / "report" / "runs").rglob("0.html"))
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={outdir / 'chrome'}"]
    for page, expect in ((index, "Tables and figures"), (rec_page, "Transcript")):
        dom = subprocess.run([chromium, *flags, "--dump-dom", page.as_uri()], capture_output=True, text=True,
                             timeout=120).stdout
        assert expect in dom, f"{page} did not render: {dom[:300]}"
    shot = outdir / "shot.png"
    subprocess.run([chromium, *flags, f"--screenshot={shot}", "--window-size=1000,800", index.as_uri()],
                   capture_output=True, timeout=120)
    assert shot.exists() and shot.stat().st_size > 5000


def test_report_refuses_a_non_empty_folder_it_did_not_create(outdir):
    from balms.report_html import ReportDirError, build_report

    mine = outdir / "thesis"
    mine.mkdir()
    (mine / "chapter1.tex").write_text("precious")
    with pytest.raises(ReportDirError, match=r"thesis.*non-empty folder.*\.balms-report"):
        build_report("demo", mine)
    assert (mine / "chapter1.tex").read_text() == "precious"
    assert sorted(p.name for p in mine.iterdir()) == ["chapter1.tex"]
    assert report.main(["html", "--profile", "demo", "--out", str(mine)]) == 2  # the CLI says so, exit code 2
    assert (mine / "chapter1.tex").exists()
    a_file = outdir / "notes.txt"
    a_file.write_text("x")
    with pytest.raises(ReportDirError, match="not a folder"):
        build_report("demo", a_file)


def test_report_reuses_an_empty_folder_and_replaces_its_own(outdir):
    from balms.report_html import MARKER, build_report

    out = outdir / "rep"
    out.mkdir()
    build_report("demo", out)  # empty: fine
    assert (out / MARKER).is_file() and (out / "index.html").is_file()
    (out / "stale.html").write_text("old")
    (out / "runs" / "old_run").mkdir()
    build_report("demo", out)  # marked as ours: replaced, stale files gone
    assert not (out / "stale.html").exists() and not (out / "runs" / "old_run").exists()
    assert (out / MARKER).is_file() and (out / "index.html").is_file()


def test_report_autoescapes_every_record_field(outdir):
    from balms.report_html import build_report

    evil = "<script>alert(1)</script>"
    rec = PredictionRecord(sample_id=f"pmdata/p01/{evil}/L14", dataset="pmdata", user="p01", target_date="2019-11-20",
                           lookback=14, label=3, source="real", system=evil, cot=False, model=evil, model_id=evil,
                           prediction=None, parse_error=evil, raw_answer=evil, error=evil,
                           transcript=[Step(kind=evil, content=evil, meta={"status": evil})])
    run = outdir / "runs" / "demo" / "pmdata" / "x.jsonl"
    run.parent.mkdir(parents=True)
    run.write_text(rec.model_dump_json() + "\n")
    run.with_name("x.judge.jsonl").write_text(json.dumps({"sample_id": rec.sample_id, "why": evil}) + "\n")
    report.save_table(pd.DataFrame({"x": [1]}), "t", artefact=evil, notebook=evil, source="real", profile="demo")
    build_report("demo", outdir / "report")
    pages = list((outdir / "report").rglob("*.html"))
    assert len(pages) == 3  # index, run, record
    for page in pages:
        text = page.read_text()
        assert "<script" not in text, page
    rec_page = next((outdir / "report" / "runs").rglob("0.html")).read_text()
    assert rec_page.count("&lt;script&gt;") >= 8  # sample, system, model, model id, error, answer, step, verdict
    assert "&lt;script&gt;" in (outdir / "report" / "index.html").read_text()  # the artefact name


def test_report_modules_do_not_import_each_other():
    """report imports report_html lazily (for `html`); report_html must not import report at all."""
    import subprocess
    import sys

    code = "import sys, balms.report_html; print('balms.report' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parent.parent)
    assert out.stdout.strip() == "False"
