"""Static HTML report: the executed notebooks, the artefact index, and a page per run where every
prediction can be opened (prompt, each agent step, the answer, the judge's verdict).

Built from files only (executed notebooks, tables/index.csv, runs/<profile>/**.jsonl and the judge's
`*.judge.jsonl` beside a run), so it can be rebuilt at any time without a model. Pages are rendered from
the jinja2 templates in balms/templates with autoescaping on: records carry model output, which may hold
any markup. The output folder is marked with `.balms-report`; a rebuild replaces only a folder so marked
(or an empty one), never a folder of someone else's files.
"""

from __future__ import annotations

import json
import shutil
from functools import lru_cache
from pathlib import Path

import pandas as pd

from balms import paths

MARKER = ".balms-report"


class ReportDirError(FileExistsError):
    """The output folder holds files the report did not write: refuse rather than delete them."""


@lru_cache(maxsize=1)
def _env():
    import jinja2

    return jinja2.Environment(loader=jinja2.PackageLoader("balms", "templates"), autoescape=True,
                              undefined=jinja2.StrictUndefined, keep_trailing_newline=True)


def render(template: str, **context) -> str:
    """One page from balms/templates/<template> (autoescaped)."""
    return _env().get_template(template).render(**context)


def prepare_out_dir(out: Path) -> None:
    """Make `out` an empty report folder. Only a folder carrying the marker (a previous report) or an empty
    folder is reused; anything else raises ReportDirError and is left untouched."""
    if out.exists() or out.is_symlink():
        if not out.is_dir():
            raise ReportDirError(f"{out}: exists and is not a folder; choose another --out")
        if any(out.iterdir()) and not (out / MARKER).is_file():
            raise ReportDirError(
                f"{out}: refusing to replace a non-empty folder that balms did not create (no {MARKER} marker "
                "inside); choose another --out or empty the folder first")
        for child in out.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("Written by balms.report_html; the next build replaces this folder.\n")


def _slug(p: Path) -> str:
    return "__".join(p.with_suffix("").parts).replace("/", "_")


def _read_jsonl(path: Path) -> list[dict]:
    out = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # torn last line of a crashed run; the runner truncates it on resume
    return out


def _text(v) -> str:
    return "" if v is None or (isinstance(v, float) and pd.isna(v)) else str(v)


def _record_view(rec: dict) -> dict:
    """The fields a record page shows, with defaults for records written by older versions."""
    return {"sample_id": _text(rec.get("sample_id")), "system": _text(rec.get("system")),
            "model": _text(rec.get("model")), "model_id": _text(rec.get("model_id")), "cot": rec.get("cot"),
            "label": rec.get("label"), "prediction": rec.get("prediction"),
            "parse_error": _text(rec.get("parse_error")), "n_steps": rec.get("n_steps", 1),
            "latency_s": float(rec.get("latency_s") or 0.0), "prompt_tokens": rec.get("prompt_tokens", 0),
            "completion_tokens": rec.get("completion_tokens", 0), "error": rec.get("error"),
            "raw_answer": _text(rec.get("raw_answer"))}


def _record_page(rec: dict, verdict: dict | None, run_title: str) -> str:
    steps = [{"kind": _text(s.get("kind")), "content": _text(s.get("content")),
              "meta": json.dumps(s.get("meta", {}), default=str)} for s in rec.get("transcript") or []]
    return render("record.html.j2", title=f"{run_title}: {_text(rec.get('sample_id'))}", depth=2,
                  rec=_record_view(rec), steps=steps,
                  verdict=None if not verdict else json.dumps(verdict, indent=1, default=str))


def build_report(profile: str, out: Path) -> Path:
    """Write the report into `out` (see `prepare_out_dir` for when an existing folder is replaced)."""
    out = Path(out)
    prepare_out_dir(out)
    for sub in ("runs", "notebooks", "artefacts"):
        (out / sub).mkdir()

    # 1. executed notebooks -> HTML
    exe_dir = paths.PROJECT_ROOT / "notebooks" / "executed" / profile
    notebooks = []
    for nb in sorted(exe_dir.glob("*.ipynb")):
        from nbconvert import HTMLExporter

        body, _ = HTMLExporter(template_name="classic").from_filename(str(nb))
        (out / "notebooks" / f"{nb.stem}.html").write_text(body)
        notebooks.append(nb.stem)

    # 2. artefact index, files copied beside the report so links resolve offline
    idx_file = paths.index_path(profile)
    artefacts = []
    if idx_file.exists():
        for r in pd.read_csv(idx_file, dtype=str).itertuples():  # notebook "01" stays "01"
            src = paths.PROJECT_ROOT / r.path
            if not src.exists():
                continue
            shutil.copy2(src, out / "artefacts" / src.name)
            for sib in (src.with_suffix(".md"), src.with_suffix(".pdf")):
                if sib.exists():
                    shutil.copy2(sib, out / "artefacts" / sib.name)
            artefacts.append({"artefact": _text(r.artefact), "file": src.name, "is_png": src.suffix == ".png",
                              "notebook": _text(r.notebook), "source": _text(r.source), "models": _text(r.models)})

    # 3. a page per run, a page per prediction
    run_root = paths.runs_dir() / profile
    runs = []
    for run in sorted(run_root.rglob("*.jsonl")) if run_root.exists() else []:
        if run.name.endswith(".judge.jsonl"):
            continue
        recs = _read_jsonl(run)
        if not recs:
            continue
        judge_file = run.with_name(run.stem + ".judge.jsonl")
        verdicts = {v.get("sample_id"): v for v in _read_jsonl(judge_file)} if judge_file.exists() else {}
        slug = _slug(run.relative_to(run_root))
        (out / "runs" / slug).mkdir()
        title = str(run.relative_to(run_root))
        rows = []
        for i, rec in enumerate(recs):
            (out / "runs" / slug / f"{i}.html").write_text(_record_page(rec, verdicts.get(rec.get("sample_id")), title))
            rows.append({"i": i, **_record_view(rec)})
        (out / "runs" / f"{slug}.html").write_text(render("run.html.j2", title=title, depth=1, slug=slug, rows=rows))
        runs.append({"slug": slug, "title": title, "n": len(recs)})

    (out / "index.html").write_text(render("index.html.j2", title=f"BALMS companion report — profile {profile}",
                                           depth=0, notebooks=notebooks, artefacts=artefacts, runs=runs))
    return out / "index.html"
