"""The judge loop: every pending rationale of one or many verdict files judged on one bounded pool, each verdict
appended to its own file as it is made, resumable.

Why a module of its own: how verdicts are scheduled and stored cannot change what a verdict says, so this is
outside the verdict's code key (balms.cellspec.JUDGE_ROOTS is the judge itself, balms.judges.llm_judge), as the
scheduler is outside a cell's. Why many files at once: a grid's cells hold a few rationales each, so judging cell
after cell kept at most that many requests on judge servers with hundreds of slots."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from balms.judges.llm_judge import JUDGE_RETRIES, judge_record
from balms.models.base import Backend
from balms.models.retrying import with_retries


def read_verdicts(path, key: str, retry_errors: bool = True) -> dict[str, dict]:
    """Stored verdicts of `path` made under `key`, by sample id. A torn last line (a crash mid-write) is cut off and
    reported (`balms.jsonl_store`), so the next verdict appended is readable. A backend error is no verdict: with
    `retry_errors` it is dropped from the file and judged again."""
    from balms.jsonl_store import recover_jsonl, rewrite_jsonl

    path = Path(path)
    verdicts = recover_jsonl(path, json.loads, "judge verdict")
    kept = [v for v in verdicts if not (retry_errors and v.get("unscored_code") == "backend_error")]
    if len(kept) < len(verdicts):
        rewrite_jsonl(path, [json.dumps(v, default=str) for v in kept])
    return {v["sample_id"]: v for v in kept if v.get("judge_key") == key}


def judge_files(files: Sequence[tuple[Any, Iterable, Any]], backend: Backend, *, judge_model: str, key: str,
                retry_errors: bool = True, concurrency: int = 1, **kwargs) -> list[list[dict]]:
    """Judge every record of every (verdict file path, records, tables or window function) by `judge_record`, one
    verdict per line of its file as it is made (sample_id, judge_model, judge_key and the JudgeResult): a verdict
    stored under the same `key` is reused (backend errors are judged again unless `retry_errors` is False).
    `concurrency` verdicts at once over all files, through the execution loop (balms.models.slots.drive: Ctrl-C
    stops it keeping every verdict made; the judge servers' slots meter the calls). Returns each file's verdicts
    in its records' order."""
    from balms.models.slots import drive
    from balms.records import PredictionRecord
    from balms.threads import Pool

    backend = with_retries(backend, retries=JUDGE_RETRIES)
    paths = [Path(p) for p, _, _ in files]
    records = [[r if isinstance(r, PredictionRecord) else PredictionRecord.model_validate(r) for r in rs]
               for _, rs, _ in files]
    done = [read_verdicts(p, key, retry_errors) for p in paths]
    todo = [(i, rec) for i, rs in enumerate(records)
            for rec in {r.sample_id: r for r in rs if r.sample_id not in done[i]}.values()]

    def one(i: int, rec: PredictionRecord):
        return i, rec.sample_id, judge_record(rec, files[i][2], backend, **kwargs)

    with contextlib.ExitStack() as stack:
        handles = [stack.enter_context(p.open("a")) for p in paths]

        def write(res) -> None:
            i, sid, verdict = res
            done[i][sid] = {"sample_id": sid, "judge_model": judge_model, "judge_key": key, **verdict.model_dump()}
            handles[i].write(json.dumps(done[i][sid], default=str) + "\n")
            handles[i].flush()

        pool = Pool(max(1, min(concurrency, len(todo))), "balms-judge")
        try:
            drive(((pool, k, one, i, rec) for k, (i, rec) in enumerate(todo)), write)
        finally:
            pool.close()
    return [[done[i][r.sample_id] for r in rs] for i, rs in enumerate(records)]


def judge_into(path, records: Iterable, tables_or_window_fn, backend: Backend, **kwargs) -> list[dict]:
    """`judge_files` on one verdict file (`balms judge run`): its verdicts in record order."""
    return judge_files([(path, records, tables_or_window_fn)], backend, **kwargs)[0]
