"""A case file (balms/resources/case_study_d1.json and files shaped like it): one window, the gold label and the
rationales to check, each with an optional hand audit. Read and validated here, rendered as the judge reads it;
the grounding checker (`balms judge ground`), notebook 07 and bench_judge all start from it."""

from __future__ import annotations

import json
from pathlib import Path

from balms.data.schema import DataError


def load_case(path: Path) -> dict:
    """A case file shaped like balms/resources/case_study_d1.json, validated with errors naming the field."""
    try:
        case = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise DataError(path, f"cannot read JSON: {exc}") from exc
    if not isinstance(case.get("window"), dict) or not case["window"]:
        raise DataError(path, "expected a non-empty object {label: {'unit': str, 'values': [..]}}", field="window")
    lengths = set()
    for label, spec in case["window"].items():
        if not isinstance(spec, dict) or not isinstance(spec.get("values"), list):
            raise DataError(path, "expected {'unit': str, 'values': [numbers or null]}", field=f"window.{label}")
        bad = [v for v in spec["values"] if v is not None and not isinstance(v, (int, float))]
        if bad:
            raise DataError(path, f"non-numeric value {bad[0]!r}; expected numbers or null",
                            field=f"window.{label}.values")
        lengths.add(len(spec["values"]))
    if len(lengths) != 1:
        raise DataError(path, f"channels have different lengths {sorted(lengths)}", field="window")
    if not isinstance(case.get("rationales"), dict):
        raise DataError(path, "expected an object {name: {'text': str, ...}}", field="rationales")
    for name, r in case["rationales"].items():
        if not isinstance(r, dict) or not isinstance(r.get("text"), str):
            raise DataError(path, "expected {'text': str, ...}", field=f"rationales.{name}")
    return case


def render_case_window(case: dict) -> str:
    """A case file's window as its agents saw it, in the paper's notation (Appendix D.1's verbatim block: one
    `[Name]: [v1, ..., vN] unit` line per channel, NaN = missing; a channel's optional `decimals` fixes its digits,
    e.g. location entropy's 1.80), under the Health-LLM template's sensor heading (GLOBEM has no profile or mood)."""
    from balms.data.agent_input import SENSOR_HEADER
    from balms.judges.grounding import _shown_from_json

    lines = [SENSOR_HEADER]
    for label, spec in case["window"].items():
        dec = spec.get("decimals")
        vals = [_shown_from_json(v) if dec is None or v is None else f"{float(v):.{dec}f}" for v in spec["values"]]
        lines.append(f"[{label}]: [{', '.join(vals)}]" + (f" {spec['unit']}" if spec.get("unit") else ""))
    return "\n".join(lines)
