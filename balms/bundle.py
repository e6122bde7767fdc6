"""Carry a profile's model responses to another machine, so its tables regenerate there with zero model calls.

`export_responses` writes the exact subset of the response cache that a profile's runs used (the keys its
cache journal recorded, see `balms.models.cache`) plus the RAPTOR day summaries of the models those runs used,
as one deterministic gzip'd JSONL file (sorted, no timestamps: the same responses give the same bytes).
`import_responses` loads such a file into the local caches; `compare_tables` checks regenerated tables
against committed ones with latency columns (measured, machine-dependent) set aside.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import sqlite3
from pathlib import Path

import pandas as pd

from balms import paths
from balms.data.schema import DataError

FORMAT = "balms-responses/1"
LATENCY_COLUMNS = ("mean_latency_s", "latency_ci_low", "latency_ci_high", "latency_s", "wall_s")


def journal_path(profile: str) -> Path:
    return paths.runs_dir() / profile / "cache_keys.log"


def _journal_keys(profile: str) -> list[str]:
    path = journal_path(profile)
    if not path.exists():
        raise DataError(path, "no cache journal: run the profile with BALMS_CACHE_JOURNAL set (make paper does)")
    return sorted({line.strip() for line in path.read_text().splitlines() if line.strip()})


def _run_model_ids(profile: str) -> set[str]:
    ids = set()
    for man in (paths.runs_dir() / profile).rglob("*.manifest.json"):
        ids.update(json.loads(man.read_text()).get("model_ids") or [])
    return ids


def export_responses(profile: str, out: Path, *, cache_dir: Path | None = None) -> dict:
    """Write the profile's responses and RAPTOR summaries to `out` (.jsonl.gz); returns counts and sha256."""
    cdir = cache_dir or paths.cache_dir()
    keys = _journal_keys(profile)
    lines = [json.dumps({"format": FORMAT, "profile": profile}, sort_keys=True)]
    missing = []
    con = sqlite3.connect(cdir / "responses.sqlite")
    try:
        for k in keys:
            row = con.execute("SELECT model_id, completion FROM responses WHERE key = ?", (k,)).fetchone()
            if row is None:
                missing.append(k)
                continue
            comp = json.loads(row[1])
            comp.pop("raw", None)  # provider payload: debugging only, not needed to replay
            lines.append(json.dumps({"table": "responses", "key": k, "model_id": row[0], "completion": comp},
                                    sort_keys=True, ensure_ascii=False))
    finally:
        con.close()
    if missing:
        raise DataError(cdir / "responses.sqlite", f"{len(missing)} journalled keys are not in the cache "
                        f"(first {missing[0]}): was the cache cleared after the run?")
    n_summ = 0
    spath = cdir / "raptor_summaries.sqlite"
    model_ids = _run_model_ids(profile)
    if spath.exists() and model_ids:
        con = sqlite3.connect(spath)
        try:
            cols = [r[1] for r in con.execute("PRAGMA table_info(summaries)")]
            for row in con.execute(f"SELECT {', '.join(cols)} FROM summaries ORDER BY dataset, user, day, "
                                   "model_id, leaves_sha"):
                rec = dict(zip(cols, row, strict=True))
                if rec["model_id"] in model_ids:
                    lines.append(json.dumps({"table": "raptor_summaries", "row": rec}, sort_keys=True,
                                            ensure_ascii=False))
                    n_summ += 1
        finally:
            con.close()
    payload = ("\n".join(lines) + "\n").encode("utf-8")
    out.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz:
        gz.write(payload)
    out.write_bytes(buf.getvalue())
    return {"responses": len(keys), "raptor_summaries": n_summ, "bytes": out.stat().st_size,
            "sha256": hashlib.sha256(out.read_bytes()).hexdigest()}


def import_responses(path: Path, *, cache_dir: Path | None = None) -> dict:
    """Load an exported file into the local response and summary caches (existing rows are kept)."""
    from balms.agents.raptor import SummaryCache
    from balms.models.base import Completion
    from balms.models.cache import ResponseCache

    cdir = cache_dir or paths.cache_dir()
    try:
        text = gzip.decompress(Path(path).read_bytes()).decode("utf-8")
    except (OSError, EOFError) as exc:
        raise DataError(path, f"not a gzip'd responses file: {exc}") from None
    lines = text.splitlines()
    head = json.loads(lines[0]) if lines else {}
    if head.get("format") != FORMAT:
        raise DataError(path, f"expected format {FORMAT!r}, got {head.get('format')!r}", row=1)
    cache = ResponseCache(cdir / "responses.sqlite")
    summaries = SummaryCache(cdir / "raptor_summaries.sqlite")
    n = {"responses": 0, "raptor_summaries": 0}
    try:
        for i, line in enumerate(lines[1:], 2):
            try:
                rec = json.loads(line)
                if rec["table"] == "responses":
                    comp = Completion(**rec["completion"])
                    cache.put(rec["key"], {"model_id": rec["model_id"], "imported_from": str(path)}, comp)
                elif rec["table"] == "raptor_summaries":
                    r = rec["row"]
                    key = (r["dataset"], r["user"], r["day"], r["model_id"], r["leaves_sha"])
                    summaries.put(key, r["summary"], {c: r.get(c) for c in SummaryCache.USAGE}
                                  if r.get("latency_s") is not None else None)
                else:
                    raise KeyError(f"unknown table {rec['table']!r}")
            except (KeyError, TypeError, ValueError) as exc:
                raise DataError(path, f"bad line: {exc}", row=i) from None
            n[rec["table"]] += 1
    finally:
        cache.close()
    return n


def compare_tables(ours: Path, committed: Path, *, ignore=LATENCY_COLUMNS, atol: float = 1e-9) -> list[str]:
    """Differences between every CSV table in `committed` and its regenerated counterpart in `ours`
    (index.csv and latency columns aside). Empty list = reproduced."""
    problems = []
    for ref in sorted(Path(committed).glob("*.csv")):
        if ref.name == "index.csv":
            continue
        new = Path(ours) / ref.name
        if not new.exists():
            problems.append(f"{ref.name}: not regenerated")
            continue
        a, b = pd.read_csv(ref), pd.read_csv(new)
        drop = [c for c in a.columns if c in ignore or "latency" in c]
        a, b = a.drop(columns=drop, errors="ignore"), b.drop(columns=drop, errors="ignore")
        if list(a.columns) != list(b.columns) or a.shape != b.shape:
            problems.append(f"{ref.name}: columns/shape differ: {list(a.columns)} {a.shape} vs "
                            f"{list(b.columns)} {b.shape}")
            continue
        try:
            pd.testing.assert_frame_equal(a, b, check_dtype=False, atol=atol, rtol=0)
        except AssertionError as exc:
            problems.append(f"{ref.name}: {str(exc).splitlines()[0]} ... {' '.join(str(exc).split())[:300]}")
    return problems


def register(sub) -> None:
    """`balms bundle export-responses|import-responses|compare`."""
    p = sub.add_parser("bundle", help="carry a profile's model responses to another machine and check tables")
    s = p.add_subparsers(dest="cmd", required=True)
    e = s.add_parser("export-responses", help="the responses a profile's runs used -> one .jsonl.gz")
    e.add_argument("--profile", required=True)
    e.add_argument("--out", required=True)
    i = s.add_parser("import-responses", help="load an exported responses file into the local caches")
    i.add_argument("file")
    c = s.add_parser("compare", help="regenerated tables vs committed ones (latency columns aside)")
    c.add_argument("--ours", required=True)
    c.add_argument("--committed", required=True)

    def run(a) -> int:
        if a.cmd == "export-responses":
            print(json.dumps(export_responses(a.profile, Path(a.out))))
        elif a.cmd == "import-responses":
            print(json.dumps(import_responses(Path(a.file))))
        else:
            probs = compare_tables(Path(a.ours), Path(a.committed))
            for x in probs:
                print(x)
            print(f"{len(probs)} table(s) differ" if probs else "every committed table reproduced")
            return 1 if probs else 0
        return 0

    p.set_defaults(func=run)
