"""Carry a profile's model responses to another machine, so its tables regenerate there with zero model calls.

`export_responses` writes the exact subset of the response cache that a profile's runs used (the keys their
records and judge verdicts name, see `used_keys`; each response verified against its digest, the export refused
when one is missing, and when a cell the profile's notebooks declare has no records here, see `complete_files`)
plus the RAPTOR day summaries of the models those runs used, as one deterministic gzip'd JSONL file (sorted, no
timestamps: the same responses give the same bytes). `import_responses` loads such a file into the local caches,
all or nothing; `compare_tables` checks regenerated tables against committed ones with latency columns
(measured, machine-dependent) set aside.

Files written under an earlier response-key rule (format balms-responses/1: before a backend's request
additions entered the key) are re-keyed on import, and `rekey_responses` (`balms bundle rekey-responses IN OUT`)
rewrites one, or a bundle's responses, under the current rule: from each row's key and model id, no model call.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import sqlite3
from pathlib import Path

import pandas as pd

from balms import paths
from balms.data.schema import DataError

FORMAT = "balms-responses/2"  # keys under balms.models.cache.KEY_RULE 2
# format -> the response-key rule its keys follow (balms.models.cache.KEY_RULE)
KEY_RULES = {"balms-responses/1": 1, FORMAT: 2}
LATENCY_COLUMNS = ("mean_latency_s", "latency_ci_low", "latency_ci_high", "latency_s", "wall_s")


def run_files(profile: str, keys: set[str] | None = None) -> list[Path]:
    """The profile's run files and their companions (manifests, judge verdicts), sorted; with `keys`, only those of
    these cells (plus the profile-level judge case study, which belongs to no cell)."""
    from balms.cellspec import key_of_run_file
    from balms.experiments.judging import CASE_STUDY_VERDICTS

    root = paths.runs_dir() / profile
    if not root.is_dir():
        raise DataError(root, f"no runs for profile {profile!r}: run `make paper PROFILE={profile}` first")
    every = [f for f in sorted(root.rglob("*")) if f.is_file() and f.suffix not in (".lock", ".tmp")]
    picked = [f for f in every if keys is None or key_of_run_file(f) in keys or f.name == CASE_STUDY_VERDICTS]
    if not any(f.name.endswith(".jsonl") and not f.name.endswith(".judge.jsonl") for f in picked):
        raise DataError(root, f"no run file of the profile's current cells among its {len(every)} files (made with "
                        "other overrides, other data or older code?): pass the same P as the run, or --all")
    return picked


def complete_files(cfg, *, every: bool = False) -> tuple[list[Path], int]:
    """The run files (and companions) of every cell `cfg`'s notebooks declare, refused unless each has its records
    (and each cell notebook 07 judges its verdicts, the profile its case-study verdicts): a replay of the profile
    needs all of them, and a cell run under another key (other code, other P) names other responses. With
    `every`, the other run files of the profile too. Returns the files and how many run files were left out."""
    from balms.cellspec import key_of_run_file
    from balms.experiments.cells import cells_for, profile_notebooks
    from balms.experiments.grid import build_cell
    from balms.experiments.judging import CASE_STUDY_VERDICTS
    from balms.experiments.runfiles import status

    root = cfg.runs_root()
    st = status(cfg, root)
    gaps = [f"{what} ({key}): no run file" for key, what in st.missing.items()]
    if "07_rationale_quality" in profile_notebooks(cfg):
        by_key = {key_of_run_file(f): f for f in st.current}
        for decl in cells_for("07_rationale_quality", cfg):
            f = by_key.get(build_cell(cfg, decl, key_only=True).spec.key())
            if f is not None and not f.with_name(f.name.removesuffix(".jsonl") + ".judge.jsonl").exists():
                gaps.append(f"{f.relative_to(root)}: no judge verdicts (notebook 07)")
        if not (root / CASE_STUDY_VERDICTS).exists():
            gaps.append(f"{CASE_STUDY_VERDICTS}: no case-study verdicts (notebook 07)")
    if gaps:
        raise DataError(root, f"{len(gaps)} cell(s) or verdict file(s) the profile's notebooks declare are not here, "
                        "nothing written: " + "; ".join(gaps[:5]) + ("; ..." if len(gaps) > 5 else "")
                        + f" ({len(st.superseded)} run file(s) of other cells are: run by other code or other P?). "
                        "Run the notebooks first "
                        f"(`make paper PROFILE={cfg.profile} P=\"-p cache_mode replay\"` makes no model call when the "
                        "cache holds their responses), or pass the P they ran with")
    picked = run_files(cfg.profile, None if every else {key_of_run_file(f) for f in st.current})
    return picked, 0 if every else len(st.superseded)


def used_keys(files: list[Path]) -> tuple[dict[str, str], dict]:
    """The response-cache keys the records and judge verdicts of these files name, each with where it is first
    named ("file row N"), and counts. A record that answered with model calls (or a verdict that called its
    judge) but names no key was written before records named their responses (or by an agent that does not log
    its calls through `Episode.call`): refused, naming the first, because its responses cannot be found from it."""
    keys: dict[str, str] = {}
    n = {"records": 0, "cells": 0, "verdicts": 0}
    unkeyed = []
    for f in files:
        if not f.name.endswith(".jsonl"):
            continue
        verdicts = f.name.endswith(".judge.jsonl")
        n["cells"] += not verdicts
        for i, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                if verdicts:
                    got, needs = list(obj.get("response_keys") or []), bool(obj.get("attempts"))
                else:
                    got = [st["meta"]["response_key"] for st in obj.get("transcript") or []
                           if (st.get("meta") or {}).get("response_key")]
                    # an answer from a model names its responses; an error, or a system that calls no model
                    # (n_steps 0), may name none
                    needs = obj.get("status", "error" if obj.get("error") else "ok") != "error" and obj.get(
                        "n_steps", 1) > 0
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                raise DataError(f, f"not a record or verdict line: {exc}", row=i) from None
            n["verdicts" if verdicts else "records"] += 1
            if needs and not got:
                unkeyed.append(f"{f} row {i}")
            for k in got:
                keys.setdefault(k, f"{f} row {i}")
    if unkeyed:
        raise DataError(unkeyed[0], f"{len(unkeyed)} record(s)/verdict(s) name no response keys (written before "
                        "records named the responses they used): replay the profile from its responses into a "
                        "fresh runs folder (`make bundle` does) to rewrite them, then export")
    return keys, n


def responses_payload(profile: str, *, cache_dir: Path | None = None,
                      files: list[Path] | None = None) -> tuple[bytes, dict]:
    """The responses the records of `files` (default: every run file of the profile) name, each verified against
    its digest, and the RAPTOR day summaries of the runs' models, as sorted JSONL bytes; and counts. Refused, with
    how many are missing, when the cache lacks one of them."""
    from balms.models.cache import ResponseCache
    from balms.models.registry import additions_for_model_id

    cdir = cache_dir or paths.cache_dir()
    files = run_files(profile) if files is None else files
    keys, counts = used_keys(files)
    lines = [json.dumps({"format": FORMAT, "profile": profile}, sort_keys=True)]
    missing = []
    if keys and not (cdir / "responses.sqlite").exists():
        raise DataError(cdir / "responses.sqlite", f"no response cache, and the records use {len(keys)} responses")
    cache = ResponseCache(cdir / "responses.sqlite", additions_of=additions_for_model_id) if keys else None
    try:
        for k in sorted(keys):
            row = cache.get_row(k)  # digest checked: an altered response is refused by key, never packed
            if row is None:
                missing.append(k)
                continue
            comp = row[1]
            comp.pop("raw", None)  # provider payload: debugging only, not needed to replay
            lines.append(json.dumps({"table": "responses", "key": k, "model_id": row[0], "completion": comp},
                                    sort_keys=True, ensure_ascii=False))
    finally:
        if cache is not None:
            cache.close()
    if missing:
        from collections import Counter

        where = Counter(Path(keys[k].rsplit(" row ", 1)[0]).name for k in missing)
        raise DataError(cdir / "responses.sqlite", f"{len(missing)} of the {len(keys)} responses the records use "
                        f"are not in the cache, named by {len(where)} file(s): "
                        + ", ".join(f"{name} ({n})" for name, n in sorted(where.items()))
                        + f" (first {missing[0]}, named by {keys[missing[0]]}); nothing written: re-run those cells "
                        "in cache mode 'rw', or export from the cache that ran them")
    n_summ = 0
    spath = cdir / "raptor_summaries.sqlite"
    model_ids = _run_model_ids(files)
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
    return payload, {"responses": len(keys), "raptor_summaries": n_summ, **counts}


def _run_model_ids(files: list[Path]) -> set[str]:
    ids = set()
    for man in files:
        if man.name.endswith(".manifest.json"):
            ids.update(json.loads(man.read_text()).get("model_ids") or [])
    return ids


def _gzip(data: bytes) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz:
        gz.write(data)
    return buf.getvalue()


def _picked(profile: str, keys: set[str] | None, cfg, every: bool) -> tuple[list[Path], dict]:
    if cfg is None:
        return run_files(profile, keys), {}
    files, left_out = complete_files(cfg, every=every)
    return files, {"run_files_left_out": left_out}


def export_responses(profile: str, out: Path, *, cache_dir: Path | None = None, keys: set[str] | None = None,
                     cfg=None, every: bool = False) -> dict:
    """Write the responses the profile's records name and its RAPTOR summaries to `out` (.jsonl.gz); returns counts
    and sha256. `keys`: only the records of these cells; `cfg` (an ExperimentConfig): those of every cell its
    notebooks declare, refused unless all ran (`complete_files`; `every`: the profile's other run files too)."""
    files, extra = _picked(profile, keys, cfg, every)
    payload, counts = responses_payload(profile, cache_dir=cache_dir, files=files)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(_gzip(payload))
    return counts | extra | {"bytes": out.stat().st_size, "sha256": hashlib.sha256(out.read_bytes()).hexdigest()}


PREFER = ("bundle", "local")  # which side wins where the local caches answer a key differently


def import_responses(path: Path, *, cache_dir: Path | None = None, prefer: str | None = None) -> dict:
    """Load an exported file into the local response and summary caches, all of it or nothing.

    Every line is read and every key compared with the local caches before anything is written. A key the local
    cache answers differently (another llama.cpp build, a prompt-prefix reuse that rounds differently: replayed
    tables would differ) is a conflict: refused, nothing written, unless `prefer` says which side wins."""
    try:
        text = gzip.decompress(Path(path).read_bytes()).decode("utf-8")
    except (OSError, EOFError) as exc:
        raise DataError(path, f"not a gzip'd responses file: {exc}") from None
    plan = _plan_responses(text, path, cache_dir=cache_dir, prefer=prefer)
    return _write_responses(plan)


def _key_rule(lines: list[str], path) -> int:
    """The response-key rule of a responses file (its first line names the format); an unknown format is refused."""
    try:
        head = json.loads(lines[0]) if lines else {}
    except ValueError:
        head = {}
    if head.get("format") not in KEY_RULES:
        raise DataError(path, f"expected format {FORMAT!r} (or an earlier {sorted(KEY_RULES)}), got "
                        f"{head.get('format')!r}", row=1)
    return KEY_RULES[head["format"]]


def _upgrade(rec: dict, rule: int) -> bool:
    """Re-key a response row of a rule-1 file under the current rule (its model's request additions hashed in);
    whether its key changed."""
    from balms.models.cache import upgrade_key
    from balms.models.registry import additions_for_model_id

    if rule >= 2 or rec.get("table") != "responses":
        return False
    old = rec["key"]
    rec["key"] = upgrade_key(old, additions_for_model_id(rec["model_id"]))
    return rec["key"] != old


def rekey_text(text: str, path="<responses>") -> tuple[str, dict]:
    """A responses file's text with every key under the current rule, sorted as `export_responses` writes it, and
    counts (`rekeyed`: keys that changed). A file already under the current rule comes back unchanged."""
    lines = text.splitlines()
    rule = _key_rule(lines, path)
    head = json.loads(lines[0]) | {"format": FORMAT}
    responses, other, n = [], [], 0
    for i, line in enumerate(lines[1:], 2):
        try:
            rec = json.loads(line)
            n += _upgrade(rec, rule)
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(path, f"bad line: {exc}", row=i) from None
        (responses if rec.get("table") == "responses" else other).append(rec)
    if len({r["key"] for r in responses}) != len(responses):
        raise DataError(path, "two responses share a key after re-keying")
    out = [json.dumps(head, sort_keys=True)] + [json.dumps(r, sort_keys=True, ensure_ascii=False) for r in
                                                sorted(responses, key=lambda r: r["key"])]
    out += [json.dumps(r, sort_keys=True, ensure_ascii=False) for r in other]
    return "\n".join(out) + "\n", {"responses": len(responses), "rekeyed": n, "other_rows": len(other),
                                    "from_rule": rule}


def rekey_responses(src: Path, out: Path) -> dict:
    """`src` (a .jsonl.gz responses file, or a bundle: its responses.jsonl) re-keyed under the current rule into
    `out` (.jsonl.gz); no model is called. Returns counts and the output's sha256."""
    src = Path(src)
    if src.name.endswith(".bundle.tar.gz"):
        _, files = verify_bundle(src)
        text, where = files["responses.jsonl"].decode("utf-8"), f"{src}:responses.jsonl"
    else:
        try:
            text, where = gzip.decompress(src.read_bytes()).decode("utf-8"), src
        except (OSError, EOFError) as exc:
            raise DataError(src, f"not a gzip'd responses file: {exc}") from None
    new, counts = rekey_text(text, where)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(_gzip(new.encode("utf-8")))
    return counts | {"bytes": out.stat().st_size, "sha256": hashlib.sha256(out.read_bytes()).hexdigest()}


def _plan_responses(text: str, path, *, cache_dir: Path | None = None, prefer: str | None = None) -> dict:
    """Parse, re-key and compare every line of a responses file with the local caches; write nothing. Refuses a
    bad line (by row) or, without `prefer`, any key the local caches answer differently."""
    from balms.agents.raptor import SummaryCache
    from balms.models.base import Completion
    from balms.models.cache import ResponseCache
    from balms.models.registry import additions_for_model_id

    if prefer not in (None, *PREFER):
        raise ValueError(f"prefer must be one of {PREFER} or None, got {prefer!r}")
    cdir = cache_dir or paths.cache_dir()
    lines = text.splitlines()
    rule = _key_rule(lines, path)
    responses, summaries, rekeyed = [], [], 0
    for i, line in enumerate(lines[1:], 2):
        try:
            rec = json.loads(line)
            rekeyed += _upgrade(rec, rule)
            if rec["table"] == "responses":
                responses.append((rec["key"], {"model_id": rec["model_id"], "imported_from": str(path)},
                                  Completion(**rec["completion"])))
            elif rec["table"] == "raptor_summaries":
                r = rec["row"]
                summaries.append(((r["dataset"], r["user"], r["day"], r["model_id"], r["leaves_sha"]), r["summary"],
                                  {c: r.get(c) for c in SummaryCache.USAGE} if r.get("latency_s") is not None
                                  else None))
            else:
                raise KeyError(f"unknown table {rec['table']!r}")
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(path, f"bad line: {exc}", row=i) from None
    conflicts = []  # (what, key) the local caches answer differently
    rpath, spath = cdir / "responses.sqlite", cdir / "raptor_summaries.sqlite"
    if rpath.exists():  # an absent cache is not created by a refused import
        cache = ResponseCache(rpath, additions_of=additions_for_model_id)
        try:
            for key, _, comp in responses:
                local = cache.get(key)  # digest checked: a damaged local entry is named, not compared
                if local is not None and local.text != comp.text:
                    conflicts.append(("response", key))
        finally:
            cache.close()
    if spath.exists() and summaries:
        local_summ = SummaryCache(spath)
        for key, text_, _ in summaries:
            got = local_summ.get(key)
            if got is not None and got[0] != text_:
                conflicts.append(("RAPTOR summary", key))
    if conflicts and prefer is None:
        what, key = conflicts[0]
        shown = key if isinstance(key, str) else "/".join(key)
        raise DataError(path, f"{len(conflicts)} entr(y/ies) differ from the local caches in {cdir} (first: {what} "
                        f"{shown}); nothing written: pass --prefer bundle (take the file's) or --prefer local (keep "
                        "yours), or import into an empty BALMS_CACHE_DIR")
    return {"cache_dir": cdir, "responses": responses, "summaries": summaries, "prefer": prefer,
            "conflicts": conflicts, "rekeyed": rekeyed}


def _write_responses(plan: dict) -> dict:
    """Write a checked plan: the responses in one transaction, then the summaries (the file's side winning only
    where `prefer` is "bundle")."""
    from balms.agents.raptor import SummaryCache
    from balms.models.cache import ResponseCache
    from balms.models.registry import additions_for_model_id

    cdir, bundle_wins = plan["cache_dir"], plan["prefer"] == "bundle"
    conflicting = {key for _, key in plan["conflicts"]}  # response keys (str) and summary keys (tuples)
    cache = ResponseCache(cdir / "responses.sqlite", additions_of=additions_for_model_id)
    try:
        cache.put_many(plan["responses"], replace=conflicting if bundle_wins else set())
    finally:
        cache.close()
    if plan["summaries"]:
        summaries = SummaryCache(cdir / "raptor_summaries.sqlite")
        for key, text, usage in plan["summaries"]:
            if bundle_wins or key not in conflicting:
                summaries.put(key, text, usage)
    n = len(plan["conflicts"])
    return {"responses": len(plan["responses"]), "raptor_summaries": len(plan["summaries"]), "conflicts": n,
            ("replaced" if bundle_wins else "kept_local"): n, "rekeyed": plan["rekeyed"]}


# ------------------------------------------------------------------------------------------ bundles ------
BUNDLE_FORMAT = "balms-bundle/1"
BUNDLE_README = """# balms results bundle: {profile}

Everything needed to regenerate the tables and figures of the `{profile}` profile without calling a model:

- `runs/{profile}/`: every cell's records (JSONL), manifests (cell spec, versions, llama.cpp build, usage)
  and judge verdicts, exactly as the exporting machine wrote them;
- `responses.jsonl`: the model responses those runs used (response-cache rows, keyed by exact model id and
  decoding parameters) and the RAPTOR day summaries, so a changed library can re-run cells from them;
- `BUNDLE.json`: the sha256 of every file above, the data-table fingerprints the runs read, the git commit,
  package versions and llama.cpp build of the exporter.

Install and replay (the import verifies every checksum and the data fingerprints first):

    balms bundle import {name}
    make paper PROFILE={profile} P="-p cache_mode replay"
"""


def _tar_bytes(files: dict[str, bytes]) -> bytes:
    """A deterministic .tar.gz: sorted members, fixed mtime/owner/mode, gzip without a timestamp."""
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(files):
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(files[name]), 0, 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(files[name]))
    return _gzip(buf.getvalue())


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def export_bundle(profile: str, out: Path | None = None, *, cache_dir: Path | None = None,
                  keys: set[str] | None = None, cfg=None, every: bool = False) -> dict:
    """One archive with the profile's runs, the responses their records name (each verified against its digest;
    refused when one is missing) and the runs' RAPTOR summaries, checksums and provenance. `keys`, `cfg`, `every`:
    which run files, as `export_responses` (the CLI passes `cfg`: every declared cell, superseded files left out)."""
    root = paths.runs_dir() / profile
    picked, extra = _picked(profile, keys, cfg, every)
    out = Path(out) if out else paths.PROJECT_ROOT / "results" / profile / f"{profile}.bundle.tar.gz"
    files: dict[str, bytes] = {}
    fingerprints: dict[str, set] = {}
    builds, commits = set(), set()
    for f in picked:
        rel = f"runs/{profile}/{f.relative_to(root).as_posix()}"
        files[rel] = f.read_bytes()
        if f.name.endswith(".manifest.json"):
            man = json.loads(files[rel])
            cell = man.get("cell") or {}
            if cell.get("dataset"):
                fingerprints.setdefault(cell["dataset"], set()).add(cell.get("data_fingerprint"))
            builds.add(man.get("llama_cpp_build"))
            commits.add((man.get("git") or {}).get("commit"))
    payload, counts = responses_payload(profile, cache_dir=cache_dir, files=picked)
    files["responses.jsonl"] = payload
    files["README.md"] = BUNDLE_README.format(profile=profile, name=out.name).encode()
    meta = {"format": BUNDLE_FORMAT, "profile": profile,
            "files": {k: _sha(v) for k, v in sorted(files.items())},
            "data_fingerprints": {d: sorted(x for x in v if x) for d, v in sorted(fingerprints.items())},
            "llama_cpp_builds": sorted(b for b in builds if b), "git_commits": sorted(c for c in commits if c),
            "counts": counts | {"run_files": sum(k.endswith(".jsonl") for k in files if k.startswith("runs/"))}}
    files["BUNDLE.json"] = json.dumps(meta, indent=2, sort_keys=True).encode()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(_tar_bytes(files))
    return meta["counts"] | extra | {"path": str(out), "bytes": out.stat().st_size, "sha256": _sha(out.read_bytes())}


def _read_bundle(path: Path) -> dict[str, bytes]:
    import tarfile

    try:
        with tarfile.open(path, mode="r:gz") as tar:
            out = {}
            for m in tar.getmembers():
                if not m.isfile() or m.name.startswith("/") or ".." in Path(m.name).parts:
                    raise DataError(path, f"unsafe or unexpected member {m.name!r}")
                out[m.name] = tar.extractfile(m).read()
            return out
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise DataError(path, f"not a balms bundle (.tar.gz): {exc}") from None


def verify_bundle(path: Path) -> tuple[dict, dict[str, bytes]]:
    """Check the format and every file's sha256; a changed, missing or extra file is refused by name."""
    files = _read_bundle(Path(path))
    if "BUNDLE.json" not in files:
        raise DataError(path, "no BUNDLE.json inside: not a balms bundle")
    meta = json.loads(files.pop("BUNDLE.json"))
    if meta.get("format") != BUNDLE_FORMAT:
        raise DataError(path, f"expected format {BUNDLE_FORMAT!r}, got {meta.get('format')!r}")
    want = meta["files"]
    for name in sorted(set(want) | set(files)):
        if name not in files:
            raise DataError(path, f"{name}: listed in BUNDLE.json but missing from the archive")
        if name not in want:
            raise DataError(path, f"{name}: in the archive but not listed in BUNDLE.json")
        if _sha(files[name]) != want[name]:
            raise DataError(path, f"{name}: checksum mismatch (sha256 {_sha(files[name])[:12]}..., BUNDLE.json "
                            f"says {want[name][:12]}...): the bundle was altered")
    return meta, files


def check_data(meta: dict, raw_root: str | None = None) -> list[str]:
    """Datasets whose local tables differ from those the bundle's runs read (a replay would not match)."""
    from balms.data.loading import load_dataset

    problems = []  # raw_root None: balms.paths.raw_dir(), the resolution make and the notebooks use
    for dataset, fps in meta.get("data_fingerprints", {}).items():
        local = load_dataset(dataset, Path(raw_root) if raw_root else None).fingerprint()
        if fps and local not in fps:
            problems.append(f"{dataset}: local tables fingerprint {local}, the bundle's runs read {fps}")
    return problems


def import_bundle(path: Path, *, cache_dir: Path | None = None, check_local_data: bool = True,
                  raw_root: str | None = None, prefer: str | None = None) -> dict:
    """Verify everything, then install the runs and the responses, all or nothing.

    Refused before anything is written: a changed or missing file (checksums), other local data, a run file that
    exists here with other content, a response or summary the local caches answer differently (unless `prefer`
    says which side wins, see `import_responses`). Run files are staged beside their destinations and moved in
    only once the responses are stored; a failure removes what was staged."""
    meta, files = verify_bundle(Path(path))
    if check_local_data:
        probs = check_data(meta, raw_root)
        if probs:
            raise DataError(path, "the local data differ from the data the bundle was made with: "
                            + "; ".join(probs) + " (point BALMS_RAW_DIR at the same data, or pass --no-data-check "
                            "to install anyway: cells will then re-run against your data)")
    todo, same, clash = [], 0, []
    for name, data in sorted(files.items()):
        if not name.startswith("runs/"):
            continue
        dest = paths.runs_dir() / Path(name).relative_to("runs")
        if dest.exists():
            if dest.read_bytes() == data:
                same += 1
                continue
            clash.append(dest)
        todo.append((dest, data))
    if clash:
        raise DataError(clash[0], f"exists with different content ({len(clash)} run file(s) of {path} do); nothing "
                        "installed: move them away before importing")
    plan = _plan_responses(files["responses.jsonl"].decode("utf-8"), f"{path}:responses.jsonl",
                           cache_dir=cache_dir, prefer=prefer)
    staged = []
    try:
        for dest, data in todo:
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(dest.name + ".import.tmp")
            tmp.write_bytes(data)
            staged.append((tmp, dest))
        counts = _write_responses(plan)
        for tmp, dest in staged:
            os.replace(tmp, dest)
    finally:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
    return {"profile": meta["profile"], "run_files": len(todo), "run_files_already_here": same, **counts}


def compare_tables(ours: Path, committed: Path, *, ignore=LATENCY_COLUMNS, atol: float = 1e-9,
                   only: list[str] | None = None) -> list[str]:
    """Differences between every CSV table in `committed` (those named in `only`, when given) and its regenerated
    counterpart in `ours` (index.csv and latency columns aside). Empty list = reproduced."""
    problems = []
    refs = sorted(Path(committed) / n for n in only) if only else sorted(Path(committed).glob("*.csv"))
    index = Path(committed) / "index.csv"
    if index.exists() and not only:  # only the artefacts the notebooks wrote (not e.g. `make data`'s data_summary.csv)
        listed = {Path(p).name for p in pd.read_csv(index)["path"] if str(p).endswith(".csv")}
        refs = [r for r in refs if r.name in listed]
    for ref in refs:
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
