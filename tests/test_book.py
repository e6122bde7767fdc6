"""The book and the README as a front door: nothing of the old README lost, the book built from the committed
executed notebooks and checked in a real browser (every page, image and internal link; no console error)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from cdp_browser import Browser, chromium_path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
sys.path.insert(0, str(ROOT / "scripts"))
import build_book  # noqa: E402
import make_docs  # noqa: E402

# the ## / ### headings of the README as it was before the book (git show main:README.md, 3 Dec 2026)
OLD_HEADINGS = (Path(__file__).parent / "fixtures" / "readme_headings_main.txt").read_text().splitlines()
MD_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _doc_headings() -> set[str]:
    return {m.group(1).strip() for p in DOCS.glob("*.md")
            for m in re.finditer(r"^#{1,6} (.+)$", p.read_text(), re.M)}


def test_every_heading_of_the_old_readme_is_a_heading_in_the_book():
    assert len(OLD_HEADINGS) == 15 and "Honesty notes" in OLD_HEADINGS
    missing = [h for h in OLD_HEADINGS if h not in _doc_headings()]
    assert not missing, f"sections of the old README with no heading in docs/*.md: {missing}"


def test_readme_is_a_front_door():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150, f"README.md has {len(text.splitlines())} lines; the book holds the detail"
    assert "make install" in text and "make test" in text and "make book" in text and "make lab" in text
    links = MD_LINK.findall(text)
    assert "build/book/index.html" in links, "the README links the built book"
    for rel in ("docs/runbook.md", "docs/architecture.md"):
        assert rel in links
    assert any(link.startswith("notebooks/executed/demo/") for link in links), "a reviewer's one notebook"
    # every relative link and inline image of the README resolves (the built book aside: `make book` makes it)
    broken = [link for link in links if "://" not in link and not link.startswith("build/")
              and not (ROOT / link.split("#")[0]).exists()]
    assert not broken, f"README.md links to missing files: {broken}"
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert images and all(img.startswith(("figures/", "results/")) for img in images)


def test_layer_diagram_says_what_the_architecture_test_enforces():
    sys.path.insert(0, str(Path(__file__).parent))
    from test_architecture import LAYERS

    block = re.search(r"```text\n(.*?)```", (DOCS / "architecture.md").read_text(), re.S).group(1)
    drawn = {}
    for line in block.splitlines():
        m = re.match(r"layer (\d+)\s+(.+?)\s{2,}", line)
        assert m, f"architecture.md diagram line not 'layer N  modules  what': {line!r}"
        drawn.update({f"balms.{name}": int(m.group(1)) for name in m.group(2).split()})
    # a module listed apart only to restate its package's layer (balms.experiments.config) needs no line of its own
    enforced = {k: v for k, v in LAYERS.items() if k != "balms"
                and not (k.count(".") > 1 and LAYERS.get(k.rpartition(".")[0]) == v)}
    assert drawn == enforced


def test_paths_the_architecture_page_names_exist():
    text = (DOCS / "architecture.md").read_text()
    named = set(re.findall(r"`((?:balms|scripts|docs|tests|requirements)/[\w./]+)`", text))
    assert len(named) > 20
    missing = sorted(p for p in named if not (ROOT / p).exists())
    assert not missing, f"docs/architecture.md names files that do not exist: {missing}"


def _first_markdown(py: Path) -> str:
    cells = re.split(r"^# %%", py.read_text(), flags=re.M)
    md = next(c for c in cells[1:] if c.startswith(" [markdown]"))
    return "\n".join(line[2:] for line in md.splitlines()[1:])


@pytest.mark.parametrize("name", build_book.notebook_sources())
def test_each_notebook_opens_for_a_student(name):
    """What it teaches, the paper artefact, what to look at, and where its measured demo time is (the header types
    no number: the book appends the measured one from bench/paper_timing.json)."""
    first = _first_markdown(ROOT / "notebooks" / f"{name}.py")
    musts = ("**What it teaches:**", "**Paper artefact:**", "**What to look at:**", build_book.TIME_LINE)
    for must in musts:
        assert must in first, f"notebooks/{name}.py's first markdown cell lacks {must}"
    timing = json.loads((ROOT / "bench" / "paper_timing.json").read_text())["demo"]
    if name in timing["cold"]["notebooks_s"]:
        assert "docs/_generated/timing.md" in first, f"notebooks/{name}.py should point at the timing table"
        nb = {"cells": [{"cell_type": "markdown", "source": first, "metadata": {}}]}
        assert build_book.state_timing(nb, name)
        cold = build_book.make_docs._mmss(timing["cold"]["notebooks_s"][name])
        assert f"Measured: {cold} cold" in nb["cells"][0]["source"]
    else:  # not part of the demo profile
        assert "not part of the demo profile" in first


def test_parameter_cells_are_collapsed_in_the_book():
    nb = {"cells": [{"cell_type": "code", "metadata": {"tags": ["parameters"]}, "source": "x = None"},
                    {"cell_type": "code", "metadata": {"tags": ["injected-parameters"]}, "source": "x = 1"},
                    {"cell_type": "code", "metadata": {}, "source": "print(x)"}]}
    assert build_book.hide_parameters(nb) == 2
    assert [c["metadata"]["tags"] for c in nb["cells"]] == [["parameters", "hide-cell"],
                                                            ["injected-parameters", "hide-cell"], []]


# an absolute path of some machine: the checkout, a home folder, or the usual roots of a workspace
MACHINE_PATH = re.compile(r"(?<![\w.~])/(?:home|root|work|Users|mnt|srv|opt|private|var/folders)/[\w.-]+")


def _machine_paths(text: str) -> list[str]:
    return sorted(set(MACHINE_PATH.findall(text)) | ({str(ROOT)} if str(ROOT) in text else set()))


def test_no_committed_notebook_names_a_machine_path():
    committed = sorted((ROOT / "notebooks" / "executed").rglob("*.ipynb"))
    assert committed, "no executed notebook committed"
    found = {str(p.relative_to(ROOT)): _machine_paths(p.read_text()) for p in committed}
    found = {k: v for k, v in found.items() if v}
    assert not found, ("executed notebooks name machine paths (make paper runs scripts/sanitize_notebook.py; run it "
                       f"on these): {found}")


def test_sanitize_removes_the_checkout_and_home_paths(tmp_path, monkeypatch):
    import sanitize_notebook

    monkeypatch.setenv("HOME", "/home/someone")
    nb = {"cells": [{"cell_type": "code", "source": "save()", "metadata": {}, "outputs": [
        {"output_type": "execute_result", "data": {"text/plain": f"PosixPath('{ROOT}/figures/x.png')",
                                                   "image/png": "iVBOR/home/someone/"}},
        {"output_type": "stream", "name": "stderr", "text": "cache at /home/someone/.cache/balms\n"}]}],
        "metadata": {}}
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(nb))
    assert _machine_paths(path.read_text())
    assert sanitize_notebook.sanitize_file(path)
    out = json.loads(path.read_text())["cells"][0]["outputs"]
    assert out[0]["data"]["text/plain"] == "PosixPath('./figures/x.png')"
    assert out[0]["data"]["image/png"] == "iVBOR/home/someone/"  # image data is never rewritten
    assert out[1]["text"] == "cache at ~/.cache/balms\n"
    assert not sanitize_notebook.sanitize_file(path)  # nothing left to do


def test_figure_captions_come_from_the_artefact_index():
    row = {"artefact": "Table 3 (figure)", "caption": "", "models": "qwen2.5-coder-0.5b", "source": "real", "n": "20.0"}
    cap = build_book.figure_caption(row)
    assert cap.startswith("**Table 3 (figure)**.") and "qwen2.5-coder-0.5b (embedded CPU model" in cap
    assert "data: real" in cap and "n = 20" in cap
    nb = {"cells": [{"cell_type": "code", "source": ['report.save_figure(fig, "table3_zero_shot_mae", artefact=1)'],
                     "metadata": {}, "outputs": [{"output_type": "display_data", "data": {"image/png": "x"}}]}]}
    with pytest.raises(KeyError, match="no row in the artefact index"):
        build_book.caption_figures(json.loads(json.dumps(nb)), {}, "nb")
    assert build_book.caption_figures(nb, {"table3_zero_shot_mae": row}, "nb") == 1
    code, figure = nb["cells"]
    assert code["outputs"] == [] and figure["outputs"][0]["data"] == {"image/png": "x"}
    assert figure["metadata"]["mystnb"]["figure"]["name"] == "fig-table3-zero-shot-mae"
    nb["cells"] = [code]
    with pytest.raises(ValueError, match="shows 0 images"):
        build_book.caption_figures(nb, {"table3_zero_shot_mae": row}, "nb")
    assert build_book.caption_figures(nb, {}, "nb") == 0  # a branch that saved no figure: nothing to caption


# ---- the built book in a real browser --------------------------------------------------------------------------

PAGE_CHECK = """(() => {
  const imgs = [...document.images].map(i => ({src: i.currentSrc || i.src, ok: i.complete && i.naturalWidth > 0}));
  const links = [...document.querySelectorAll('a[href]')].map(a => a.href);
  const ids = [...document.querySelectorAll('[id]')].map(e => e.id);
  return {imgs, links, ids, title: document.title};
})()"""


@pytest.fixture(scope="module")
def book(tmp_path_factory):
    if chromium_path() is None:
        pytest.skip("chromium not installed (make install-browser)")
    out = tmp_path_factory.mktemp("book")
    t0 = time.perf_counter()
    # BALMS_BOOK_EXECUTED=DIR: the demo's executed notebooks from DIR (e.g. a replay's) instead of the committed ones;
    # or PROFILE=DIR[,PROFILE=DIR] for any profile (the CPU study's notebook 08)
    given = os.environ.get("BALMS_BOOK_EXECUTED", "")
    other = [x for item in filter(None, given.split(","))
             for x in ("--executed", item if "=" in item else f"demo={item}")]
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "build_book.py"), "--out", str(out / "html"),
                        "--src", str(out / "src"), *other], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"make book failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    print(f"book built in {time.perf_counter() - t0:.1f} s")
    browser = Browser(out / "chrome")
    yield out / "html", browser
    browser.close()


@pytest.mark.slow
def test_book_every_page_image_and_link_in_chromium(book):
    html, browser = book
    pages = sorted(p for p in html.rglob("*.html") if "_static" not in p.parts)
    assert len(pages) >= 20
    seen_ids: dict[Path, set[str]] = {}
    links: list[tuple[Path, str]] = []
    problems = []
    for page in pages:
        errors = browser.load(page.as_uri())
        info = browser.evaluate(PAGE_CHECK)
        problems += [f"{page.relative_to(html)}: {e}" for e in errors]
        problems += [f"{page.relative_to(html)}: image did not load: {i['src']}" for i in info["imgs"] if not i["ok"]]
        seen_ids[page] = set(info["ids"])
        links += [(page, link) for link in info["links"] if link.startswith("file://")]
    for page, link in links:
        u = urlparse(link)
        target = Path(unquote(u.path))
        if target.is_dir():
            target = target / "index.html"
        if not target.exists():
            problems.append(f"{page.relative_to(html)}: broken link {link}")
        elif u.fragment and target in seen_ids and unquote(u.fragment) not in seen_ids[target]:
            problems.append(f"{page.relative_to(html)}: link to a missing anchor {link}")
    assert not problems, "\n".join(problems[:40])
    notebook_pages = {p.stem for p in (html / "notebooks").glob("*.html")}
    assert set(build_book.notebook_sources()) <= notebook_pages


@pytest.mark.slow
def test_two_clicks_from_the_readme_to_table3s_figure(book):
    """README -> the book's front page -> notebook 01's Table 3 figure, with its caption and the paper beside ours."""
    html, browser = book
    readme_links = MD_LINK.findall((ROOT / "README.md").read_text())
    front = html / Path(next(link for link in readme_links if link.startswith("build/book/"))).relative_to("build/book")
    assert not browser.load(front.as_uri())  # click 1
    href = browser.evaluate("[...document.querySelectorAll('article a')]"
                            ".find(a => a.textContent.includes('Table 3 figure')).href")
    assert "#fig-table3-zero-shot-mae" in href
    assert not browser.load(href)  # click 2
    fig = browser.evaluate("""(() => { const f = document.getElementById(location.hash.slice(1));
      const img = f && f.querySelector('img'); const cap = f && f.querySelector('figcaption');
      return f && {img: !!img && img.complete && img.naturalWidth > 300, caption: cap ? cap.textContent : ''}; })()""")
    assert fig and fig["img"], f"{href}: no loaded figure at the link's anchor"
    assert "Table 3" in fig["caption"] and "qwen2.5" in fig["caption"] and "data:" in fig["caption"]
    assert "n = " in fig["caption"]
    heads = browser.evaluate("[...document.querySelectorAll('article table th')].map(th => th.textContent)")
    assert any(h.startswith("paper Qwen2.5") for h in heads) and any(h.startswith("ours qwen2.5") for h in heads), \
        "Table 3 with the paper's backbones and ours, column by column, is on the figure's page"


WIDTH = 1280
# every table and preformatted block either fits the article column or sits in a scroll container that does
CLIPPED = """(() => {
  const art = (document.querySelector('article') || document.body).getBoundingClientRect();
  const out = [];
  for (const el of document.querySelectorAll('article table, article pre')) {
    const r = el.getBoundingClientRect();
    let box = null, cut = null;
    for (let a = el.parentElement; a && a !== document.body && !box && !cut; a = a.parentElement) {
      const o = getComputedStyle(a).overflowX;
      if (o === 'auto' || o === 'scroll') box = a;
      else if ((o === 'hidden' || o === 'clip') && r.right > a.getBoundingClientRect().right + 1) cut = a;
    }
    const outer = (box || el).getBoundingClientRect();
    const own = getComputedStyle(el).overflowX;
    const hidden = (own === 'hidden' || own === 'clip') && el.scrollWidth > el.clientWidth + 1;
    if (cut || hidden || outer.left < art.left - 1 || outer.right > art.right + 1)
      out.push(`${el.tagName.toLowerCase()} "${el.textContent.trim().slice(0, 60)}": ` +
        `${Math.round(r.left)}-${Math.round(r.right)} px in an article of ` +
        `${Math.round(art.left)}-${Math.round(art.right)}` + (cut ? ', cut by its container' : ''));
  }
  return out;
})()"""


@pytest.mark.slow
def test_book_at_1280px_clips_no_table_renders_notebook_08_and_a_real_phia_step(book):
    html, browser = book
    browser.call("Emulation.setDeviceMetricsOverride", width=WIDTH, height=900, deviceScaleFactor=1, mobile=False)
    clipped = {}
    for page in sorted(p for p in html.rglob("*.html") if "_static" not in p.parts):
        browser.load(page.as_uri())
        if found := browser.evaluate(CLIPPED):
            clipped[str(page.relative_to(html))] = found[:5]
    assert not clipped, f"clipped at {WIDTH} px: {clipped}"
    # the check can fail: the same table moved into a narrow box that hides its overflow is reported
    browser.load((html / "fidelity.html").as_uri())
    browser.evaluate("""(() => { const t = document.querySelector('article table'), d = document.createElement('div');
      d.style.overflow = 'hidden'; d.style.width = '300px'; t.parentElement.insertBefore(d, t); d.appendChild(t);
      t.style.display = 'table'; })()""")
    assert any("cut by its container" in c for c in browser.evaluate(CLIPPED))

    nb08 = html / "notebooks" / "08_cpu_study.html"
    assert nb08.exists(), "notebook 08 has no page"
    assert not browser.load(nb08.as_uri())
    shown = browser.evaluate("""({outputs: document.querySelectorAll('.cell_output').length,
      images: [...document.images].filter(i => i.complete && i.naturalWidth > 300).length,
      text: document.querySelector('article').textContent})""")
    assert shown["outputs"] > 5 and shown["images"] >= 1, f"notebook 08 is not rendered executed: {shown['outputs']}"
    assert "Not executed" not in shown["text"]

    name, record = make_docs.phia_example()
    codes = [t["content"].strip() for t in record["transcript"] if t["kind"] == "code"]
    outputs = [t["content"].strip() for t in record["transcript"] if t["kind"] == "observation"]
    assert not browser.load((html / "inside-agents.html").as_uri())
    page = browser.evaluate("""({code: [...document.querySelectorAll('.phia-code pre')].map(p => p.textContent.trim()),
      output: [...document.querySelectorAll('.phia-output pre')].map(p => p.textContent.trim()),
      text: document.querySelector('article').textContent})""")
    assert page["code"] and page["code"][0] == codes[0], "the page's first PHIA code step is not the record's"
    assert page["output"] and set(page["output"]) <= set(outputs), "a PHIA output on the page is not the record's"
    assert record["sample_id"] in page["text"] and name in page["text"]
    math = browser.evaluate("document.querySelectorAll('math').length")
    assert not browser.load((html / "method.html").as_uri())
    assert browser.evaluate("document.querySelectorAll('article math').length") >= 4, math
