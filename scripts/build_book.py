"""Build the book: the pages in docs/ plus the executed notebooks as committed, rendered by Sphinx + myst-nb.

No notebook is executed (myst-nb's execution is off): the book shows exactly what `make paper` committed under
notebooks/executed/<profile>/. The sources are staged in a build folder first, so nothing is written into docs/
or notebooks/: the notebooks are copied there with a caption on every figure a notebook saves (the figure's row
in its profile's artefact index gives the artefact, the models, the data source and n), their parameter cells
collapsed and the demo's measured time added to their header, and the committed figures are copied beside the
pages that show them. Every notebook must have its executed copy: the demo's, and the CPU study's notebook 08.

    python scripts/build_book.py [--out build/book] [--executed demo=DIR] [--executed cpu-study=DIR]
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
sys.path.insert(0, str(ROOT / "scripts"))
import make_docs  # noqa: E402  (the one formatting of a measured time)

# where each profile's executed notebooks and artefact index are committed, and the notebooks each must provide:
# the demo every notebook but the CPU study's, the CPU study its notebook 08 (every notebook has a page)
PROFILES = {
    "demo": {"executed": ROOT / "notebooks" / "executed" / "demo", "index": ROOT / "tables" / "index.csv",
             "provides": lambda name: name != "08_cpu_study"},
    "cpu-study": {"executed": ROOT / "notebooks" / "executed" / "cpu-study",
                  "index": ROOT / "results" / "cpu-study" / "tables" / "index.csv",
                  "provides": lambda name: name == "08_cpu_study"},
}
PARAMETER_TAGS = {"parameters", "injected-parameters"}
TIME_LINE = "**Time on the demo profile:**"
# committed figures the pages embed (copied to the same relative place in the staged sources)
ARTEFACT_DIRS = [Path("figures"), Path("results") / "cpu-study" / "figures"]
SAVE_FIGURE = re.compile(r"save_figure\(\s*\w+\s*,\s*[\"']([^\"']+)[\"']")


def notebook_sources() -> list[str]:
    """The notebooks the project has (their py:percent sources), by name."""
    return sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.py"))


def read_index(path: Path) -> dict[str, dict]:
    """Figure rows of an artefact index, by the figure's file stem."""
    if not path.exists():
        raise FileNotFoundError(f"{path}: no artefact index; the executed notebooks' figures cannot be captioned")
    with path.open(newline="") as f:
        return {Path(r["path"]).stem: r for r in csv.DictReader(f) if r["path"].endswith(".png")}


def figure_caption(row: dict) -> str:
    """'Table 3 (figure): ... Model: ...; data: real; n = 10.' from one index row."""
    from balms.report import model_caption  # the same label every table and figure carries

    models = [m for m in row["models"].split(";") if m]
    n = f"{float(row['n']):.0f}" if row.get("n") not in (None, "") else "not recorded"
    text = f"**{row['artefact']}**{': ' + row['caption'] if row.get('caption') else ''}."
    model = model_caption(models) if models else "none (no model call)"
    return f"{text} Model: {model}; data: {row['source']}; n = {n}."


def caption_figures(nb: dict, index: dict[str, dict], where: str) -> int:
    """Caption each figure a cell saves; returns how many.

    The figure's image moves to its own input-less cell right after the code (myst-nb captions every output of a
    cell, and a cell may also show a table); that cell carries the caption and the label fig-<stem>.
    """
    done, cells = 0, []
    for i, cell in enumerate(nb["cells"]):
        cells.append(cell)
        if cell["cell_type"] != "code":
            continue
        stems = SAVE_FIGURE.findall("".join(cell["source"]))
        if not stems:
            continue
        if len(stems) > 1:
            raise ValueError(f"{where} cell {i}: saves {len(stems)} figures ({stems}); one per cell can be captioned")
        stem = stems[0]
        images = [o for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
        if stem not in index and not images:
            continue  # the branch that saves it did not run (the cell's output says why)
        if stem not in index:
            raise KeyError(f"{where} cell {i}: figure {stem!r} has no row in the artefact index; re-run make paper")
        if len(images) != 1:
            raise ValueError(f"{where} cell {i}: saves figure {stem!r} but shows {len(images)} images; "
                             "was the notebook executed?")
        # the Path save_figure returned, shown as the cell's value, becomes the caption's last words
        path_repr = [o for o in cell["outputs"] if o["output_type"] == "execute_result"
                     and "".join(o["data"].get("text/plain", "")).startswith(("PosixPath(", "WindowsPath("))]
        cell["outputs"] = [o for o in cell["outputs"] if not any(o is x for x in images + path_repr)]
        saved = f" Saved as `{index[stem]['path']}` (and `.pdf`)." if path_repr else ""
        cells.append({"cell_type": "code", "id": f"figure-{stem}", "execution_count": None, "source": f"# {stem}",
                      "outputs": images,
                      "metadata": {"tags": ["remove-input"], "mystnb": {"figure": {
                          "caption": figure_caption(index[stem]) + saved, "name": "fig-" + stem.replace("_", "-")}}}})
        done += 1
    nb["cells"] = cells
    return done


def hide_parameters(nb: dict) -> int:
    """Collapse the parameter cells (the notebook's defaults and the profile's injected values): a reader opens
    them when wanted, the lesson starts with its first markdown cell."""
    n = 0
    for cell in nb["cells"]:
        tags = cell.setdefault("metadata", {}).setdefault("tags", [])
        if PARAMETER_TAGS & set(tags) and "hide-cell" not in tags:
            tags.append("hide-cell")
            n += 1
    return n


def state_timing(nb: dict, name: str) -> bool:
    """Append the demo's measured times (bench/paper_timing.json) to the notebook header's time line: the source
    states no number (tests/test_docs_numbers.py), the book shows the measured one."""
    timing = json.loads((ROOT / "bench" / "paper_timing.json").read_text())["demo"]
    if name not in timing["cold"]["notebooks_s"]:
        return False
    said = (f" Measured: {make_docs._mmss(timing['cold']['notebooks_s'][name])} cold, "
            f"{make_docs._mmss(timing['warm']['notebooks_s'][name])} warm (m:ss).")
    for cell in nb["cells"]:
        text = "".join(cell["source"]) if cell["cell_type"] == "markdown" else ""
        if TIME_LINE in text:
            line_end = text.find("\n\n", text.index(TIME_LINE))
            line_end = len(text) if line_end < 0 else line_end
            cell["source"] = text[:line_end] + said + text[line_end:]
            return True
    return False


GALLERY = re.compile(r"^<!-- figures of (\S+) -->$", re.M)


def gallery(index_path: Path) -> str:
    """Every figure an artefact index lists, as captioned MyST figures, notebook by notebook."""
    rows = sorted(read_index(index_path).items(), key=lambda kv: (kv[1]["notebook"], kv[1]["artefact"]))
    return "\n".join(f"```{{figure}} {row['path']}\n:name: {row['profile']}-fig-{stem.replace('_', '-')}\n\n"
                     f"{figure_caption(row)} (notebook {row['notebook']})\n```\n" for stem, row in rows)


def stage(src: Path, executed: dict[str, Path]) -> list[str]:
    """Copy docs/, the committed figures and the captioned executed notebooks into `src`; returns the pages added."""
    if src.exists():
        shutil.rmtree(src)
    shutil.copytree(DOCS, src)
    for d in ARTEFACT_DIRS:
        if (ROOT / d).is_dir():
            shutil.copytree(ROOT / d, src / d, ignore=shutil.ignore_patterns("*.pdf", "*.json"))
    for page in src.glob("*.md"):  # a `<!-- figures of results/x/tables/index.csv -->` line becomes its figures
        text = page.read_text()
        if GALLERY.search(text):
            page.write_text(GALLERY.sub(lambda m: gallery(ROOT / m.group(1)), text))
    (src / "notebooks").mkdir(exist_ok=True)
    added, missing = [], []
    for name in notebook_sources():
        profile = next(p for p, spec in PROFILES.items() if spec["provides"](name))
        spec = PROFILES[profile]
        path = executed.get(profile, spec["executed"]) / f"{name}.ipynb"
        if not path.exists():
            missing.append(str(path))
            continue
        nb = json.loads(path.read_text())
        caption_figures(nb, read_index(spec["index"]), str(path))
        hide_parameters(nb)
        state_timing(nb, name)
        nb["metadata"]["balms_profile"] = profile
        (src / "notebooks" / path.name).write_text(json.dumps(nb))
        added.append(f"{profile}/{name}")
    if missing:
        raise FileNotFoundError("executed notebooks missing (the book shows them as committed; run `make paper` "
                                "for the demo, `make paper PROFILE=cpu-study` for notebook 08, and commit "
                                "notebooks/executed/<profile>/): " + ", ".join(missing))
    return added


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "book", help="HTML output folder")
    ap.add_argument("--src", type=Path, default=ROOT / "build" / "book-src", help="staged sources and doctrees")
    ap.add_argument("--executed", action="append", default=[], metavar="PROFILE=DIR",
                    help="take a profile's executed notebooks from DIR instead of notebooks/executed/<profile>")
    a = ap.parse_args(argv)
    executed = {}
    for item in a.executed:
        profile, _, folder = item.partition("=")
        if profile not in PROFILES or not folder:
            ap.error(f"--executed {item!r}: expected PROFILE=DIR with PROFILE one of {sorted(PROFILES)}")
        executed[profile] = Path(folder)
    t0 = time.perf_counter()
    added = stage(a.src, executed)
    from sphinx.cmd.build import build_main

    if a.out.exists():
        shutil.rmtree(a.out)
    rc = build_main(["-b", "html", "-q", "-W", "--keep-going", "-d", str(a.src / ".doctrees"), str(a.src), str(a.out)])
    print(f"book: {len(added)} notebooks ({', '.join(added)}) -> {a.out}/index.html in {time.perf_counter() - t0:.1f} s"
          + ("" if rc == 0 else f"; sphinx-build failed ({rc})"))
    return rc


if __name__ == "__main__":
    sys.exit(main())
