"""Artefact saving, paper-vs-ours tables, the artefact index, and the static HTML report in headless Chromium."""

from __future__ import annotations

import json
import re
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
from balms.cli import main
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
    assert main(["report", "html", "--profile", "demo", "--out", str(mine)]) == 2  # the CLI says so, exit code 2
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
    run = outdir / "runs" / "escape-test" / "pmdata" / "x.jsonl"
    run.parent.mkdir(parents=True)
    run.write_text(rec.model_dump_json() + "\n")
    run.with_name("x.judge.jsonl").write_text(json.dumps({"sample_id": rec.sample_id, "why": evil}) + "\n")
    report.save_table(pd.DataFrame({"x": [1]}), "t", artefact=evil, notebook=evil, source="real", profile="escape-test")
    build_report("escape-test", outdir / "report")  # no executed notebooks of a real profile
    pages = list((outdir / "report").rglob("*.html"))
    assert len(pages) == 3  # index, run, record
    for page in pages:
        text = page.read_text()
        scripts = re.findall(r"<script\b[^>]*>", text)  # only the report's own shipped script, nothing inline
        ours = r'<script src="(\.\./)*static/report\.js" defer>'
        assert scripts and all(re.fullmatch(ours, t) for t in scripts), page
        assert "<script>" not in text, page
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


# ---- run pages as a place to learn from: summary, filters driven by the URL, the same sample elsewhere ----
SIDS = [f"pmdata/{u}/2019-11-{d}/L14" for u, d in (("p01", 20), ("p01", 21), ("p01", 22), ("p02", 20), ("p02", 21))]
LABELS = [3, 4, 2, 5, 5]


def _rec(i: int, system: str, model: str, **kw) -> PredictionRecord:
    u = SIDS[i].split("/")[1]
    base = dict(sample_id=SIDS[i], dataset="pmdata", user=u, target_date=SIDS[i].split("/")[2], lookback=14,
                label=LABELS[i], source="synthetic", system=system, cot=False, model=model, model_id=f"gguf:{model}",
                prediction=LABELS[i], raw_answer=f"Answer: {LABELS[i]}", latency_s=1.0 + i, prompt_tokens=100 * (i + 1),
                completion_tokens=10, n_steps=2, cell={"key": f"{system}{model}", "dataset": "pmdata", "lookback": 14})
    return PredictionRecord(**(base | kw))


def _obs(status: str, text: str = "...") -> Step:
    return Step(kind="observation", content=text, meta={"status": status})


def _grid_runs(outdir: Path) -> dict[tuple[str, str], Path]:
    """Two systems x two backbones over the same five samples. phia/model-a holds one of each failure:
    sample 1 wrong with a failing code block, 2 unparseable after a forced finish, 3 a harness error,
    4 right despite a timed-out block. rag/model-b lacks sample 4."""
    runs = {}
    for system in ("phia", "rag"):
        for model in ("model-a", "model-b"):
            recs = [_rec(i, system, model) for i in range(5)]
            if (system, model) == ("phia", "model-a"):
                recs[0].transcript = [Step(kind="code", content="print(1)"), _obs("ok", "1")]
                recs[1] = _rec(1, system, model, prediction=2, raw_answer="Answer: 2",
                               transcript=[Step(kind="code", content="print(x)"),
                                           _obs("error", "NameError: name 'x' is not defined")])
                recs[2] = _rec(2, system, model, prediction=None, parse_error="no score in the answer",
                               raw_answer="I cannot tell", transcript=[_obs("no_output", "Code executed (no output)"),
                                                                       Step(kind="forced_finish", content="...")])
                recs[3] = _rec(3, system, model, prediction=None, raw_answer="", n_steps=0,
                               error="BackendError (permanent): boom")
                recs[4].transcript = [Step(kind="code", content="while True: pass"), _obs("timeout", "timed out")]
            if (system, model) == ("rag", "model-b"):
                recs = recs[:4]
            run = outdir / "runs" / "demo" / "pmdata" / f"{system}__{model}__zs__L14__{system}{model}.jsonl"
            run.parent.mkdir(parents=True, exist_ok=True)
            run.write_text("".join(r.model_dump_json() + "\n" for r in recs))
            runs[(system, model)] = run
    return runs


class _Page(HTMLParser):
    """Rows of the predictions table (sample, flags, hidden), the same-sample links, and text by element id."""

    def __init__(self):
        super().__init__()
        self.rows, self.same, self.by_id = [], [], {}
        self._table = None
        self._open: list[tuple[str, str]] = []  # (tag, id) of the open elements that have an id

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table":
            self._table = a.get("id")
        if tag == "tr" and self._table == "predictions" and "data-sample" in a:
            self.rows.append({"sample": a["data-sample"], "flags": a.get("data-flags", "").split(),
                              "hidden": "hidden" in a})
        if tag == "a" and self._table == "same-sample":
            self.same.append(a["href"])
        if a.get("id"):
            self._open.append((tag, a["id"]))
            self.by_id[a["id"]] = ""

    def handle_data(self, data):
        for _, i in self._open:
            self.by_id[i] += data

    def handle_endtag(self, tag):
        if tag == "table":
            self._table = None
        if self._open and self._open[-1][0] == tag:
            self._open.pop()


def _parse(html: str) -> _Page:
    p = _Page()
    p.feed(html)
    return p


def _run_page(report_root: Path, system: str, model: str) -> Path:
    (page,) = (report_root / "runs").glob(f"pmdata__{system}__{model}__*.html")
    return page


def test_run_page_summary_matches_metrics_and_rows_carry_their_failures(outdir):
    from balms import metrics
    from balms.report_html import build_report

    runs = _grid_runs(outdir)
    build_report("demo", outdir / "report")
    page = _parse(_run_page(outdir / "report", "phia", "model-a").read_text())
    flags = {r["sample"]: sorted(r["flags"]) for r in page.rows}
    assert flags == {SIDS[0]: [], SIDS[1]: ["code_error", "wrong"], SIDS[2]: ["forced_finish", "unparseable"],
                     SIDS[3]: ["harness_error"], SIDS[4]: ["code_error"]}
    assert not any(r["hidden"] for r in page.rows)  # without JS every row shows
    recs = [json.loads(line) for line in runs[("phia", "model-a")].read_text().splitlines()]
    ci = metrics.mae_ci(recs)
    assert round(ci["mae"], 2) == 0.67  # |4-2| over the three parsed predictions
    mae_text = " ".join(page.by_id["mae"].split())
    assert mae_text.startswith(f"{ci['mae']:.2f} (95% CI {ci['ci_low']:.2f} – {ci['ci_high']:.2f}"), mae_text
    # the harness error is counted apart: 1 parse failure of the 4 answered samples
    assert " ".join(page.by_id["parse-failures"].split()).startswith("25% (1 of the 4 answered)")
    assert " ".join(page.by_id["errors"].split()).startswith("1 of 5")
    # of the 4 answered samples each answer appears once; ties go to the label that sorts first as text
    assert " ".join(page.by_id["modal"].split()) == f"{metrics.mode_collapse(recs)['modal_label']} (25% of predictions)"
    assert page.by_id["n"].strip() == "5"
    index = (outdir / "report" / "index.html").read_text()
    assert "0.67 (" in index and "25%" in index


def test_sample_pages_link_to_the_same_sample_under_every_other_system_and_backbone(outdir):
    from balms.report_html import build_report

    _grid_runs(outdir)
    root = outdir / "report"
    build_report("demo", root)
    rec_dir = _run_page(root, "phia", "model-a").with_suffix("")
    for i, n_other in ((0, 3), (4, 2)):  # rag/model-b lacks sample 4
        page = rec_dir / f"{i}.html"
        links = _parse(page.read_text()).same
        assert len(links) == n_other, links
        targets = {(page.parent / href).resolve() for href in links}
        assert all(t.is_file() for t in targets), links
        for t in targets:
            text = t.read_text()
            assert f"Sample <b>{SIDS[i]}</b>" in text  # the very same sample, not the same row number
            assert page.resolve() in {(t.parent / h).resolve() for h in _parse(text).same}  # and back
        systems = {(t.parent.name.split("__")[1], t.parent.name.split("__")[2]) for t in targets}
        assert systems == {("phia", "model-b"), ("rag", "model-a"), ("rag", "model-b")} - (
            {("rag", "model-b")} if i == 4 else set())
    assert _all_links_resolve(root) == []


def test_static_assets_ship_and_code_error_statuses_are_sandbox_statuses(outdir):
    from balms.report_html import CODE_ERROR_STATUSES, FILTERS, STATIC_FILES, build_report
    from balms.sandbox import STATUSES

    assert set(CODE_ERROR_STATUSES) < set(STATUSES) and "ok" not in CODE_ERROR_STATUSES
    build_report("demo", outdir / "report")
    for name in STATIC_FILES:
        assert (outdir / "report" / "static" / name).stat().st_size > 100
    js = (outdir / "report" / "static" / "report.js").read_text()
    assert "http" not in js  # nothing fetched from anywhere
    assert [f[0] for f in FILTERS][0] == "all"


def _chromium_or_skip() -> str:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        pytest.skip("chromium not installed (make install-browser): the client-side filter cannot be checked")
    return chromium


def _dump_dom(chromium: str, url: str, profile_dir: Path) -> str:
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile_dir}"]
    p = subprocess.run([chromium, *flags, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert "<body" in p.stdout, f"{url}: chromium printed no DOM: {p.stderr[-500:]}"
    return p.stdout


@pytest.mark.slow
def test_run_page_filter_from_the_url_in_headless_chromium(outdir):
    chromium = _chromium_or_skip()
    from balms.report_html import build_report

    _grid_runs(outdir)
    build_report("demo", outdir / "report")
    url = _run_page(outdir / "report", "phia", "model-a").as_uri()
    expect = {"": [0, 1, 2, 3, 4], "#filter=all": [0, 1, 2, 3, 4], "#filter=wrong": [1],
              "#filter=unparseable": [2], "#filter=forced_finish": [2], "#filter=code_error": [1, 4],
              "#filter=harness_error": [3], "?filter=code_error": [1, 4], "#filter=nonsense": [0, 1, 2, 3, 4]}
    for suffix, want in expect.items():
        page = _parse(_dump_dom(chromium, url + suffix, outdir / "chrome"))
        shown = [r["sample"] for r in page.rows if not r["hidden"]]
        assert shown == [SIDS[i] for i in want], suffix
        status = " ".join(page.by_id["filter-status"].split())
        if suffix.endswith("nonsense"):
            assert status.startswith("unknown filter"), status
        else:
            assert status.startswith(f"showing {len(want)} of 5 predictions"), status
