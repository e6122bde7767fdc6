"""Static HTML report: the executed notebooks, the artefact index, and a page per run where every
prediction can be opened (prompt, each agent step, the answer, the judge's verdict).

Built from files only (executed notebooks, tables/index.csv, runs/<profile>/**.jsonl and the judge's
`*.judge.jsonl` beside a run), so it can be rebuilt at any time without a model.
"""

from __future__ import annotations

import html
import json
import shutil
from pathlib import Path

import pandas as pd

from balms import paths
from balms.report import index_path

CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;font-size:.9em}td,th{border:1px solid #ccc;padding:.25em .5em;text-align:left}
pre{background:#f6f6f6;padding:.6em;white-space:pre-wrap;word-break:break-word;font-size:.85em}
.step{border-left:4px solid #888;margin:.8em 0;padding-left:.6em}.kind{font-weight:bold;color:#555}
.bad{color:#a00}.ok{color:#070}nav a{margin-right:1em}"""


def _page(title: str, body: str, depth: int = 0) -> str:
    up = "../" * depth
    nav = f'<nav><a href="{up}index.html">Report index</a></nav>'
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{CSS}</style></head><body>{nav}<h1>{html.escape(title)}</h1>{body}</body></html>")


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


def _record_page(rec: dict, verdict: dict | None, run_title: str) -> str:
    ok = rec.get("prediction") is not None
    head = (f"<p>Sample <b>{html.escape(rec['sample_id'])}</b> · system {rec['system']} · model "
            f"{html.escape(rec['model'])} (<code>{html.escape(rec.get('model_id', ''))}</code>) · CoT {rec['cot']}</p>"
            f"<p>Gold label <b>{rec['label']}</b> · prediction "
            + (f"<b class='ok'>{rec['prediction']}</b>" if ok else f"<b class='bad'>parse failure</b>: "
               f"{html.escape(str(rec.get('parse_error')))}")
            + f" · {rec.get('n_steps', 1)} model call(s) · {rec.get('latency_s', 0):.2f} s · "
              f"{rec.get('prompt_tokens', 0)} prompt / {rec.get('completion_tokens', 0)} completion tokens</p>")
    if rec.get("error"):
        head += f"<p class='bad'>Error: {html.escape(rec['error'])}</p>"
    steps = "".join(
        f"<div class='step'><span class='kind'>{html.escape(s.get('kind', ''))}</span> "
        f"<small>{html.escape(json.dumps(s.get('meta', {}), default=str))}</small>"
        f"<pre>{html.escape(s.get('content', ''))}</pre></div>"
        for s in rec.get("transcript", [])
    )
    judge = ""
    if verdict:
        judge = "<h2>Judge verdict</h2><pre>" + html.escape(json.dumps(verdict, indent=1, default=str)) + "</pre>"
    body = (head + "<h2>Answer</h2><pre>" + html.escape(rec.get("raw_answer", "")) + "</pre>"
            + "<h2>Transcript</h2>" + (steps or "<p>(no transcript)</p>") + judge)
    return _page(f"{run_title}: {rec['sample_id']}", body, depth=2)


def build_report(profile: str, out: Path) -> Path:
    out = Path(out)
    if out.exists():
        shutil.rmtree(out)
    (out / "runs").mkdir(parents=True)
    (out / "notebooks").mkdir()
    (out / "artefacts").mkdir()
    sections = []

    # 1. executed notebooks -> HTML
    from nbconvert import HTMLExporter

    exe_dir = paths.PROJECT_ROOT / "notebooks" / "executed" / profile
    nb_links = []
    for nb in sorted(exe_dir.glob("*.ipynb")):
        body, _ = HTMLExporter(template_name="classic").from_filename(str(nb))
        (out / "notebooks" / f"{nb.stem}.html").write_text(body)
        nb_links.append(f"<li><a href='notebooks/{nb.stem}.html'>{html.escape(nb.stem)}</a></li>")
    sections.append("<h2>Executed notebooks</h2><ul>" + ("".join(nb_links) or "<li>none yet</li>") + "</ul>")

    # 2. artefact index, files copied beside the report so links resolve offline
    idx_file = index_path(profile)
    rows = []
    if idx_file.exists():
        idx = pd.read_csv(idx_file)
        for r in idx.itertuples():
            src = paths.PROJECT_ROOT / r.path
            if not src.exists():
                continue
            dst = out / "artefacts" / src.name
            shutil.copy2(src, dst)
            for sib in (src.with_suffix(".md"), src.with_suffix(".pdf")):
                if sib.exists():
                    shutil.copy2(sib, out / "artefacts" / sib.name)
            preview = (f"<img src='artefacts/{src.name}' width='280'>" if src.suffix == ".png" else "")
            rows.append(f"<tr><td>{html.escape(str(r.artefact))}</td><td><a href='artefacts/{src.name}'>"
                        f"{html.escape(src.name)}</a>{preview}</td><td>{html.escape(str(r.notebook))}</td>"
                        f"<td>{html.escape(str(r.source))}</td><td>{html.escape(str(r.models))}</td></tr>")
    sections.append("<h2>Tables and figures</h2><table><tr><th>artefact</th><th>file</th><th>notebook</th>"
                    "<th>data source</th><th>models</th></tr>" + "".join(rows) + "</table>")

    # 3. a page per run, a page per prediction
    run_root = paths.runs_dir() / profile
    run_links = []
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
        trs = []
        for i, rec in enumerate(recs):
            (out / "runs" / slug / f"{i}.html").write_text(_record_page(rec, verdicts.get(rec["sample_id"]), title))
            pred = rec.get("prediction")
            trs.append(f"<tr><td><a href='{slug}/{i}.html'>{html.escape(rec['sample_id'])}</a></td>"
                       f"<td>{rec['label']}</td><td>{'—' if pred is None else pred}</td>"
                       f"<td>{rec.get('latency_s', 0):.2f}</td></tr>")
        (out / "runs" / f"{slug}.html").write_text(_page(
            title, "<table><tr><th>sample</th><th>gold</th><th>prediction</th><th>latency s</th></tr>"
            + "".join(trs) + "</table>", depth=1))
        run_links.append(f"<li><a href='runs/{slug}.html'>{html.escape(title)}</a> ({len(recs)} records)</li>")
    sections.append("<h2>Runs</h2><ul>" + ("".join(run_links) or "<li>none yet</li>") + "</ul>")

    (out / "index.html").write_text(_page(f"BALMS companion report — profile {profile}", "".join(sections)))
    return out / "index.html"
