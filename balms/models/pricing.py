"""Estimated API cost per model, USD per million tokens (input, output).

Self-hosted models (vLLM, llama.cpp) have no per-token price: their cost is GPU/CPU time, reported as wall
time in the run manifest. Prices are list prices at the time of writing; override with `BALMS_PRICES_JSON`
(a JSON file mapping model id -> [input_per_mtok, output_per_mtok]).
"""

from __future__ import annotations

import json
import os
from functools import lru_cache

PRICES_PER_MTOK: dict[str, tuple[float, float]] = {
    # Anthropic list price for Claude Haiku 4.5: $1 / MTok input, $5 / MTok output.
    "claude-haiku-4-5": (1.00, 5.00),
    "claude-haiku-4-5-20251001": (1.00, 5.00),
}


@lru_cache(maxsize=1)
def _overrides() -> dict[str, tuple[float, float]]:
    path = os.environ.get("BALMS_PRICES_JSON")
    if not path:
        return {}
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    return {k: (float(v[0]), float(v[1])) for k, v in data.items()}


def price_of(model_id: str) -> tuple[float, float]:
    """(input, output) USD per million tokens; (0, 0) for self-hosted or unknown models."""
    table = {**PRICES_PER_MTOK, **_overrides()}
    return table.get(model_id, (0.0, 0.0))


def estimate_cost(model_id: str, prompt_tokens: int, completion_tokens: int) -> float:
    pin, pout = price_of(model_id)
    return (prompt_tokens * pin + completion_tokens * pout) / 1_000_000
