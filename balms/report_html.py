"""Static HTML report: the executed notebooks, the artefact index, and a page per run where every
prediction can be opened (prompt, each agent step, the answer, the judge's verdict).

A run page opens with the run's summary (MAE with its participant-bootstrap CI, parse failures, the modal
answer, latency and tokens, the same numbers the tables use: balms.metrics) and a table of its predictions
that a small shipped script (balms/static/report.js, no CDN, no server) filters by what went wrong: wrong,
unparseable, forced finish, a failing code block, a harness error. The filter is read from the URL
(`run.html#filter=unparseable`), so a link or a headless browser can open a filtered view. A prediction's
page links to the same sample (same sample_id) under every other system and backbone in the report.

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

from balms import metrics, paths

MARKER = ".balms-report"
STATIC_FILES = ("report.css", "report.js")
# Observation statuses of a code block that did not finish normally (balms.sandbox.STATUSES; not
# imported: the report learns what an agent did from its records only). "no_action" nudges are not code.
CODE_ERROR_STATUSES = ("error", "timeout", "killed", "memory")
# (filter name, button label, what it selects); the names are what `#filter=` takes and rows carry in data-flags
FILTERS = (
    ("all", "all", "every prediction"),
    ("wrong", "wrong", "parsed, but not the gold label"),
    ("unparseable", "unparseable", "the agent answered, but no score could be parsed"),
    ("forced_finish", "forced finish", "PHIA ran out of steps and was forced to answer"),
    ("code_error", "code errors", "at least one code block failed (error, timeout, memory, killed)"),
    ("harness_error", "harness errors", "the agent or the backend failed: no answer at all"),
)


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


def record_flags(rec: dict) -> list[str]:
    """The filters (FILTERS names) a record belongs to besides "all"; read from the record alone."""
    steps = rec.get("transcript") or []
    flags = []
    pred, label = rec.get("prediction"), rec.get("label")
    if rec.get("error"):
        flags.append("harness_error")
    elif pred is None:
        flags.append("unparseable")
    elif label is not None and pred != label:
        flags.append("wrong")
    if any(s.get("kind") == "forced_finish" for s in steps):
        flags.append("forced_finish")
    if any(s.get("kind") == "observation" and (s.get("meta") or {}).get("status") in CODE_ERROR_STATUSES
           for s in steps):
        flags.append("code_error")
    return flags


def _finite(v) -> float | None:
    """NaN (no value: e.g. a CI with one participant) as None, which the pages show as "—"."""
    return None if v is None or v != v else float(v)


def _mean(values) -> float | None:
    v = [float(x) for x in values if x is not None]
    return sum(v) / len(v) if v else None


def run_summary(recs: list[dict]) -> dict:
    """What a reader needs first about a run, computed as the tables compute it (balms.metrics): MAE over
    parsed predictions with its participant-bootstrap 95% CI, the parse-failure rate (of the answered samples:
    harness errors are counted apart, as in the tables), the modal answer and its share, mean latency and tokens
    (over the records that answered)."""
    timed = [r for r in recs if not r.get("error")]  # an error's 0 s and 0 tokens are no measurement
    out = {"n": len(recs), "n_harness_errors": sum(bool(r.get("error")) for r in recs),
           "n_users": len({r.get("user") for r in recs}), "mae": None, "ci_low": None, "ci_high": None,
           "n_parsed": sum(r.get("prediction") is not None for r in recs), "parse_failure_rate": None,
           "modal_label": None, "mode_rate": None, "collapse": None,
           "latency_s": _mean(r.get("latency_s") for r in timed), "n_steps": _mean(r.get("n_steps") for r in timed),
           "prompt_tokens": _mean(r.get("prompt_tokens") for r in timed),
           "completion_tokens": _mean(r.get("completion_tokens") for r in timed)}
    rows = [{k: r.get(k) for k in ("sample_id", "user", "label", "prediction", "error")} for r in recs]
    try:
        ci = metrics.mae_ci(rows)
        mc = metrics.mode_collapse(rows)
        out.update(parse_failure_rate=_finite(metrics.parse_failure_rate(rows)), modal_label=mc["modal_label"],
                   mode_rate=_finite(mc["mode_rate"]))
        cm = metrics.collapse_metrics(rows, n_boot=500)  # the metrics blind to the commonest answer (issue 39)
        out["collapse"] = {k: (_finite(v) if isinstance(v, float) else v) for k, v in cm.items()}
    except (ValueError, TypeError):  # records without labels (a harness's own samples): no MAE to show
        return out
    out.update(mae=_finite(ci["mae"]), ci_low=_finite(ci["ci_low"]), ci_high=_finite(ci["ci_high"]))
    return out


def _record_page(rec: dict, verdict: dict | None, run_title: str, *, run_slug: str, i: int, n: int,
                 same_sample: list[dict]) -> str:
    steps = [{"kind": _text(s.get("kind")), "content": _text(s.get("content")),
              "meta": json.dumps(s.get("meta", {}), default=str),
              "failed": s.get("kind") == "forced_finish" or (
                  s.get("kind") == "observation" and (s.get("meta") or {}).get("status") in CODE_ERROR_STATUSES)}
             for s in rec.get("transcript") or []]
    return render("record.html.j2", title=f"{run_title}: {_text(rec.get('sample_id'))}", depth=2,
                  rec=_record_view(rec), steps=steps, flags=record_flags(rec), run_slug=run_slug, run_title=run_title,
                  prev_i=i - 1 if i > 0 else None, next_i=i + 1 if i + 1 < n else None,
                  same_sample=same_sample,
                  verdict=None if not verdict else json.dumps(verdict, indent=1, default=str))


def _copy_static(out: Path) -> None:
    """The report's CSS and JS, shipped as package data, copied beside the pages (works offline)."""
    from importlib.resources import files

    (out / "static").mkdir()
    for name in STATIC_FILES:
        (out / "static" / name).write_bytes(files("balms").joinpath("static", name).read_bytes())


def build_report(profile: str, out: Path, *, keys: set[str] | None = None) -> Path:
    """Write the report into `out` (see `prepare_out_dir` for when an existing folder is replaced)."""
    out = Path(out)
    prepare_out_dir(out)
    for sub in ("runs", "notebooks", "artefacts"):
        (out / sub).mkdir()
    _copy_static(out)

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

    # 3. a page per run, a page per prediction. First every run is read, so that a prediction's page can link
    #    to the same sample under every other system and backbone (index sample_id -> its pages).
    run_root = paths.runs_dir() / profile
    loaded = []
    from balms.cellspec import key_of_run_file as key_of

    for run in sorted(run_root.rglob("*.jsonl")) if run_root.exists() else []:
        if run.name.endswith(".judge.jsonl") or (keys is not None and key_of(run) not in keys):
            continue  # verdicts go with their run; `keys`: only the cells the profile declares now
        recs = _read_jsonl(run)
        if recs:
            loaded.append((run, recs))
    by_sample: dict[str, list[dict]] = {}
    for run, recs in loaded:
        slug, title = _slug(run.relative_to(run_root)), str(run.relative_to(run_root))
        for i, rec in enumerate(recs):
            cell = rec.get("cell") or {}
            by_sample.setdefault(_text(rec.get("sample_id")), []).append({
                "dataset": _text(rec.get("dataset") or cell.get("dataset")), "system": _text(rec.get("system")),
                "model": _text(rec.get("model")), "cot": rec.get("cot"),
                "lookback": rec.get("lookback") or cell.get("lookback"), "run": title,
                "page": f"runs/{slug}/{i}.html", "prediction": rec.get("prediction"), "label": rec.get("label"),
                "error": bool(rec.get("error"))})
    runs = []
    for run, recs in loaded:
        judge_file = run.with_name(run.stem + ".judge.jsonl")
        verdicts = {v.get("sample_id"): v for v in _read_jsonl(judge_file)} if judge_file.exists() else {}
        slug = _slug(run.relative_to(run_root))
        (out / "runs" / slug).mkdir()
        title = str(run.relative_to(run_root))
        rows = []
        for i, rec in enumerate(recs):
            sid = _text(rec.get("sample_id"))
            page = _record_page(rec, verdicts.get(rec.get("sample_id")), title, run_slug=slug, i=i, n=len(recs),
                                same_sample=[e for e in by_sample.get(sid, []) if e["page"] != f"runs/{slug}/{i}.html"])
            (out / "runs" / slug / f"{i}.html").write_text(page)
            flags = record_flags(rec)
            err = None if rec.get("prediction") is None or rec.get("label") is None \
                else abs(rec["prediction"] - rec["label"])
            rows.append({"i": i, **_record_view(rec), "user": _text(rec.get("user")), "abs_error": err,
                         "flags": flags})
        summary = run_summary(recs)
        counts = {name: (len(rows) if name == "all" else sum(name in r["flags"] for r in rows))
                  for name, _, _ in FILTERS}
        first = recs[0]
        cell = first.get("cell") or {}
        about = {"dataset": _text(first.get("dataset") or cell.get("dataset")), "system": _text(first.get("system")),
                 "model": _text(first.get("model")), "model_id": _text(first.get("model_id")),
                 "cot": first.get("cot"), "lookback": first.get("lookback") or cell.get("lookback"),
                 "cell_key": _text(cell.get("key")), "options": json.dumps(first.get("options") or {}, default=str)}
        (out / "runs" / f"{slug}.html").write_text(render(
            "run.html.j2", title=title, depth=1, slug=slug, rows=rows, summary=summary, about=about,
            filters=[{"name": n, "label": lab, "help": h, "count": counts[n]} for n, lab, h in FILTERS]))
        runs.append({"slug": slug, "title": title, "n": len(recs), "summary": summary, **about})

    (out / "index.html").write_text(render("index.html.j2", title=f"BALMS companion report — profile {profile}",
                                           depth=0, notebooks=notebooks, artefacts=artefacts, runs=runs))
    return out / "index.html"
